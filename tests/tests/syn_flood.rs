//! A SYN flood at the packet generator's full rate (`lb_tests::pktgen`,
//! spoofed sources) to a NodePort through node-1 of the two-node bed
//! (`lb_tests::two_nodes`), with conntrack and SNAT maps small enough that
//! the flood's flows would fill them many times over: established
//! connections keep working, one busy during the flood and eight idle
//! through it, because unconfirmed flows only get the budget's share of
//! the maps; what the budget drops is counted, by XDP when the fast path
//! runs. Needs root; fails loudly without it.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use anyhow::Context as _;
use lb_fixtures::yaml;
use lb_tests::{
    netns::{tx_checksum_off, within, xdp_pass},
    pktgen::{Generator, iface},
    probe::Held,
    two_nodes::{Bed, NODE1, node_objects, node_port_svc, p2, slice},
};

/// `remote`'s NodePort: its one endpoint, p2, is on node-2, so every flow
/// through node-1 takes conntrack entries and a SNAT port there.
const REMOTE: u16 = 30087;
/// The flood's source: an address no namespace owns (the router has no
/// route back to it), from 32,768 ports: four times the flows the maps
/// hold.
const SPOOFED: &str = "198.18.0.1";
const FLOWS: u32 = 1 << 15;
/// How long the flood lasts.
const SECONDS: f64 = 3.0;
/// 16,384 conntrack entries (8,192 flows) and 8,192 SNAT entries: a
/// budget of 2,048 unconfirmed flows for the node.
const MAPS: [&str; 2] = ["--bpf-ct-global-max=16384", "--bpf-nat-global-max=8192"];

/// The counters of node-1 after a flood of [`SECONDS`] against held
/// connections through it, node-1's agent run with `node1_args` too; every
/// connection checked. With `xdp`, the hosts send complete checksums and
/// the router's ports to the nodes run NAPI, as XDP on veths needs.
fn flood(node1_args: &[&str], xdp: bool) -> anyhow::Result<lb_tests::agent::Stats> {
    let [node1, node2] = node_objects();
    let bed = Bed::new(&yaml([
        node1,
        node2,
        node_port_svc("remote", "10.96.63.1", REMOTE).into(),
        slice("remote", vec![p2()]).into(),
    ]))?;
    let r = bed.nodes.ns("r");
    let _peers = if xdp {
        for host in ["c", "p1", "p2"] {
            tx_checksum_off(&bed.nodes.ns(host), "eth0")?;
        }
        vec![xdp_pass(&r, "n1")?, xdp_pass(&r, "n2")?]
    } else {
        Vec::new()
    };
    let args: Vec<&str> = MAPS.iter().chain(node1_args).copied().collect();
    let _agents = [
        bed.agent_with(&bed.node1, &args)?,
        bed.agent_with(&bed.node2, &MAPS)?,
    ];
    let to = format!("{NODE1}:{REMOTE}");
    bed.wait_reachable(&to)?;

    // Nine established connections: eight stay idle through the flood.
    let c = bed.nodes.ns("c");
    let mut idle = Vec::new();
    for _ in 0..8 {
        let mut held = Held::open_in(&c, None, &to)?;
        assert_eq!(held.request()?, "p2");
        idle.push(held);
    }
    let mut busy = Held::open_in(&c, None, &to)?;
    assert_eq!(busy.request()?, "p2");

    // The generator's frames leave the client's veth by XDP_TX: the
    // router's end takes them only with NAPI (GRO).
    let dst_mac = within(&r, || {
        iface::gro_on("eth0")?;
        Ok(iface::mac("eth0")?)
    })?;
    let src: IpAddr = SPOOFED.parse()?;
    let dst: SocketAddr = to.parse()?;
    let flood = std::thread::spawn(move || {
        within(&c, || {
            let generator = Generator::syn("eth0", dst_mac, (src, dst), FLOWS)
                .context("loading the generator")?;
            Ok(generator.run(SECONDS, None)?)
        })
    });
    // The busy connection's requests, all through the flood.
    let mut during = 0;
    while !flood.is_finished() {
        assert_eq!(busy.request()?, "p2", "request {during} during the flood");
        during += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent = flood.join().expect("the generator's thread")?;

    // Every idle connection still has its flow on node-1.
    for (i, held) in idle.iter_mut().enumerate() {
        assert_eq!(held.request()?, "p2", "idle connection {i} after the flood");
    }
    assert_eq!(busy.request()?, "p2");
    assert!(during > 0);
    let stats = bed.node1.pins.stats()?;
    eprintln!(
        "flood{}: {} SYNs in {:.1} s ({:.0}/s); node-1 dropped {} for the budget at tc, {} \
         at XDP, recorded {} new flows at tc, {} at XDP; {during} requests during it",
        if xdp { " (XDP)" } else { "" },
        sent.frames,
        sent.seconds,
        sent.rate,
        stats.of("tc ipv4 drop_syn_budget"),
        stats.of("xdp ipv4 drop_syn_budget"),
        stats.of("tc ipv4 new_flow"),
        stats.of("xdp ipv4 new_flow"),
    );
    Ok(stats)
}

#[test]
fn a_syn_flood_at_full_rate_evicts_no_established_connection() -> anyhow::Result<()> {
    let stats = flood(&[], false)?;
    // The flood far exceeded the budget (2,048 flows), and the budget held
    // it: the maps never had room to spare for it.
    assert!(stats.of("tc ipv4 drop_syn_budget") > 20_000, "{stats:?}");
    assert!(stats.of("tc ipv4 new_flow") < 8_192, "{stats:?}");
    Ok(())
}

#[test]
fn with_xdp_the_flood_is_dropped_by_xdp_and_counted_as_xdps() -> anyhow::Result<()> {
    let stats = flood(&["--bpf-lb-acceleration=native"], true)?;
    assert!(stats.of("xdp ipv4 drop_syn_budget") > 20_000, "{stats:?}");
    assert!(
        stats.of("xdp ipv4 new_flow") + stats.of("tc ipv4 new_flow") < 8_192,
        "{stats:?}"
    );
    Ok(())
}
