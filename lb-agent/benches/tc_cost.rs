//! The per-packet cost of the tc programs, as the kernel measures it around
//! the program (`BPF_PROG_TEST_RUN`), on crafted packets. Prints
//! nanoseconds per packet; asserts nothing. Needs root.
//!
//! `cargo bench -p lb-agent --bench tc_cost [-- RUNS]`
//!
//! Two methods:
//! * **repeat**: one run of `RUNS` repetitions, the kernel's mean. Each
//!   repetition sees what the one before left, so a translated packet must
//!   translate back: two frontends whose backends are each other make the
//!   DNAT (and the reverse NAT) ping-pong between two tracked flows, every
//!   run a conntrack hit with a full rewrite.
//! * **single**: `RUNS` runs of one packet each, for the first packet of a
//!   flow (a conntrack miss), which no repetition can repeat. Each run also
//!   pays the kernel's per-run timer overhead, shown by the single-run
//!   pass-through row.

#[path = "../tests/tc/bed.rs"]
#[expect(dead_code, reason = "the bed's checkers serve the tests")]
mod bed;

use std::time::Duration;

use bed::{Bed, CLIENT, FRONTEND, NODE, NODE_PORT, Tcp, tcp};
use lb_common::{FE_F_EXTERNAL_LOCAL, PROTO_TCP};

fn main() {
    let runs: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let mut bed = Bed::with_flows(runs + 16);
    let pods: Vec<_> = (1..=16).map(|i| ([10, 1, 0, i], 8080)).collect();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &pods);
    // The ping-pong pair.
    let (a, b) = ((NODE, NODE_PORT + 1), ([10, 9, 0, 1], 8080));
    bed.frontend_at(a, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[b]);
    bed.frontend_at(b, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[a]);
    bed.ingress(&tcp(CLIENT, a, Tcp::Syn));
    bed.ingress(&tcp(CLIENT, b, Tcp::Syn));

    println!("tc per-packet cost, ns (BPF_PROG_TEST_RUN, kernel-measured), {runs} runs");
    println!("{:<52} {:>8}", "case (repeat: mean)", "ns");
    let ack = tcp(CLIENT, a, Tcp::Ack);
    let reply = tcp(b, CLIENT, Tcp::Ack);
    let other = tcp(CLIENT, (NODE, 22), Tcp::Ack);
    for (case, prog, packet) in [
        ("ingress, conntrack hit (DNAT)", "lb_tc_ingress", &ack),
        ("egress, reply (reverse NAT)", "lb_tc_egress", &reply),
        (
            "ingress, not ours (2 misses, passed on)",
            "lb_tc_ingress",
            &other,
        ),
        (
            "egress, not ours (2 misses, passed on)",
            "lb_tc_egress",
            &other,
        ),
    ] {
        let mean = bed.time_repeated(prog, packet, runs);
        println!("{case:<52} {:>8}", mean.as_nanos());
    }

    println!(
        "{:<52} {:>8} {:>8} {:>8}",
        "case (single runs)", "p50", "p99", "mean"
    );
    // Every run a new client address and port: a new flow.
    let new = (0..runs).map(|i| {
        let client = (
            [100, 64 + (i >> 16) as u8, (i >> 8) as u8, i as u8],
            1024 + (i % 60_000) as u16,
        );
        bed.time("lb_tc_ingress", &tcp(client, FRONTEND, Tcp::Syn))
    });
    report("ingress, conntrack miss (new flow, 16 backends)", new);
    let hit = (0..runs).map(|_| bed.time("lb_tc_ingress", &ack));
    report("ingress, conntrack hit (DNAT)", hit);
    let pass = (0..runs).map(|_| bed.time("lb_tc_ingress", &other));
    report("ingress, not ours (per-run overhead reference)", pass);
}

fn report(case: &str, samples: impl Iterator<Item = Duration>) {
    let mut ns: Vec<u64> = samples.map(|d| d.as_nanos() as u64).collect();
    ns.sort_unstable();
    let pick = |p: f64| ns[((ns.len() - 1) as f64 * p) as usize];
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    println!(
        "{case:<52} {:>8} {:>8} {:>8.0}",
        pick(0.5),
        pick(0.99),
        mean
    );
}
