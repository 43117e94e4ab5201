//! Prometheus metrics. Names mirror kube-proxy's where the meaning matches
//! (`kubeproxy_*`); the rest are ours (`lbagent_*`). Rendered in the
//! Prometheus text format, version 0.0.4.

use std::{
    fmt::Write as _,
    path::PathBuf,
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

/// Histogram bucket bounds in seconds: fine enough below 10 ms to read a
/// per-event latency, wide enough for a 10,000-Service full sync.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_2, 0.000_3, 0.000_5, 0.000_75, 0.001, 0.001_5, 0.002, 0.003, 0.005,
    0.007_5, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A cumulative histogram over [`BUCKETS`].
#[derive(Debug)]
pub struct Histogram {
    inner: Mutex<HistogramData>,
}

#[derive(Debug, Clone, Default)]
struct HistogramData {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            inner: Mutex::new(HistogramData {
                counts: vec![0; BUCKETS.len()],
                ..HistogramData::default()
            }),
        }
    }
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let mut h = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            h.counts[i] += 1;
        }
        h.sum += secs;
        h.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let h = self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone();
        header(out, name, help, "histogram");
        let mut cumulative = 0;
        for (bound, n) in BUCKETS.iter().zip(&h.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum {}", h.sum);
        let _ = writeln!(out, "{name}_count {}", h.count);
    }
}

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (stored as f64 bits).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// Every metric the agent exports.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Every sync, full or partial.
    pub sync_duration: Histogram,
    pub sync_full_duration: Histogram,
    pub sync_partial_duration: Histogram,
    /// Unix time of the last completed sync.
    pub sync_last_timestamp: Gauge,
    /// EndpointSlice `last-change-trigger-time` to map write.
    pub network_programming: Histogram,
    /// Watch event received by the agent to its map write.
    pub event_to_write: Histogram,
    pub service_changes: Counter,
    pub endpoint_changes: Counter,
    pub services_programmed: Gauge,
    pub frontends_programmed: Gauge,
    pub backends_programmed: Gauge,
    pub excluded_endpoints: Counter,
    pub invalid_services: Counter,
    pub invalid_slices: Counter,
    pub ignored_services: Counter,
    pub ignored_slices: Counter,
    /// Per `Feature::ALL` index.
    pub unsupported: [Counter; 8],
    pub map_full_errors: Counter,
    pub map_write_errors: Counter,
    /// The pinned maps directory whose `LB_STATS` counters are read at
    /// every scrape; set once the programs are loaded.
    pub datapath_maps: OnceLock<PathBuf>,
}

impl Metrics {
    pub fn invalid(&self, kind: crate::model::ObjectKind) -> &Counter {
        match kind {
            crate::model::ObjectKind::Service => &self.invalid_services,
            crate::model::ObjectKind::EndpointSlice => &self.invalid_slices,
        }
    }

    pub fn ignored(&self, kind: crate::model::ObjectKind) -> &Counter {
        match kind {
            crate::model::ObjectKind::Service => &self.ignored_services,
            crate::model::ObjectKind::EndpointSlice => &self.ignored_slices,
        }
    }

    pub fn unsupported(&self, f: crate::model::Feature) -> &Counter {
        let i = crate::model::Feature::ALL
            .iter()
            .position(|x| *x == f)
            .unwrap_or(0);
        &self.unsupported[i]
    }

    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        self.sync_duration.render(
            &mut out,
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "Time to recompute and write the changed map entries, full or partial.",
        );
        self.sync_full_duration.render(
            &mut out,
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "Time of full syncs (initial lists, relists).",
        );
        self.sync_partial_duration.render(
            &mut out,
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "Time of partial syncs (the Services touched by events).",
        );
        gauge(
            &mut out,
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "Unix time of the last completed sync.",
            self.sync_last_timestamp.get(),
        );
        self.network_programming.render(
            &mut out,
            "kubeproxy_network_programming_duration_seconds",
            "From an EndpointSlice's last-change-trigger-time to the map write.",
        );
        self.event_to_write.render(
            &mut out,
            "lbagent_watch_event_to_map_write_seconds",
            "From the agent receiving a watch event to the map write it caused.",
        );
        counter(
            &mut out,
            "kubeproxy_sync_proxy_rules_service_changes_total",
            "Service add/update/delete events seen.",
            self.service_changes.get(),
        );
        counter(
            &mut out,
            "kubeproxy_sync_proxy_rules_endpoint_changes_total",
            "EndpointSlice add/update/delete events seen.",
            self.endpoint_changes.get(),
        );
        gauge(
            &mut out,
            "lbagent_services_programmed",
            "Services with at least one programmed frontend.",
            self.services_programmed.get(),
        );
        gauge(
            &mut out,
            "lbagent_frontends_programmed",
            "VIP:port/protocol entries in the services map.",
            self.frontends_programmed.get(),
        );
        gauge(
            &mut out,
            "lbagent_backends_programmed",
            "Entries in the backends map.",
            self.backends_programmed.get(),
        );
        counter(
            &mut out,
            "lbagent_excluded_endpoints_total",
            "Endpoints newly found in an --exclude-cluster-cidr range and not programmed.",
            self.excluded_endpoints.get(),
        );
        by_kind(
            &mut out,
            "lbagent_invalid_objects_total",
            "Malformed objects skipped.",
            [&self.invalid_services, &self.invalid_slices],
        );
        by_kind(
            &mut out,
            "lbagent_ignored_objects_total",
            "Objects deliberately not programmed (headless, ExternalName, FQDN, IPv6 slices).",
            [&self.ignored_services, &self.ignored_slices],
        );
        header(
            &mut out,
            "lbagent_unsupported_features_total",
            "Services found using a feature not programmed yet, by feature.",
            "counter",
        );
        for (f, c) in crate::model::Feature::ALL.iter().zip(&self.unsupported) {
            let _ = writeln!(
                out,
                "lbagent_unsupported_features_total{{feature=\"{f}\"}} {}",
                c.get()
            );
        }
        counter(
            &mut out,
            "lbagent_map_full_errors_total",
            "Map writes refused because a map is full.",
            self.map_full_errors.get(),
        );
        counter(
            &mut out,
            "lbagent_map_write_errors_total",
            "Map writes or deletes that failed for another reason.",
            self.map_write_errors.get(),
        );
        if let Some(dir) = self.datapath_maps.get() {
            // Absent while an older layout's programs still run (a migration).
            if let Ok(totals) = crate::datapath::stats::read(dir) {
                header(
                    &mut out,
                    "lbagent_datapath_events_total",
                    "What the eBPF programs did, by event: translations, reverse \
                     translations, refusals by reason, pass-throughs.",
                    "counter",
                );
                for (event, n) in crate::datapath::stats::named(&totals) {
                    let _ = writeln!(
                        out,
                        "lbagent_datapath_events_total{{event=\"{event}\"}} {n}"
                    );
                }
            }
        }
        out
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    header(out, name, help, "counter");
    let _ = writeln!(out, "{name} {v}");
}

/// A counter family labelled `kind="Service"` / `kind="EndpointSlice"`.
fn by_kind(out: &mut String, name: &str, help: &str, [services, slices]: [&Counter; 2]) {
    header(out, name, help, "counter");
    for (kind, c) in [("Service", services), ("EndpointSlice", slices)] {
        let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {}", c.get());
    }
}

fn gauge(out: &mut String, name: &str, help: &str, v: f64) {
    header(out, name, help, "gauge");
    let _ = writeln!(out, "{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_and_counts_everything() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(40));
        h.observe(Duration::from_millis(4));
        h.observe(Duration::from_secs(100));
        let mut out = String::new();
        h.render(&mut out, "x", "help");
        assert!(out.contains("x_bucket{le=\"0.00005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"30\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count 3\n"), "{out}");
    }

    #[test]
    fn render_names_every_metric_once() {
        let m = Metrics::default();
        m.invalid_slices.inc();
        let text = m.render();
        assert!(text.contains("lbagent_invalid_objects_total{kind=\"EndpointSlice\"} 1\n"));
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
        let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate metric family");
    }
}
