//! `monitoring/`: the Grafana dashboard and the alert rules select only
//! metrics a running agent exports (the real agent against the stand-in
//! apiserver: privileged, fails loudly without root), the rules pass
//! `promtool`'s checks and their unit tests, and `manifests/monitoring/`
//! renders with the same rules and dashboard as `monitoring/`.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use lb_fixtures::{Slice, Svc, yaml};
use lb_tests::{
    apiserver::ApiServer,
    manifests,
    promql::metric_names,
    scenario::{Bed, apply_yaml},
};
use serde_json::Value as Json;
use yaml_serde::Value as Yaml;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn dashboard() -> Json {
    serde_json::from_str(&read("monitoring/grafana-dashboard.json")).expect("the dashboard is JSON")
}

fn rules() -> Yaml {
    yaml_serde::from_str(&read("monitoring/alerts.yaml")).expect("alerts.yaml is YAML")
}

/// Every alerting rule of a rule file's `groups`.
fn alerts(rules: &Yaml) -> Vec<&Yaml> {
    let groups = rules["groups"].as_sequence().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules"))
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// Every PromQL expression of the dashboard: each target's `expr`, and each
/// template variable's query (`label_values(<expr>, <label>)`: its `<expr>`).
fn dashboard_exprs(dash: &Json) -> Vec<String> {
    fn walk(v: &Json, out: &mut Vec<String>) {
        match v {
            Json::Object(o) => {
                if let Some(Json::String(e)) = o.get("expr") {
                    out.push(e.clone());
                }
                o.values().for_each(|v| walk(v, out));
            }
            Json::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    for var in dash["templating"]["list"].as_array().expect("variables") {
        if var["type"] != "query" {
            continue;
        }
        let query = var["query"]["query"]
            .as_str()
            .expect("a query variable's query");
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.rsplit_once(','))
            .map_or(query, |(expr, _label)| expr);
        out.push(inner.to_owned());
    }
    out
}

/// Every alert's `expr`.
fn rule_exprs(rules: &Yaml) -> Vec<String> {
    alerts(rules)
        .iter()
        .map(|r| r["expr"].as_str().expect("an expr").to_owned())
        .collect()
}

/// The metric names the dashboard and the rules select, but `up`, which
/// Prometheus writes itself.
fn referenced() -> BTreeSet<String> {
    let mut exprs = dashboard_exprs(&dashboard());
    exprs.extend(rule_exprs(&rules()));
    exprs
        .iter()
        .flat_map(|e| metric_names(e))
        .filter(|n| n != "up")
        .collect()
}

/// The names an exposition exports: every sample's, every `# TYPE`
/// family's, and a histogram family's `_bucket`, `_sum` and `_count`.
fn exported(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            let (Some(family), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            out.insert(family.to_owned());
            if kind == "histogram" {
                for suffix in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{family}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            out.insert(name.to_owned());
        }
    }
    out
}

#[test]
fn the_dashboard_and_the_rules_select_only_metrics_a_running_agent_exports() -> anyhow::Result<()> {
    let wanted = referenced();
    // The extraction found what the assets are about.
    for key in [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "lbagent_watch_event_to_map_write_seconds_bucket",
        "lbagent_datapath_events_total",
        "lbagent_conntrack_entries",
        "lbagent_conntrack_max_entries",
        "lbagent_nat_max_entries",
        "lbagent_map_write_errors_total",
        "lbagent_frontends_waiting_for_room",
        "lbagent_sync_failures_total",
        "lbagent_ready",
        "lbagent_xdp_attach_failures",
        "rest_client_requests_total",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
    ] {
        assert!(wanted.contains(key), "{key} not found in {wanted:?}");
    }

    let mut bed = Bed::new()?;
    let api = ApiServer::start()?;
    apply_yaml(
        &api,
        &yaml([
            lb_fixtures::Object::from(
                Svc::new("default", "web")
                    .cluster_ip("10.96.100.1")
                    .port("http", 80, "TCP"),
            ),
            Slice::new("default", "web-a")
                .service("web")
                .port("http", 8080, "TCP")
                .ready(&["10.42.0.1"])
                .into(),
        ]),
    )?;
    bed.start_agent_kube(&api, &[])?;
    let (status, text) = bed.agent().http_get("metrics", "/metrics")?;
    assert_eq!(status, 200, "{text}");
    let have = exported(&text);
    let missing: Vec<&String> = wanted.iter().filter(|n| !have.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard or the rules select metrics the agent does not export: {missing:?}\n\
         exported: {have:?}"
    );
    Ok(())
}

/// `promtool args...` in `dir`, failing with its output.
fn promtool(dir: &Path, args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): it is missing; `cargo xtask setup` installs it \
                 (Debian package prometheus)"
            )
        });
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let dir = root().join("monitoring");
    promtool(&dir, &["check", "rules", "alerts.yaml"]);
    promtool(&dir, &["test", "rules", "alerts_test.yaml"]);
    // The PrometheusRule's spec is a rule file promtool accepts too.
    let tmp = tempdir("prometheusrule");
    let spec = prometheus_rule_spec(&read("manifests/monitoring/prometheusrule.yaml"));
    fs::write(
        tmp.join("spec.yaml"),
        yaml_serde::to_string(&spec).expect("YAML"),
    )
    .expect("write spec.yaml");
    promtool(&tmp, &["check", "rules", "spec.yaml"]);
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn every_alert_is_tested_firing_and_not_firing() {
    let tests: Yaml =
        yaml_serde::from_str(&read("monitoring/alerts_test.yaml")).expect("alerts_test.yaml");
    let (mut fires, mut quiet) = (BTreeSet::new(), BTreeSet::new());
    for test in tests["tests"].as_sequence().expect("tests") {
        for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
            let name = case["alertname"].as_str().expect("alertname").to_owned();
            match case["exp_alerts"]
                .as_sequence()
                .is_some_and(|a| !a.is_empty())
            {
                true => fires.insert(name),
                false => quiet.insert(name),
            };
        }
    }
    let rules = rules();
    let names: BTreeSet<String> = alerts(&rules)
        .iter()
        .map(|r| r["alert"].as_str().expect("alert").to_owned())
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let untested = |seen: &BTreeSet<String>| names.difference(seen).cloned().collect::<Vec<_>>();
    assert!(
        untested(&fires).is_empty(),
        "never fired: {:?}",
        untested(&fires)
    );
    assert!(
        untested(&quiet).is_empty(),
        "never quiet: {:?}",
        untested(&quiet)
    );
}

#[test]
fn every_alert_waits_names_a_severity_and_says_what_to_do() {
    let rules = rules();
    for rule in alerts(&rules) {
        let name = rule["alert"].as_str().expect("alert");
        assert!(rule["for"].as_str().is_some(), "{name}: no `for:`");
        let severity = rule["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "{name}: severity {severity:?}"
        );
        for annotation in ["summary", "description"] {
            let text = rule["annotations"][annotation].as_str().unwrap_or_default();
            assert!(!text.trim().is_empty(), "{name}: no {annotation}");
        }
        // Ours, not any other job's (rest_client_requests_total and
        // kubeproxy_* have other exporters).
        let expr = rule["expr"].as_str().expect("expr");
        assert!(expr.contains(r#"job="lb-agent""#), "{name}: {expr}");
    }
}

/// A PrometheusRule's `spec`.
fn prometheus_rule_spec(text: &str) -> Yaml {
    let rule: Yaml = yaml_serde::from_str(text).expect("prometheusrule.yaml is YAML");
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

#[test]
fn the_generated_manifests_are_their_sources() {
    let regenerate = "run `cargo xtask monitoring` after editing monitoring/";
    assert_eq!(
        prometheus_rule_spec(&read("manifests/monitoring/prometheusrule.yaml")),
        rules(),
        "manifests/monitoring/prometheusrule.yaml differs from monitoring/alerts.yaml: {regenerate}"
    );
    assert!(
        read("manifests/monitoring/grafana-dashboard.json")
            == read("monitoring/grafana-dashboard.json"),
        "manifests/monitoring/grafana-dashboard.json differs from monitoring/'s: {regenerate}"
    );
}

#[test]
fn the_dashboard_asks_for_its_prometheus_and_uses_it_everywhere() {
    let dash = dashboard();
    assert_eq!(dash["schemaVersion"], 39);
    let vars = dash["templating"]["list"].as_array().expect("variables");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert_eq!(var("instance")["type"], "query");
    let panels = dash["panels"].as_array().expect("panels");
    let mut titles = BTreeSet::new();
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let title = p["title"].as_str().expect("a title");
        titles.insert(title);
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            let expr = t["expr"].as_str().expect("expr");
            assert!(
                expr.contains(r#"job="lb-agent""#) && expr.contains("$instance"),
                "{title}: {expr}"
            );
        }
    }
    assert!(titles.len() >= 12, "{titles:?}");
}

#[test]
fn the_monitoring_manifests_render_and_select_the_agents() -> anyhow::Result<()> {
    let docs = manifests::render(&root().join("manifests/monitoring"))?;
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} rendered"))
    };
    // The Service selects the DaemonSet's pods on the metrics port.
    let daemonset: Yaml = yaml_serde::from_str(&read("manifests/daemonset.yaml"))?;
    let pod_labels = &daemonset["spec"]["template"]["metadata"]["labels"];
    let service = of("Service");
    assert_eq!(
        service["metadata"]["namespace"],
        daemonset["metadata"]["namespace"]
    );
    for (k, v) in service["spec"]["selector"]
        .as_mapping()
        .expect("a selector")
    {
        assert_eq!(&pod_labels[k.as_str().expect("a key")], v, "{k:?}");
    }
    let port = &service["spec"]["ports"][0];
    assert_eq!(port["targetPort"], metrics_port());
    // The ServiceMonitor selects that Service, and names the job the rules select.
    let monitor = of("ServiceMonitor");
    let service_labels = &service["metadata"]["labels"];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("matchLabels")
    {
        assert_eq!(&service_labels[k.as_str().expect("a key")], v, "{k:?}");
    }
    let job_label = monitor["spec"]["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(service_labels[job_label], "lb-agent");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], port["name"]);
    // The PodMonitor alternative selects the pods too.
    let pod_monitor: Yaml = yaml_serde::from_str(&read("manifests/monitoring/podmonitor.yaml"))?;
    for (k, v) in pod_monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("matchLabels")
    {
        assert_eq!(&pod_labels[k.as_str().expect("a key")], v, "{k:?}");
    }
    assert_eq!(
        pod_labels[pod_monitor["spec"]["jobLabel"].as_str().expect("jobLabel")],
        "lb-agent"
    );
    // The rules and the dashboard, as they are in monitoring/.
    assert_eq!(of("PrometheusRule")["spec"], rules());
    let dashboards = of("ConfigMap");
    assert_eq!(dashboards["metadata"]["labels"]["grafana_dashboard"], "1");
    let json = dashboards["data"]["lb-agent.json"]
        .as_str()
        .expect("the dashboard");
    assert_eq!(serde_json::from_str::<Json>(json)?, dashboard());
    // Optional: manifests/ itself does not pull it in.
    assert!(!read("manifests/kustomization.yaml").contains("monitoring"));
    Ok(())
}

/// The port of the ConfigMap's `metricsBindAddress`: what the agent
/// listens on once an operator opens it to 0.0.0.0.
fn metrics_port() -> u64 {
    let cm: Yaml = yaml_serde::from_str(&read("manifests/configmap.yaml")).expect("configmap");
    let conf: Yaml = yaml_serde::from_str(cm["data"]["config.conf"].as_str().expect("config.conf"))
        .expect("conf");
    let addr = conf["metricsBindAddress"]
        .as_str()
        .expect("metricsBindAddress");
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port")
}

/// A fresh directory under the system's temporary directory.
fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(lb_tests::unique(tag));
    fs::create_dir_all(&dir).expect("temp dir");
    dir
}
