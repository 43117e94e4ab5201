//! Packets per second through the NodePort bed: UDP frames from the XDP
//! generator (`lb_tests::pktgen`) in a client's namespace to a UDP
//! NodePort, counted by an XDP counter that drops them, so the figure is
//! frames forwarded through the node (DNAT and SNAT: the endpoints are
//! remote to every layout), not a socket's throughput. Two beds
//! ([`PpsBed`]): the sink's NodePort, counted on each node's sink, and the
//! pods' one, counted on every pod's veth. The physical-limit row sends
//! from direct's client straight to a counter on direct's node.
//!
//! The generator runs on one pinned CPU; a veth hands its peer's NAPI to
//! the CPU that sent, so the node's receive softirq (and the pods') runs
//! there too, and one CPU generates and forwards: the report shows where
//! the frames arrived and where the softirq time went.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context as _;
use lb_tests::{
    netns::within,
    pktgen::{self, Counter, Generator, iface},
};

use super::{
    super::{
        plan::Plan,
        results::{
            nodeport::Mode,
            pps::{Family, PpsBed, PpsMode, Row, Run},
        },
        softirq,
    },
    bed::{Bed, SINK_NODE_PORT, UDP_NODE_PORT, flush_conntrack},
    net::at,
};

/// Distinct source ports: many flows, each a conntrack entry in every
/// layout.
pub(super) const FLOWS: u32 = 1024;
/// Bytes per frame (without the FCS): the smallest IPv6 frame the
/// generator makes, for both families.
pub(super) const FRAME_LEN: usize = 64;
pub(super) const GENERATOR_CPU: usize = 0;
/// Frames sent before each measurement: neighbours resolved, every flow's
/// conntrack entry made.
const WARM_UP: u64 = 20_000;
/// Time for frames still queued to arrive before the counters are read.
const SETTLE: Duration = Duration::from_millis(50);

/// Every mode of `modes` at `n` on each bed in each family, over the
/// plan's rounds (in ABBA order).
pub(super) fn measure(
    plan: &Plan,
    n: usize,
    bed: &Bed,
    pods: usize,
    modes: &[PpsMode],
) -> anyhow::Result<Vec<Row>> {
    for &mode in modes {
        if let PpsMode::Node(m) = mode {
            // The node's client-facing veth takes the generator's XDP_TX
            // frames only while it runs NAPI (see `iface::gro_on`).
            within(&bed.node_ns(m), || Ok(iface::gro_on("eth0")?))
                .context("GRO on a node's eth0")?;
        }
    }
    let pod_counters = bed
        .pod_namespaces(pods)
        .iter()
        .map(|ns| within(ns, || Ok(Counter::attach("eth0")?)))
        .collect::<anyhow::Result<Vec<_>>>()
        .context("the counters on the pods' veths")?;
    let mut sink_counters = Vec::new();
    for &mode in modes {
        if let PpsMode::Node(m) = mode {
            let counter = within(&bed.sink_ns(m), || Ok(Counter::attach("eth0")?))
                .context("the counter on a node's sink")?;
            sink_counters.push((m, counter));
        }
    }
    let mut rows = Vec::new();
    for (which, family) in PpsBed::ALL
        .into_iter()
        .flat_map(|b| Family::ALL.map(|f| (b, f)))
    {
        let mut runs: Vec<(PpsMode, Vec<Run>)> = modes.iter().map(|&m| (m, Vec::new())).collect();
        for round in 0..plan.pps_rounds {
            let mut order = modes.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for mode in order {
                let run = match mode {
                    PpsMode::Ceiling => {
                        let at_node =
                            within(&bed.node_ns(Mode::Direct), || Ok(Counter::attach("eth0")?))?;
                        one_run(plan, bed, Mode::Direct, UDP_NODE_PORT, &[at_node], family)?
                    }
                    PpsMode::Node(m) => {
                        if matches!(m, Mode::Iptables | Mode::Nftables) {
                            flush_conntrack(&bed.node_ns(m))?;
                        }
                        match which {
                            PpsBed::EndToEnd => {
                                one_run(plan, bed, m, UDP_NODE_PORT, &pod_counters, family)?
                            }
                            PpsBed::Sink => {
                                let sink = sink_counters
                                    .iter()
                                    .filter(|(at, _)| *at == m)
                                    .map(|(_, c)| c);
                                let sink: Vec<&Counter> = sink.collect();
                                one_run(plan, bed, m, SINK_NODE_PORT, &sink, family)?
                            }
                        }
                    }
                };
                eprintln!(
                    "   pps {} {:<8} {:<17} N={n:<6} sent {:>9.0}/s received {:>9.0}/s",
                    family.name(),
                    which.short(),
                    mode.name(),
                    run.sent.rate,
                    run.pps()
                );
                let (_, r) = runs
                    .iter_mut()
                    .find(|(m, _)| *m == mode)
                    .expect("every mode has its runs");
                r.push(run);
            }
        }
        rows.extend(runs.into_iter().map(|(mode, runs)| Row {
            bed: which,
            family,
            mode,
            n,
            runs,
        }));
    }
    Ok(rows)
}

/// One measurement from `via`'s client to its node's UDP NodePort
/// `node_port`, counted by `counters`.
fn one_run<C: std::borrow::Borrow<Counter> + Sync>(
    plan: &Plan,
    bed: &Bed,
    via: Mode,
    node_port: u16,
    counters: &[C],
    family: Family,
) -> anyhow::Result<Run> {
    let dst_mac = within(&bed.node_ns(via), || Ok(iface::mac("eth0")?))?;
    let src = at(family, via.client_addr());
    let dst = SocketAddr::new(at(family, via.node_addr()), node_port);
    let received = || -> anyhow::Result<Vec<u64>> {
        let mut sum = Vec::new();
        for c in counters {
            let v = c.borrow().per_cpu()?;
            sum.resize(v.len().max(sum.len()), 0);
            for (s, x) in sum.iter_mut().zip(v) {
                *s += x;
            }
        }
        Ok(sum)
    };
    within(&bed.client_ns(via), || {
        pktgen::pin_to_cpu(GENERATOR_CPU).context("pinning the generator")?;
        let generator = Generator::new("eth0", dst_mac, (src, dst), FRAME_LEN, FLOWS)
            .context("loading the generator")?;
        generator.run(60.0, Some(WARM_UP))?;
        std::thread::sleep(SETTLE);
        let (rx0, si0) = (received()?, softirq::per_cpu()?);
        let sent = generator.run(plan.pps_seconds, None)?;
        std::thread::sleep(SETTLE);
        let (rx1, si1) = (received()?, softirq::per_cpu()?);
        Ok(Run {
            sent,
            received: rx1.iter().zip(&rx0).map(|(a, b)| a - b).collect(),
            softirq: si1.iter().zip(&si0).map(|(a, b)| a - b).collect(),
        })
    })
}
