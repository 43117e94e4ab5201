//! Direct server return to a client on the backend's own node, with real
//! sockets in the two-node bed (`lb_tests::two_nodes`) and two real
//! agents: node-2's host and its pod p3 connect to node-1's DSR NodePort,
//! whose one endpoint is p2 on node-2. p2's answer would reach them
//! without crossing a device of ours, never given the frontend's address,
//! so node-1 SNATs such flows (it knows which node each address is on
//! from the Node objects: `LB4_NODE_NETS`), and every request is
//! answered; a client from outside still goes by DSR. Needs root; fails
//! loudly without it.

use std::collections::BTreeSet;

use lb_fixtures::yaml;
use lb_tests::{
    probe::outside_client,
    two_nodes::{
        Bed, CLIENT, CLIENT6, NODE1, NODE1_6, NODE2, NODE2_6, P3, P3_6, addr, answers, dual_stack,
        node_objects, node_port_svc, p2, p2_6, slice, slice6,
    },
};

/// `hairpin` (NodePort 30095, TCP and UDP), dual-stack, with its one
/// endpoint p2 on node-2; both Nodes with their addresses and pod CIDRs.
fn manifest() -> String {
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        dual_stack(
            node_port_svc("hairpin", "10.96.60.1", 30095),
            "fd00:96::60:1",
        )
        .into(),
        slice("hairpin", vec![p2()]).into(),
        slice6("hairpin", vec![p2_6()]).into(),
    ])
}

/// tc ingress's `lbagent_datapath_events_total` of `reason` in `family`.
fn events(family: &str, reason: &str) -> String {
    format!(
        r#"lbagent_datapath_events_total{{hook="tc",direction="ingress",family="{family}",reason="{reason}"}}"#
    )
}

#[test]
fn clients_on_the_backends_node_are_snated_and_served_and_others_go_by_dsr() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let args = ["--bpf-lb-mode=dsr"];
    let mut agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    let (to4, to6) = (addr(NODE1, 30095), addr(NODE1_6, 30095));
    bed.wait_reachable(&to4)?;
    bed.wait_reachable(&to6)?;
    let (hairpin4, hairpin6) = (
        events("ipv4", "dsr_snat_hairpin"),
        events("ipv6", "dsr_snat_hairpin"),
    );

    // From outside: DSR, p2 sees the client itself.
    for (to, client) in [(&to4, CLIENT), (&to6, CLIENT6)] {
        for proto in ["tcp", "udp"] {
            let r = bed.client(&[proto, "--to", to, "-n", "10", "--from"])?;
            let want = format!("p2 from {client}");
            assert_eq!(answers(&r, 10, to), BTreeSet::from([want.as_str()]));
        }
    }
    let m = agent1.metrics()?;
    assert_eq!((m.value(&hairpin4)?, m.value(&hairpin6)?), (0.0, 0.0));

    // From node-2's host (no test cgroup: no socket hook of node-2's agent
    // touches it) and from its pod p3: every request answered from the
    // NodePort, p2 sees node-1 (SNAT).
    for (host, to, node1) in [
        ("n2", &to4, NODE1),
        ("p3", &to4, NODE1),
        ("n2", &to6, NODE1_6),
        ("p3", &to6, NODE1_6),
    ] {
        for proto in ["tcp", "udp"] {
            let r = outside_client(
                &bed.nodes.ns(host),
                &[proto, "--to", to, "-n", "10", "--from"],
            )?;
            let want = format!("p2 from {node1}");
            assert_eq!(
                answers(&r, 10, to),
                BTreeSet::from([want.as_str()]),
                "{proto} from {host}"
            );
        }
    }
    // Ten TCP flows and one UDP flow from each of the two, per family.
    let m = agent1.metrics()?;
    assert!(m.value(&hairpin4)? >= 22.0, "{}", m.value(&hairpin4)?);
    assert!(m.value(&hairpin6)? >= 22.0, "{}", m.value(&hairpin6)?);

    // What node-1 knows: node-2's addresses and pod CIDRs under one
    // number, node-1's under another; p2 is in node-2's CIDR, so it needs
    // no entry of its own. (p3's addresses are in node-2's CIDRs.)
    let dsr1 = bed.node1.pins.dsr()?;
    let node_of = |net: &str| {
        dsr1.lines()
            .find_map(|l| l.strip_prefix(net)?.trim().strip_prefix("node "))
            .map(str::to_owned)
    };
    let node2 = node_of("10.42.2.0/24");
    assert!(node2.is_some(), "{dsr1}");
    for net in [
        format!("{NODE2}/32"),
        format!("{NODE2_6}/128"),
        "fd42:2::/64".to_owned(),
    ] {
        assert_eq!(node_of(&net), node2, "{net}: {dsr1}");
    }
    let node1 = node_of("10.42.1.0/24");
    assert!(node1.is_some() && node1 != node2, "{dsr1}");
    assert_eq!(node_of(&format!("{NODE1}/32")), node1, "{dsr1}");
    assert!(
        dsr1.contains("# entries: 8 node networks, 0 DSR endpoints"),
        "{dsr1}"
    );
    assert_eq!(agent1.metric("lbagent_node_networks")?, 8.0);
    assert!(
        !dsr1.contains(P3) && !dsr1.contains(P3_6),
        "p3 is in its node's pod CIDRs: {dsr1}"
    );
    // Node-2 holds p2 as the NodePort's endpoint on it (either node's
    // NodePort: `*`).
    let dsr2 = bed.node2.pins.dsr()?;
    for line in [
        "TCP  *:30095",
        "-> 10.42.2.2:8080",
        "-> [fd42:2::2]:8080",
        "UDP  *:30095",
        "-> 10.42.2.2:5353",
    ] {
        assert!(dsr2.contains(line), "{line}: {dsr2}");
    }
    Ok(())
}
