//! The real `lb-agent` against the stand-in apiserver: its first sync
//! waits for this node's Node, so that topology hints apply from the
//! start, at most 30 s longer than for the lists (kube-proxy's bound), and
//! not at all when the apiserver refuses to show the Node. What was
//! programmed is read with `lb-agent dump`. Needs root; fails loudly
//! without it.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use lb_fixtures::{Ep, Node, Object, Slice, Svc, json, yaml};
use lb_tests::{
    agent::{KUBE_NODE, PATIENCE},
    apiserver::{ApiServer, Verb},
    rig::Rig,
    scenario::apply_yaml,
    unique,
};

/// lb-agent's bound on the wait (`syncer/node_wait.rs`, kube-proxy's
/// `nodeIPsTimeout`).
const NODE_WAIT: Duration = Duration::from_secs(30);
const ZONED: &str = "10.96.207.1:80";
const ZONE_A: [&str; 2] = ["10.42.207.1:8080", "10.42.207.2:8080"];
const ZONE_B: [&str; 2] = ["10.42.207.3:8080", "10.42.207.4:8080"];
const MISSING: &str = "lbagent_node_missing";
// The refused-Node test tells a wait from none by this.
const _: () = assert!(PATIENCE.as_secs() < NODE_WAIT.as_secs());

/// Service `zoned` with two endpoints hinted for each of zone-a and zone-b.
fn zoned() -> String {
    let hinted = |ip: &str, zone: &str| Ep::new(ip).ready(true).zone(zone).hint_zone(zone);
    yaml([
        Object::from(
            Svc::new("default", "zoned")
                .cluster_ip("10.96.207.1")
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "zoned-1")
            .service("zoned")
            .port("http", 8080, "TCP")
            .endpoints([
                hinted("10.42.207.1", "zone-a"),
                hinted("10.42.207.2", "zone-a"),
                hinted("10.42.207.3", "zone-b"),
                hinted("10.42.207.4", "zone-b"),
            ])
            .into(),
    ])
}

/// The backends `lb-agent dump` lists under TCP frontend `addr`.
fn backends(dump: &str, addr: &str) -> BTreeSet<String> {
    let mut lines = dump
        .lines()
        .skip_while(|l| !(l.starts_with("TCP") && l.split_whitespace().nth(1) == Some(addr)));
    assert!(
        lines.next().is_some(),
        "no TCP {addr} in the listing:\n{dump}"
    );
    lines
        .take_while(|l| l.starts_with("  ->"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

fn set<'a>(items: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    items.into_iter().map(str::to_owned).collect()
}

/// Polls `check` until it holds, for at most [`PATIENCE`].
fn eventually(what: &str, mut check: impl FnMut() -> anyhow::Result<bool>) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while !check()? {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[test]
fn the_first_sync_waits_for_this_nodes_node_and_programs_its_zone() -> anyhow::Result<()> {
    let api = ApiServer::start()?;
    apply_yaml(&api, &zoned())?;
    let mut rig = Rig::new(&unique("nodewait"))?;
    rig.spawn_agent_kube_unregistered(&api, &[])?;
    // Both lists are done once their watches are open; the Node's list
    // (empty) too.
    eventually("the agent watching", || {
        Ok(["services", "endpointslices", "nodes"]
            .iter()
            .all(|r| api.open_watches(r) > 0))
    })?;
    // The programs' counters show on /metrics once they are loaded, the
    // last thing the first sync needs but the Node.
    let agent = rig.agent();
    eventually("the programs loaded", || {
        Ok(agent
            .metrics()?
            .sum(
                "lbagent_datapath_events_total",
                &[("reason", "connect_translated")],
            )
            .is_some())
    })?;
    // Time for the lists to reach the sync loop (far less than the 30 s it
    // waits for the Node).
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(agent.syncs(), 0, "synced without its Node");
    assert_eq!(agent.http_get("healthz", "/healthz")?.0, 503);
    assert_eq!(agent.http_get("healthz", "/livez")?.0, 503);

    api.apply(json(Node::new(KUBE_NODE).zone("zone-a")))?;
    // Another node's Node is not this node's.
    api.apply(json(Node::new("node-2").zone("zone-b")))?;
    let agent = rig.agent();
    agent.wait_syncs(1)?;
    let dump = rig.pins.dump()?;
    assert_eq!(backends(&dump, ZONED), set(ZONE_A), "{dump}");
    let agent = rig.agent();
    assert_eq!(agent.metric(MISSING)?, 0.0);
    assert_eq!(agent.http_get("healthz", "/healthz")?.0, 200);
    Ok(())
}

#[test]
fn without_its_node_the_first_sync_comes_after_the_bound_and_the_node_applies_later()
-> anyhow::Result<()> {
    let api = ApiServer::start()?;
    apply_yaml(&api, &zoned())?;
    let mut rig = Rig::new(&unique("nodewait"))?;
    let agent = rig.spawn_agent_kube_unregistered(&api, &[])?;
    agent.wait_syncs_within(1, NODE_WAIT + PATIENCE)?;
    assert_eq!(agent.metric(MISSING)?, 1.0);
    // Health follows the sync, Node or not.
    assert_eq!(agent.http_get("healthz", "/healthz")?.0, 200);
    // No zone: no hint matches, every endpoint serves.
    let dump = rig.pins.dump()?;
    assert_eq!(
        backends(&dump, ZONED),
        set(ZONE_A.into_iter().chain(ZONE_B)),
        "{dump}"
    );

    // The Node registered late: its zone applies, and the gauge clears.
    api.apply(json(Node::new(KUBE_NODE).zone("zone-b")))?;
    let pins = &rig.pins;
    eventually("zone-b's endpoints only", || {
        Ok(backends(&pins.dump()?, ZONED) == set(ZONE_B))
    })?;
    assert_eq!(rig.agent().metric(MISSING)?, 0.0);
    Ok(())
}

#[test]
fn a_node_the_apiserver_refuses_to_show_is_not_waited_for() -> anyhow::Result<()> {
    let api = ApiServer::start()?;
    apply_yaml(&api, &zoned())?;
    api.apply(json(Node::new(KUBE_NODE).zone("zone-a")))?;
    // A ClusterRole without `nodes`.
    api.forbid("nodes")?;
    let mut rig = Rig::new(&unique("nodewait"))?;
    // The patience (20 s) is shorter than the bound (30 s): the first sync
    // must not wait for the Node.
    let agent = rig.spawn_agent_kube_unregistered(&api, &[])?;
    agent.wait_syncs(1)?;
    assert!(api.request_count("nodes", Verb::List) > 0);
    assert_eq!(agent.metric(MISSING)?, 1.0);
    // So is the list of every Node (DSR's node networks): counted, and the
    // agent goes on without it.
    eventually("the refused list of every Node counted", || {
        Ok(agent.metric("lbagent_node_list_refused_total")? >= 1.0)
    })?;
    let dump = rig.pins.dump()?;
    assert_eq!(
        backends(&dump, ZONED),
        set(ZONE_A.into_iter().chain(ZONE_B)),
        "{dump}"
    );
    Ok(())
}
