//! `cargo xtask monitoring`: writes the generated files of
//! `manifests/monitoring/` from their sources in `monitoring/`: the
//! PrometheusRule wrapping `alerts.yaml` (kustomize cannot wrap a file),
//! and the copy of the Grafana dashboard its configMapGenerator reads
//! (kustomize reads no file outside its directory).
//! `tests/tests/monitoring.rs` fails when they differ from their sources.

use std::{fs, path::Path};

use anyhow::Context as _;

/// What the generated PrometheusRule starts with, before its `spec`.
const RULE_HEAD: &str = "\
# Generated from monitoring/alerts.yaml by `cargo xtask monitoring`: edit that
# file and run it again (tests/tests/monitoring.rs fails when they differ).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: lb-agent
  namespace: kube-system
  labels:
    app.kubernetes.io/name: lb-agent
spec:
";

pub(crate) fn run() -> anyhow::Result<()> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let source = root.join("monitoring");
    let out = root.join("manifests/monitoring");
    let rules = read(&source.join("alerts.yaml"))?;
    write(&out.join("prometheusrule.yaml"), &prometheus_rule(&rules))?;
    let dashboard = read(&source.join("grafana-dashboard.json"))?;
    write(&out.join("grafana-dashboard.json"), &dashboard)?;
    Ok(())
}

/// `rules` (a rule file: `groups:` at the top) as a PrometheusRule's
/// `spec`: indented by two spaces, its leading comments left out.
fn prometheus_rule(rules: &str) -> String {
    let mut out = RULE_HEAD.to_owned();
    let body = rules.lines().skip_while(|l| l.starts_with('#'));
    for line in body {
        if !line.is_empty() {
            out += "  ";
            out += line;
        }
        out += "\n";
    }
    out
}

fn read(path: &Path) -> anyhow::Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("monitoring: wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::prometheus_rule;

    #[test]
    fn the_rule_file_becomes_the_spec_without_its_leading_comments() {
        let rules = "# about\n# more\ngroups:\n  - name: g\n\n    rules: []\n";
        let out = prometheus_rule(rules);
        assert!(
            out.ends_with("spec:\n  groups:\n    - name: g\n\n      rules: []\n"),
            "{out}"
        );
        assert!(!out.contains("# about"), "{out}");
    }
}
