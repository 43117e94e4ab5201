//! A tolerant reader of the agent's `/metrics`: the Prometheus text format
//! and OpenMetrics alike. It reads `name{labels} value` lines and ignores
//! the rest (`#` lines, `# EOF`, timestamps and exemplars after the value),
//! so the tests do not depend on how the agent renders its metrics.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};

/// One sample's identity: its name and its labels, in any order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// Every sample of one scrape.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    samples: BTreeMap<Key, f64>,
}

impl Metrics {
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, rest) = key(line).with_context(|| format!("reading {line:?}"))?;
            let value = rest
                .split_whitespace()
                .next()
                .with_context(|| format!("no value in {line:?}"))?;
            let value = parse_value(value).with_context(|| format!("value of {line:?}"))?;
            samples.insert(key, value);
        }
        Ok(Self { samples })
    }

    /// The sample written as `name` or `name{label="value",...}`.
    pub fn get(&self, sample: &str) -> Option<f64> {
        let (key, rest) = key(sample).ok()?;
        rest.trim().is_empty().then_some(())?;
        self.samples.get(&key).copied()
    }

    /// The sum of the samples of `name` that have every label of `labels`
    /// (and maybe others), or `None` if none has.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples
            .iter()
            .filter(|(k, _)| {
                k.name == name
                    && labels
                        .iter()
                        .all(|(l, v)| k.labels.get(*l).is_some_and(|have| have == v))
            })
            .map(|(_, v)| *v)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }

    /// Like [`Self::get`], failing with the samples of that name if absent.
    pub fn value(&self, sample: &str) -> anyhow::Result<f64> {
        self.get(sample).with_context(|| {
            let name = sample.split('{').next().unwrap_or(sample);
            let near: Vec<String> = self
                .samples
                .keys()
                .filter(|k| k.name.starts_with(name))
                .map(|k| format!("{}{:?}", k.name, k.labels))
                .collect();
            format!("no sample {sample:?} on /metrics; of that name: {near:?}")
        })
    }

    /// A histogram's buckets (upper bound, cumulative count), in order.
    pub fn buckets(&self, histogram: &str) -> Vec<(f64, f64)> {
        let name = format!("{histogram}_bucket");
        let mut out: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|(k, _)| k.name == name)
            .filter_map(|(k, v)| Some((parse_value(k.labels.get("le")?).ok()?, *v)))
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

/// The upper bound of the bucket holding the `q`-quantile (0..=1) of the
/// observations `after` added over `before` (two scrapes of one
/// histogram), or `None` if nothing was observed in between.
pub fn quantile_bound(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let old = |le: f64| {
        before
            .iter()
            .find(|(b, _)| *b == le)
            .map_or(0.0, |(_, n)| *n)
    };
    let diffs: Vec<(f64, f64)> = after.iter().map(|(le, n)| (*le, n - old(*le))).collect();
    let total = diffs.last()?.1;
    if total <= 0.0 {
        return None;
    }
    diffs
        .iter()
        .find(|(_, n)| *n >= q * total)
        .map(|(le, _)| *le)
}

fn parse_value(v: &str) -> anyhow::Result<f64> {
    Ok(match v {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => v.parse()?,
    })
}

/// Reads `name` or `name{labels}` at the start of `s`; returns the rest.
fn key(s: &str) -> anyhow::Result<(Key, &str)> {
    let end = s.find(['{', ' ', '\t']).unwrap_or(s.len());
    let name = s[..end].to_owned();
    if name.is_empty() {
        bail!("no metric name");
    }
    let mut labels = BTreeMap::new();
    let mut rest = &s[end..];
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            rest = rest.trim_start_matches([' ', ',']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, after) = rest.split_once('=').context("a label without '='")?;
            let (value, after) = quoted(after.trim_start())?;
            labels.insert(label.trim().to_owned(), value);
            rest = after;
        }
    }
    Ok((Key { name, labels }, rest))
}

/// A double-quoted label value with its escapes (`\\`, `\"`, `\n`).
fn quoted(s: &str) -> anyhow::Result<(String, &str)> {
    let body = s
        .strip_prefix('"')
        .context("a label value without quotes")?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &body[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, e)) => out.push(e),
                None => break,
            },
            c => out.push(c),
        }
    }
    bail!("an unterminated label value")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROMETHEUS: &str = "\
# HELP lbagent_invalid_objects_total Malformed objects skipped.
# TYPE lbagent_invalid_objects_total counter
lbagent_invalid_objects_total{kind=\"Service\"} 3
lbagent_invalid_objects_total{kind=\"EndpointSlice\"} 1
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7634e9
x_bucket{le=\"0.001\"} 1
x_bucket{le=\"0.01\"} 4
x_bucket{le=\"+Inf\"} 5
x_count 5
";

    /// What prometheus-client writes: OpenMetrics, labels in any order,
    /// `# EOF`, exemplars and timestamps after the value.
    const OPENMETRICS: &str = "\
# HELP lbagent_invalid_objects Malformed objects skipped.
# TYPE lbagent_invalid_objects counter
lbagent_invalid_objects_total{kind=\"Service\"} 3 # {trace_id=\"x\"} 1.0 1.6e9
lbagent_datapath_events_total{event=\"a \\\"b\\\"\",cpu=\"all\"} 7.0 1700000000
kubeproxy_sync_proxy_rules_duration_seconds_count 12
# EOF
";

    #[test]
    fn reads_both_formats_and_ignores_what_follows_the_value() {
        let m = Metrics::parse(PROMETHEUS).unwrap();
        assert_eq!(
            m.get(r#"lbagent_invalid_objects_total{kind="Service"}"#),
            Some(3.0)
        );
        assert_eq!(
            m.get(r#"lbagent_invalid_objects_total{kind="EndpointSlice"}"#),
            Some(1.0)
        );
        assert_eq!(
            m.get("lbagent_invalid_objects_total"),
            None,
            "labels must match"
        );
        assert_eq!(m.get("x_count"), Some(5.0));
        assert_eq!(
            m.get("kubeproxy_sync_proxy_rules_last_timestamp_seconds"),
            Some(1.7634e9)
        );
        let m = Metrics::parse(OPENMETRICS).unwrap();
        assert_eq!(
            m.get(r#"lbagent_invalid_objects_total{kind="Service"}"#),
            Some(3.0)
        );
        assert_eq!(
            m.get(r#"lbagent_datapath_events_total{cpu="all", event="a \"b\""}"#),
            Some(7.0)
        );
        assert_eq!(
            m.get("kubeproxy_sync_proxy_rules_duration_seconds_count"),
            Some(12.0)
        );
        assert_eq!(m.sum("lbagent_invalid_objects_total", &[]), Some(3.0));
        let m = Metrics::parse(PROMETHEUS).unwrap();
        let sum = |labels: &[(&str, &str)]| m.sum("lbagent_invalid_objects_total", labels);
        assert_eq!(sum(&[]), Some(4.0));
        assert_eq!(sum(&[("kind", "EndpointSlice")]), Some(1.0));
        assert_eq!(sum(&[("kind", "Node")]), None);
        assert!(m.value("nope").is_err());
        assert!(Metrics::parse("x{le=\"1} 2").is_err(), "unterminated");
    }

    #[test]
    fn histogram_quantiles_come_from_the_difference_of_two_scrapes() {
        let before = Metrics::parse(PROMETHEUS).unwrap().buckets("x");
        assert_eq!(before, [(0.001, 1.0), (0.01, 4.0), (f64::INFINITY, 5.0)]);
        let after = [(0.001, 1.0), (0.01, 14.0), (f64::INFINITY, 15.0)];
        // 10 new observations, all in (0.001, 0.01].
        assert_eq!(quantile_bound(&before, &after, 0.5), Some(0.01));
        assert_eq!(quantile_bound(&before, &after, 0.99), Some(0.01));
        assert_eq!(quantile_bound(&before, &before, 0.5), None);
    }
}
