//! The packets-per-second section of the report.

use std::fmt::Write as _;

use super::super::{
    plan::Plan,
    results::{
        node::Mode,
        pps::{Family, Pps, PpsBed, PpsMode, find},
    },
};

/// The section: how it measures, then one table per bed and family.
pub(crate) fn section(o: &mut String, plan: &Plan, pps: &Pps) {
    let _ = writeln!(
        o,
        "## Packets per second: UDP to a NodePort (externalTrafficPolicy: Cluster)\n\n\
         The XDP generator (`lbt pktgen`: `BPF_PROG_TEST_RUN` with live frames, `XDP_TX` out \
         of the client's veth) sends {}-byte UDP frames from {} source ports to a UDP \
         NodePort of the NodePort section's nodes, which DNAT and SNAT them to remote \
         endpoints, on two beds. *XDP sink*: the endpoints are routed out of the node's \
         third veth to a namespace whose XDP program counts and drops every frame, so no \
         socket buffer is made after the generator unless the node makes one (our XDP \
         redirects frame to frame; tc, iptables and nftables build one per packet). *End \
         to end*: the pods, behind a bridge; an XDP program on every pod's veth counts and \
         drops them, and every frame becomes a socket buffer at the bridge. Either way \
         \"received\" is frames forwarded through the node. The ceiling sends from direct's \
         client straight to a counter on the next veth: the most one CPU generates and \
         receives. {} s per \
         measurement, {} round(s) in ABBA order, medians; conntrack of the kube-proxy nodes \
         flushed, then warmed with every flow, before each.\n\n\
         The generator runs on CPU {}; a veth runs its peer's receive path on the CPU that \
         sent, so that CPU also forwards. \"CPUs\" counts the CPUs on which a tenth or more \
         of the frames arrived; \"per core\" divides by them. \"softirq by CPU\" is the \
         machine's softirq time per CPU during the runs, other work included. \"node ns/packet\" is the \
         node's own cost per frame on that core: 1/pps less 1/ceiling.\n",
        pps.frame_len, pps.flows, pps.seconds, pps.rounds, pps.generator_cpu
    );
    for (bed, family) in PpsBed::ALL
        .into_iter()
        .flat_map(|b| Family::ALL.map(|f| (b, f)))
    {
        let _ = writeln!(o, "### {}, over {}\n", bed.name(), family.name());
        let _ = writeln!(
            o,
            "| N | mode | received pps | offered pps | vs ceiling | vs iptables | node ns/packet | CPUs | per core | received by CPU | softirq by CPU |\n\
             |---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
        );
        for n in plan.pps_scales() {
            let row = |mode| find(&pps.rows, bed, family, mode, n);
            let ceiling = row(PpsMode::Ceiling).map(|r| r.pps());
            let ipt = row(PpsMode::Node(Mode::Iptables)).map(|r| r.pps());
            for mode in PpsMode::ALL {
                let Some(r) = row(mode) else { continue };
                let p = r.pps();
                let ratio = |to: Option<f64>| to.map_or(String::new(), |t| format!("{:.2}", p / t));
                let node_ns = match (mode, ceiling) {
                    (PpsMode::Node(_), Some(c)) => format!("{:.0}", 1e9 / p - 1e9 / c),
                    _ => String::new(),
                };
                let _ = writeln!(
                    o,
                    "| {n} | {} | {p:.0} | {:.0} | {} | {} | {node_ns} | {} | {:.0} | {} | {} |",
                    mode.name(),
                    r.offered(),
                    ratio(ceiling),
                    ratio(ipt),
                    r.cpus(),
                    r.per_core(),
                    percents(&r.rx_shares()),
                    percents(&r.softirq_shares()),
                );
            }
        }
        o.push('\n');
    }
}

/// Shares per CPU, e.g. "97% / 3%".
fn percents(shares: &[f64]) -> String {
    shares
        .iter()
        .map(|s| format!("{:.0}%", s * 100.0))
        .collect::<Vec<_>>()
        .join(" / ")
}
