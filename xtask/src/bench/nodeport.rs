//! NodePort figures: a client outside the node making short TCP connections
//! and UDP request/response to a NodePort (`externalTrafficPolicy:
//! Cluster`), through a node running our tc programs, one running kube-proxy
//! v1.31's iptables layout, one running its nftables layout, and a plain
//! router straight to the pods (direct); at each N, over IPv4 and over
//! IPv6. Each node reaches the same pods over one shared bridge, and each
//! has a client of its own:
//!
//! ```text
//! client-k 172.16.k.2 -- eth0 172.16.k.1  node-k  eth1 10.42.0.(101+k) -- bridge -- pods 10.42.0.1..
//!                                                 eth2 10.44.k.1 -- sink-k 10.44.k.2 (10.43.0.0/16)
//! ```
//!
//! The sink (packets per second only) is the route of a third Service's
//! endpoints (10.43.0.1..), a namespace whose XDP program counts and drops
//! every frame: no socket buffer is made after the node.
//!
//! Every link is dual-stack: each address has its IPv6 image, `fd00::`
//! and the IPv4 address's 32 bits (`netns::v6_of`, as the datapath
//! section's pods), in a prefix 96 bits longer. Every Service is
//! dual-stack (RequireDualStack, a slice of each family), so each family's
//! layout holds the same N Services: kube-proxy's are loaded per family as
//! its one proxier per family writes them (`iptables-restore` and
//! `ip6tables-restore`, `table ip` and `table ip6`).
//!
//! The pods are on other nodes as far as every layout knows, so every flow
//! through a NodePort is SNATed (kube-proxy's `KUBE-EXT` masquerade, our tc
//! egress) and the replies come back through the node. Also the kernel's
//! own measure of our tc programs per packet: during our runs, and on
//! crafted packets (`BPF_PROG_TEST_RUN`, the `tc_cost` bench).
//!
//! Here, the section's driver; below it [`net`] (the address plan),
//! [`bed`] (the namespaces and Services of one N), [`pps`] (packets per
//! second) and [`capacity`](mod@capacity) (SNAT ports).

mod bed;
mod capacity;
mod net;
mod pps;

use std::net::{Ipv4Addr, SocketAddr};

use lb_tests::{
    probe,
    progstats::{Runs, StatsOn},
};

use self::{
    bed::{Bed, TCP_NODE_PORT, UDP_NODE_PORT, flush_conntrack, services},
    capacity::{capacity, capacity_seconds},
    net::{at, pods},
};
use super::{
    plan::Plan,
    results::{
        nodeport::{Family, Load, Mode, NodePort, Row},
        pps::{Pps, PpsMode, Row as PpsRow},
    },
    rounds, tc_cost,
};

/// The whole NodePort section: every mode at each N (requests, then
/// packets per second), the SNAT capacity runs, and the `tc_cost` bench.
pub(super) fn measure(plan: &Plan) -> anyhow::Result<NodePort> {
    let mut rows = Vec::new();
    let mut pps_rows = Vec::new();
    for &n in &plan.nodeport_scales {
        eprintln!("== NodePort, N = {n}");
        let (r, p) = every_mode(plan, n, true)?;
        rows.extend(r);
        pps_rows.extend(p);
    }
    pps_rows.extend(ours_pps(plan)?);
    eprintln!("== SNAT ports: fresh-port flows to one remote endpoint");
    let capacity = capacity(plan)?;
    eprintln!("== tc programs on crafted packets");
    Ok(NodePort {
        rows,
        capacity,
        capacity_seconds: capacity_seconds(plan),
        tc_cost: tc_cost::run(plan)?,
        pps: pps_of(plan, pps_rows),
    })
}

/// `--pps-only`: packets per second at each N, on the NodePort section's
/// bed, without its other measurements.
pub(super) fn measure_pps(plan: &Plan) -> anyhow::Result<Pps> {
    let mut rows = Vec::new();
    for &n in &plan.nodeport_scales {
        eprintln!("== packets per second to a NodePort, N = {n}");
        rows.extend(every_mode(plan, n, false)?.1);
    }
    rows.extend(ours_pps(plan)?);
    Ok(pps_of(plan, rows))
}

/// Packets per second at the N of ours alone: the ceiling and our two
/// modes, no kube-proxy rules loaded.
fn ours_pps(plan: &Plan) -> anyhow::Result<Vec<PpsRow>> {
    let mut rows = Vec::new();
    for &n in &plan.pps_ours_scales {
        eprintln!("== packets per second to a NodePort, N = {n}, ours only");
        let pods = pods(plan);
        let bed = Bed::programmed(&pods, &services(n, &pods, plan.endpoints), false)?;
        rows.extend(pps::measure(plan, n, &bed, pods.len(), &PpsMode::OURS)?);
    }
    Ok(rows)
}

fn pps_of(plan: &Plan, rows: Vec<PpsRow>) -> Pps {
    Pps {
        rows,
        flows: pps::FLOWS,
        frame_len: pps::FRAME_LEN,
        generator_cpu: pps::GENERATOR_CPU,
        seconds: plan.pps_seconds,
        rounds: plan.pps_rounds,
    }
}

/// Every mode at one N in each family on one bed: with `requests`, the
/// request rounds over the plan's rounds (IPv4's then IPv6's); then the
/// packets-per-second runs.
fn every_mode(plan: &Plan, n: usize, requests: bool) -> anyhow::Result<(Vec<Row>, Vec<PpsRow>)> {
    let pods = pods(plan);
    let bed = Bed::programmed(&pods, &services(n, &pods, plan.endpoints), true)?;
    let mut rows = Vec::new();
    if requests {
        for family in Family::ALL {
            rows.extend(rounds_of(plan, n, &bed, &pods, family)?);
        }
    }
    eprintln!("   packets per second");
    let pps = pps::measure(plan, n, &bed, pods.len(), &PpsMode::ALL)?;
    Ok((rows, pps))
}

/// Every mode at one N over `family`.
fn rounds_of(
    plan: &Plan,
    n: usize,
    bed: &Bed,
    pods: &[Ipv4Addr],
    family: Family,
) -> anyhow::Result<Vec<Row>> {
    eprintln!("   over {}", family.name());
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let to = |ip: Ipv4Addr, port: u16| SocketAddr::new(at(family, ip), port).to_string();
    let targets = |mode: Mode, load: Load| match (mode, load) {
        (Mode::Direct, Load::Tcp) => join(pods.iter().map(|&p| to(p, 8080))),
        (Mode::Direct, Load::Udp) => join(pods.iter().map(|&p| to(p, 5353))),
        (_, Load::Tcp) => to(mode.node_addr(), TCP_NODE_PORT),
        (_, Load::Udp) => to(mode.node_addr(), UDP_NODE_PORT),
    };
    // Ours: what the tc programs ran during each measurement.
    let mut tc: Vec<(Load, Runs, Runs)> = Vec::new();
    let (c, t) = (plan.concurrency.to_string(), plan.seconds.to_string());
    let what = format!("NodePort over {} ", family.name());
    let modes = rounds::drive(plan.rounds, n, &what, &Mode::ALL, |mode: Mode, load| {
        let client = bed.ns(&format!("c{}", mode.k()));
        if matches!(mode, Mode::Iptables | Mode::Nftables) {
            flush_conntrack(&node_ns(mode))?;
        }
        let to = targets(mode, load);
        let sub = match load {
            Load::Tcp => "bench-tcp",
            Load::Udp => "bench-udp",
        };
        let args = [sub, "--to", &to, "-c", &c, "--seconds", &t];
        let stats = (mode == Mode::Ours)
            .then(|| -> anyhow::Result<_> { Ok((StatsOn::enable()?, bed.tc_runs()?)) })
            .transpose()?;
        let r = probe::outside_bench(&client, &args)?;
        if let Some((_on, (i0, e0))) = stats {
            let (i1, e1) = bed.tc_runs()?;
            tc.push((load, i1.since(i0), e1.since(e0)));
        }
        Ok(r)
    })?;
    Ok(modes
        .into_iter()
        .map(|(mode, runs)| Row {
            family,
            mode,
            n,
            runs,
            tc: if mode == Mode::Ours {
                std::mem::take(&mut tc)
            } else {
                Vec::new()
            },
        })
        .collect())
}

fn join(targets: impl Iterator<Item = String>) -> String {
    targets.collect::<Vec<_>>().join(",")
}
