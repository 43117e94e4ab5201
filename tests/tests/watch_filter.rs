//! kube-proxy's server-side label filter: Services and EndpointSlices
//! labelled for another proxy (`service.kubernetes.io/service-proxy-name`)
//! or headless (`service.kubernetes.io/headless`) are never sent to the
//! agent, neither in its lists nor in its watches. The stand-in apiserver
//! records every object it sent. Needs root; fails loudly without it.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use lb_tests::{apiserver::ApiServer, scenario::Bed};
use serde_json::{Value, json};

const PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
const HEADLESS: &str = "service.kubernetes.io/headless";
const IGNORED_SERVICES: &str = r#"lbagent_ignored_objects_total{kind="Service"}"#;
const IGNORED_SLICES: &str = r#"lbagent_ignored_objects_total{kind="EndpointSlice"}"#;

fn service(name: &str, vip: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "default", "name": name, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": vip,
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
        },
    })
}

/// A slice of `svc` with one ready endpoint; `labels` are added to the
/// service-name label, as the slice controller copies them from the Service.
fn slice(svc: &str, ip: &str, labels: Value) -> Value {
    let mut all = json!({"kubernetes.io/service-name": svc});
    for (k, v) in labels.as_object().into_iter().flatten() {
        all[k] = v.clone();
    }
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"namespace": "default", "name": format!("{svc}-1"), "labels": all},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
    })
}

/// The frontends (`addr:port`) in an `lb-agent dump` listing.
fn frontends(dump: &str) -> BTreeSet<String> {
    dump.lines()
        .filter(|l| l.starts_with("TCP ") || l.starts_with("UDP "))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Polls `bed`'s maps until they hold exactly `want`.
fn wait_for_frontends(bed: &Bed, want: &BTreeSet<String>) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = frontends(&bed.pins.dump()?);
        if &now == want {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "frontends {now:?}, expected {want:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn objects_for_another_proxy_or_headless_never_reach_the_agent() -> anyhow::Result<()> {
    let api = ApiServer::start()?;
    let proxy = || json!({ PROXY_NAME: "other-proxy" });
    let headless = || json!({ HEADLESS: "" });
    for obj in [
        service("web", "10.96.50.1", json!({})),
        slice("web", "10.42.0.1", json!({})),
        service("elsewhere", "10.96.50.2", proxy()),
        slice("elsewhere", "10.42.0.2", proxy()),
        service("marked-headless", "10.96.50.3", headless()),
        slice("marked-headless", "10.42.0.3", headless()),
        // Ignored by the model, not by the filter: shows that an ignored
        // object that does arrive is counted.
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"namespace": "default", "name": "external"},
            "spec": {"type": "ExternalName", "externalName": "example.com"},
        }),
    ] {
        api.apply(obj)?;
    }
    let mut bed = Bed::new()?;
    bed.start_agent_kube(&api, &[])?;
    wait_for_frontends(&bed, &set(&["10.96.50.1:80"]))?;

    // While watching: a new labelled Service and slice, and updates to the
    // labelled ones; then a plain Service, which shows the agent has read
    // its watch streams past all of them.
    api.apply(service("elsewhere-2", "10.96.50.5", proxy()))?;
    api.apply(slice("elsewhere-2", "10.42.0.5", proxy()))?;
    api.apply(slice("elsewhere", "10.42.0.6", proxy()))?;
    api.apply(slice("marked-headless", "10.42.0.7", headless()))?;
    api.apply(service("web-2", "10.96.50.4", json!({})))?;
    api.apply(slice("web-2", "10.42.0.4", json!({})))?;
    wait_for_frontends(&bed, &set(&["10.96.50.1:80", "10.96.50.4:80"]))?;
    // A frontend shows before its slice does: wait until the slice stream
    // too is past the labelled slices (each stream is sent in order).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !api.sent("EndpointSlice", Some("default"), "web-2-1") {
        anyhow::ensure!(Instant::now() < deadline, "slice web-2-1 never sent");
        std::thread::sleep(Duration::from_millis(50));
    }

    for (kind, name) in [
        ("Service", "elsewhere"),
        ("EndpointSlice", "elsewhere-1"),
        ("Service", "marked-headless"),
        ("EndpointSlice", "marked-headless-1"),
        ("Service", "elsewhere-2"),
        ("EndpointSlice", "elsewhere-2-1"),
    ] {
        assert!(
            !api.sent(kind, Some("default"), name),
            "the apiserver sent {kind} {name} to the agent"
        );
    }
    for (kind, name) in [
        ("Service", "web"),
        ("EndpointSlice", "web-1"),
        ("Service", "external"),
        ("Service", "web-2"),
    ] {
        assert!(
            api.sent(kind, Some("default"), name),
            "{kind} {name} not sent"
        );
    }
    // Without the filter the model would have ignored (and counted) the
    // two labelled Services too.
    assert_eq!(
        bed.agent().metric(IGNORED_SERVICES)?,
        1.0,
        "only `external`"
    );
    assert_eq!(bed.agent().metric(IGNORED_SLICES)?, 0.0);

    // A programmed Service that gets the label leaves the agent's view:
    // the filtered watch turns the update into a delete.
    api.apply(service("web-2", "10.96.50.4", proxy()))?;
    wait_for_frontends(&bed, &set(&["10.96.50.1:80"]))?;
    Ok(())
}
