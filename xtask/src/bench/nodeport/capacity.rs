//! SNAT capacity through the NodePort bed: fresh-port flows to one remote
//! endpoint, for longer than the UDP timeout, through ours and kube-proxy's
//! layouts in each family.

use std::net::{Ipv4Addr, SocketAddr};

use lb_tests::probe;

use super::{
    super::{
        plan::Plan,
        results::nodeport::{Capacity, Family, Load, Mode},
    },
    bed::{Bed, TCP_NODE_PORT, UDP_NODE_PORT, flush_conntrack, services},
    net::at,
};

/// Measures [`Capacity`] for ours, iptables and nftables.
pub(super) fn capacity(plan: &Plan) -> anyhow::Result<Vec<Capacity>> {
    let pods = [Ipv4Addr::new(10, 42, 0, 1)];
    let bed = Bed::programmed(&pods, &services(1, &pods, 1), true)?;
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let seconds = capacity_seconds(plan);
    let c = plan.concurrency.to_string();
    let mut out = Vec::new();
    for (family, mode) in Family::ALL
        .into_iter()
        .flat_map(|f| [Mode::Ours, Mode::Iptables, Mode::Nftables].map(|m| (f, m)))
    {
        let client = bed.ns(&format!("c{}", mode.k()));
        for load in Load::ALL {
            if mode != Mode::Ours {
                flush_conntrack(&node_ns(mode))?;
            }
            let (sub, port) = match load {
                Load::Tcp => ("bench-tcp", TCP_NODE_PORT),
                Load::Udp => ("bench-udp", UDP_NODE_PORT),
            };
            let to = SocketAddr::new(at(family, mode.node_addr()), port).to_string();
            let args = [
                sub,
                "--to",
                &to,
                "-c",
                &c,
                "--seconds",
                seconds,
                "--socket-per-request",
            ];
            let before = bed.exhausted(family)?;
            let report = probe::outside_bench(&client, &args)?;
            let exhausted = (mode == Mode::Ours)
                .then(|| Ok::<_, anyhow::Error>(bed.exhausted(family)? - before))
                .transpose()?;
            eprintln!(
                "   {} {:<9} {load:?} {} flows ({:.0}/s), {} failed",
                family.name(),
                mode.name(),
                report.ok,
                report.rate,
                report.failed
            );
            out.push(Capacity {
                family,
                mode,
                load,
                report,
                exhausted,
            });
        }
    }
    Ok(out)
}

/// How long each capacity run lasts: longer than the UDP timeout (60 s),
/// so that mappings of the first flows expire while new ones keep coming;
/// 2 s in a smoke run.
pub(super) fn capacity_seconds(plan: &Plan) -> &'static str {
    if plan.quick { "2" } else { "65" }
}
