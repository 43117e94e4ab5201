//! The XDP fast path (`--bpf-lb-acceleration=native`) with real sockets in
//! the two-node bed (`lb_tests::two_nodes`), on veths in native mode:
//! NodePort flows from the outside client to the pod on the other node,
//! TCP and UDP, both families, answered by the pod with its identity, and
//! translated by XDP (its counters move, tc's new-flow counters do not).
//! The agent counts the veths it runs XDP on natively
//! (`lbagent_xdp_veth_devices`), whose peers need XDP programs of their
//! own. `lb-agent cleanup` takes the XDP program off the device. Needs root.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use anyhow::bail;
use aya::programs::links::{FdLink, PinnedLink};
use lb_fixtures::yaml;
use lb_tests::{
    agent,
    netns::{XdpPass, exec, ip, tx_checksum_off, veth, xdp_pass},
    two_nodes::{
        Bed, CLIENT, CLIENT6, NODE1, NODE1_6, addr, answers, dual_stack, node_objects,
        node_port_svc, p1, p1_6, p2, p2_6, slice, slice6,
    },
};

const NODE_PORT: u16 = 30090;

/// `remote`: a dual-stack NodePort Service whose one endpoint (of each
/// family) is the pod on node-2.
fn manifest() -> String {
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        dual_stack(
            node_port_svc("remote", "10.96.62.1", NODE_PORT),
            "fd00:96::62:1",
        )
        .into(),
        slice("remote", vec![p2()]).into(),
        slice6("remote", vec![p2_6()]).into(),
    ])
}

/// The ids of the link pinned for `dev`'s XDP program under `pins`, and
/// of the program in it.
fn xdp_link(pins: &std::path::Path, dev: &str) -> anyhow::Result<(u32, u32)> {
    let pin = pins.join("links").join(format!("xdp-{dev}"));
    let info = FdLink::from(PinnedLink::from_pin(pin)?).info()?;
    Ok((info.id(), info.program_id()))
}

/// Whether `dev` in namespace `ns` has an XDP program attached.
fn has_xdp(ns: &str, dev: &str) -> anyhow::Result<bool> {
    let out = exec(ns, &["ip", "-d", "link", "show", dev])?;
    Ok(out.contains("prog/xdp"))
}

/// The bed with `remote`, its senders computing complete checksums (as a
/// NIC delivers them; see the README on veths) and an XDP program at the
/// router's ports, the peers of the nodes' veths, where node-1's XDP sends
/// frames back out (`XDP_TX`: GRO there would not do).
fn bed() -> anyhow::Result<(Bed, [XdpPass; 2])> {
    bed_with(&manifest())
}

/// [`bed`] with `manifest` as the agents' source.
fn bed_with(manifest: &str) -> anyhow::Result<(Bed, [XdpPass; 2])> {
    let bed = Bed::new(manifest)?;
    for host in ["c", "p1", "p2"] {
        tx_checksum_off(&bed.nodes.ns(host), "eth0")?;
    }
    let r = bed.nodes.ns("r");
    let peers = [xdp_pass(&r, "n1")?, xdp_pass(&r, "n2")?];
    Ok((bed, peers))
}

/// TCP and UDP from the client through node-1's NodePort to p2, in each
/// family: every answer from p2, which sees node-1 (SNAT); every flow
/// recorded by XDP, none by tc, and every packet sent on by XDP.
fn through_xdp(bed: &Bed) -> anyhow::Result<()> {
    for node in [NODE1, NODE1_6] {
        let to = addr(node, NODE_PORT);
        // The first flows teach node-1 its neighbours (tc serves them
        // while the FIB has none).
        bed.wait_reachable(&to)?;
        let before = bed.node1.pins.stats()?;
        let p2_sees_node = format!("p2 from {node}");
        let r = bed.client(&["tcp", "--to", &to, "-n", "20", "--from"])?;
        assert_eq!(
            answers(&r, 20, &to),
            BTreeSet::from([p2_sees_node.as_str()])
        );
        let r = bed.client(&["udp", "--to", &to, "-n", "5", "--from"])?;
        assert_eq!(answers(&r, 5, &to), BTreeSet::from([p2_sees_node.as_str()]));
        let after = bed.node1.pins.stats()?;
        let delta = |labels: &str| after.of(labels) - before.of(labels);
        let (xdp, tc) = if node == NODE1 {
            ("xdp ipv4", "tc ipv4")
        } else {
            ("xdp ipv6", "tc ipv6")
        };
        // 20 TCP connections and one UDP socket: 21 flows.
        assert_eq!(delta(&format!("{xdp} new_flow")), 21, "{to}: {after:?}");
        assert_eq!(delta(&format!("{tc} new_flow")), 0, "{to}: {after:?}");
        assert!(
            delta(&format!("{xdp} forwarded")) >= 2 * 21,
            "{to}: {after:?}"
        );
    }
    Ok(())
}

#[test]
fn xdp_forwards_node_port_flows_to_a_remote_pod_in_both_families() -> anyhow::Result<()> {
    let (bed, _peers) = bed()?;
    let mut agent1 = bed.agent_with(&bed.node1, &["--bpf-lb-acceleration=native"])?;
    let _agent2 = bed.agent(&bed.node2)?;
    let n1 = bed.nodes.ns("n1");
    // eth0 is a veth: the agent says its peer needs an XDP program, once
    // it attached its own.
    agent1.wait_metric("lbagent_xdp_veth_devices", 1.0)?;
    assert!(has_xdp(&n1, "eth0")?, "lb_xdp on node-1's eth0");
    // Out of eth0, where the packets came in: XDP_TX.
    through_xdp(&bed)?;

    // Host traffic: XDP found it no frontend's nor flow's and told tc so in
    // its metadata; tc passed it without looking it up again, and the
    // node's own stack answered (a reset from a closed port).
    let before = bed.node1.pins.stats()?.of("tc passed_xdp_checked");
    let r = bed.client(&["tcp", "--to", &format!("{NODE1}:9"), "-n", "3"])?;
    assert_eq!(r.failed(), 3, "refused by node-1 itself: {r:?}");
    let passed = bed.node1.pins.stats()?.of("tc passed_xdp_checked") - before;
    assert!(passed >= 3, "{passed} SYNs passed on XDP's word");

    // The program outlives its agent (its link is pinned). The next agent
    // of this build adopts it (pinned under `programs/`) with its flow
    // cache and device list, and the flows go on through it.
    let (link, program) = xdp_link(bed.node1.pins.path(), "eth0")?;
    drop(agent1);
    assert!(has_xdp(&n1, "eth0")?, "XDP stays when the agent exits");
    let mut agent1 = bed.agent_with(&bed.node1, &["--bpf-lb-acceleration=native"])?;
    let (link_after, program_after) = xdp_link(bed.node1.pins.path(), "eth0")?;
    assert_eq!(link_after, link, "the same link");
    assert_eq!(program_after, program, "the same program, adopted");
    assert_eq!(
        agent1.metric("lbagent_tc_devices_unattached")?,
        0.0,
        "the adopted tc programs stay on eth0"
    );
    through_xdp(&bed)?;

    // Without the program pins, the next agent loads its own and puts it
    // into that link (no moment without one).
    drop(agent1);
    std::fs::remove_dir_all(bed.node1.pins.path().join("programs"))?;
    let agent1 = bed.agent_with(&bed.node1, &["--bpf-lb-acceleration=native"])?;
    let (link_after, program_after) = xdp_link(bed.node1.pins.path(), "eth0")?;
    assert_eq!(link_after, link, "the same link");
    assert_ne!(program_after, program, "the new agent's program");
    through_xdp(&bed)?;

    // `lb-agent cleanup` takes it off the device with the rest.
    drop(agent1);
    // From this namespace: `ip netns exec` would remount /sys, bpffs
    // with it. Its links are pinned, not per namespace.
    let status = std::process::Command::new(agent::agent_bin())
        .args(["cleanup", "--bpffs-dir"])
        .arg(bed.node1.pins.path())
        .stdout(std::process::Stdio::null())
        .status()?;
    assert!(status.success(), "lb-agent cleanup: {status}");
    wait_no_xdp(&n1, "eth0")
}

#[test]
fn xdp_redirects_node_port_flows_out_of_another_device_it_runs_on() -> anyhow::Result<()> {
    let (bed, _peers) = bed()?;
    // A direct link between the nodes, node-1's route to p2 through it:
    // requests leave node-1 by eth1, replies come back by eth0.
    let (n1, n2) = (bed.nodes.ns("n1"), bed.nodes.ns("n2"));
    veth(
        (&n1, "eth1", Some("192.168.58.1/24")),
        (&n2, "eth1", Some("192.168.58.2/24")),
    )?;
    for (ns, a) in [(&n1, "fd00:58::1/64"), (&n2, "fd00:58::2/64")] {
        ip(&["-n", ns, "addr", "add", a, "dev", "eth1", "nodad"])?;
    }
    ip(&[
        "-n",
        &n1,
        "route",
        "replace",
        "10.42.2.0/24",
        "via",
        "192.168.58.2",
    ])?;
    ip(&[
        "-n",
        &n1,
        "route",
        "replace",
        "fd42:2::/64",
        "via",
        "fd00:58::2",
    ])?;
    // NAPI at the far end of eth1, where node-1's XDP redirects to: an XDP
    // program (GRO would do for redirected frames, not for XDP_TX'd ones).
    let _far = xdp_pass(&n2, "eth1")?;
    let mut agent1 = bed.agent_with(
        &bed.node1,
        &["--devices=eth0,eth1", "--bpf-lb-acceleration=native"],
    )?;
    let _agent2 = bed.agent(&bed.node2)?;
    agent1.wait_metric("lbagent_xdp_veth_devices", 2.0)?;
    assert!(has_xdp(&n1, "eth1")?, "lb_xdp on node-1's eth1");
    // Every flow XDP's, though its requests leave by another device than
    // they came in on: redirected (XDP_TX cannot send them there).
    through_xdp(&bed)
}

/// A flow to a pod on node-1 itself is XDP's to record, not to send (the
/// pod is behind no device XDP runs on): XDP records it, advances it
/// packet by packet, and hands each packet to tc with the pod's address in
/// its metadata; tc rewrites it on XDP's word, looking nothing up. Every
/// answer comes from p1, which sees the client (no SNAT to a local pod).
#[test]
fn xdp_hands_flows_to_a_local_pod_to_tc_which_rewrites_them_on_its_word() -> anyhow::Result<()> {
    const LOCAL_PORT: u16 = 30091;
    let [node1, node2] = node_objects();
    let manifest = yaml([
        node1,
        node2,
        dual_stack(
            node_port_svc("local", "10.96.62.2", LOCAL_PORT),
            "fd00:96::62:2",
        )
        .into(),
        slice("local", vec![p1()]).into(),
        slice6("local", vec![p1_6()]).into(),
    ]);
    let (bed, _peers) = bed_with(&manifest)?;
    let _agent1 = bed.agent_with(&bed.node1, &["--bpf-lb-acceleration=native"])?;
    let _agent2 = bed.agent(&bed.node2)?;
    for (node, client, family) in [(NODE1, CLIENT, "ipv4"), (NODE1_6, CLIENT6, "ipv6")] {
        let to = addr(node, LOCAL_PORT);
        bed.wait_reachable(&to)?;
        let before = bed.node1.pins.stats()?;
        let p1_sees_client = format!("p1 from {client}");
        let r = bed.client(&["tcp", "--to", &to, "-n", "20", "--from"])?;
        assert_eq!(
            answers(&r, 20, &to),
            BTreeSet::from([p1_sees_client.as_str()])
        );
        let r = bed.client(&["udp", "--to", &to, "-n", "5", "--from"])?;
        assert_eq!(
            answers(&r, 5, &to),
            BTreeSet::from([p1_sees_client.as_str()])
        );
        let after = bed.node1.pins.stats()?;
        let delta = |labels: &str| after.of(labels) - before.of(labels);
        // 20 connections and one socket: 21 flows, all recorded by XDP.
        assert_eq!(
            delta(&format!("xdp {family} new_flow")),
            21,
            "{to}: {after:?}"
        );
        assert_eq!(
            delta(&format!("tc {family} new_flow")),
            0,
            "{to}: {after:?}"
        );
        assert_eq!(
            delta(&format!("xdp {family} forwarded")),
            0,
            "{to}: {after:?}"
        );
        // Each connection's SYN, ACK and request at least, and each
        // datagram: taken by tc on XDP's word.
        let handed = delta(&format!("xdp {family} passed_to_tc"));
        assert!(
            handed >= 3 * 20 + 5,
            "{to}: {handed} handed over: {after:?}"
        );
        assert!(
            delta(&format!("tc {family} passed_xdp_checked")) >= handed,
            "{to}: tc looked up what XDP handed over: {after:?}"
        );
    }
    Ok(())
}

/// Waits until `dev` in `ns` has no XDP program (the kernel releases an
/// unpinned link from a work queue).
fn wait_no_xdp(ns: &str, dev: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while has_xdp(ns, dev)? {
        if Instant::now() > deadline {
            bail!("XDP left on {dev} in {ns}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

#[test]
fn best_effort_leaves_a_device_without_native_xdp_on_tc_native_refuses_to_run() -> anyhow::Result<()>
{
    let bed = Bed::new(&manifest())?;
    // A TUN device: no Ethernet header, which lb_xdp parses.
    let n1 = bed.nodes.ns("n1");
    ip(&["-n", &n1, "tuntap", "add", "tun0", "mode", "tun"])?;
    ip(&["-n", &n1, "link", "set", "tun0", "up"])?;
    let devices = "--devices=eth0,tun0";

    let mut agent = bed.agent_with(&bed.node1, &[devices, "--bpf-lb-acceleration=best-effort"])?;
    for sample in [
        r#"lbagent_xdp_attached{device="eth0",mode="native"}"#,
        r#"lbagent_xdp_attached{device="tun0",mode="tc-only"}"#,
    ] {
        // Published once the devices are attached, after the first sync.
        let deadline = Instant::now() + Duration::from_secs(20);
        while agent.metrics()?.value(sample).ok() != Some(1.0) {
            if Instant::now() > deadline {
                bail!("no {sample} = 1 on /metrics");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(agent.metric("lbagent_tc_devices_unattached")?, 0.0);
    // eth0, a veth; tun0 has no XDP to warn about.
    assert_eq!(agent.metric("lbagent_xdp_veth_devices")?, 1.0);
    assert!(has_xdp(&n1, "eth0")?);
    assert!(!has_xdp(&n1, "tun0")?);
    drop(agent);

    let mut agent = bed.node1.launch(&[
        "--hostname-override=node-1",
        devices,
        "--bpf-lb-acceleration=native",
    ])?;
    let status = agent.exited_within(Duration::from_secs(60))?;
    assert!(!status.success(), "native ran without XDP on tun0");

    // Disabled, the default: what an earlier agent attached goes.
    let mut agent = bed.agent_with(&bed.node1, &[devices])?;
    wait_no_xdp(&n1, "eth0")?;
    agent.alive("running without XDP")?;
    Ok(())
}

/// Of `n` TCP connections from the client to node-1's NodePort of `both`
/// (one pod on node-1, one on node-2, picked at random), how many p1
/// answered; every connection answered.
fn p1_share(bed: &Bed, n: u32) -> anyhow::Result<u32> {
    let to = format!("{NODE1}:{NODE_PORT}");
    let r = bed.client(&["tcp", "--to", &to, "-n", &n.to_string()])?;
    assert_eq!((r.ok(), r.failed()), (n, 0), "{r:?}");
    let p1 = r.replies.get("p1").copied().unwrap_or(0);
    let p2 = r.replies.get("p2").copied().unwrap_or(0);
    assert_eq!(p1 + p2, n, "{r:?}");
    Ok(p1)
}

#[test]
fn a_random_pick_keeps_its_odds_whether_xdp_or_tc_forwards_the_flow() -> anyhow::Result<()> {
    let [node1, node2] = node_objects();
    let manifest = yaml([
        node1,
        node2,
        node_port_svc("both", "10.96.62.2", NODE_PORT).into(),
        slice("both", vec![p1(), p2()]).into(),
    ]);
    let (bed, _peers) = bed_with(&manifest)?;
    let n = 1000;
    // Within 6 points of half: more than 3.5 standard deviations of a fair
    // pick's; a pick drawn twice (by XDP, then again by tc for the flows
    // XDP cannot send on) gives the local pod a quarter.
    let fair = |p1: u32| p1.abs_diff(n / 2) <= n * 6 / 100;
    let without = {
        let _agent1 = bed.agent(&bed.node1)?;
        let _agent2 = bed.agent(&bed.node2)?;
        bed.wait_reachable(&format!("{NODE1}:{NODE_PORT}"))?;
        p1_share(&bed, n)?
    };
    let with = {
        let _agent1 = bed.agent_with(&bed.node1, &["--bpf-lb-acceleration=native"])?;
        let _agent2 = bed.agent(&bed.node2)?;
        bed.wait_reachable(&format!("{NODE1}:{NODE_PORT}"))?;
        let before = bed.node1.pins.stats()?;
        let p1 = p1_share(&bed, n)?;
        let after = bed.node1.pins.stats()?;
        assert!(
            after.of("xdp ipv4 new_flow") > before.of("xdp ipv4 new_flow"),
            "XDP sent p2's flows on: {after:?}"
        );
        p1
    };
    println!("of {n} connections p1 answered {without} with tc alone, {with} with XDP");
    assert!(fair(without), "tc alone: p1 answered {without} of {n}");
    assert!(fair(with), "with XDP: p1 answered {with} of {n}");
    Ok(())
}
