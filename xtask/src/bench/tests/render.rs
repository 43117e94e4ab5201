//! The Markdown of fixed results and targets.

use std::time::Duration;

use super::{nodeport, plan};
use crate::bench::{
    conditions::Conditions,
    render::{measured, report},
    results::control::Phases,
    targets::{Measured, Target},
};

#[test]
fn measured_figures_read_as_the_report_shows_them() {
    let ms = Duration::from_millis;
    for (m, text) in [
        (Measured::Times(2.004), "2.00x"),
        (Measured::Percent(0.9751), "97.5%"),
        (Measured::Time(Duration::from_micros(1234)), "1.234 ms"),
        (Measured::Time(ms(1234)), "1234 ms"),
        (Measured::Seconds(ms(7450)), "7.5 s"),
        (Measured::Mib(150 << 20), "150 MiB"),
        (Measured::Nanos(119.6), "120 ns"),
        (Measured::Text("max 3 ms".into()), "max 3 ms"),
        (Measured::Missing, "not measured"),
    ] {
        assert_eq!(measured(&m), text);
    }
}

#[test]
fn the_agent_timeline_is_read_from_its_log() {
    let ms = Duration::from_millis;
    let log = "2026-11-27T08:50:00.1Z  INFO lb_agent::agent::sync_loop: sync complete took_us=9\n\
               2026-11-27T08:50:00.2Z  INFO lb_agent::agent::cold_start: cold start timeline \
               (from the sync thread's start) programs_ms=120 lists_ms=300 model_ms=350 \
               first_sync_ms=205 programmed_ms=561\n";
    assert_eq!(
        Phases::from_log(log),
        Some(Phases {
            programs: ms(120),
            lists: ms(300),
            model: ms(350),
            first_sync: ms(205),
            programmed: ms(561),
        })
    );
    // An agent without the line (an older one, `--agent-bin`) has none.
    assert_eq!(Phases::from_log(log.lines().next().unwrap()), None);
}

/// Asserts that `md` holds each of `lines` as a whole line.
fn has_lines(md: &str, lines: &[&str]) {
    let all: Vec<&str> = md.lines().collect();
    for line in lines {
        assert!(all.contains(line), "no line {line:?} in:\n{md}");
    }
}

fn conditions() -> Conditions {
    Conditions {
        machine: "Machine: 2 cores.".into(),
        load_before: "0.50 0.40 0.30".into(),
        load_after: "1.00 0.90 0.80".into(),
        took: Duration::from_millis(12_400),
    }
}

#[test]
fn the_nodeport_report_shows_tables_and_targets() {
    let targets = [
        Target::new(
            "NodePort: ours >= nftables at N=1 (TCP)",
            Measured::Times(3.0),
            true,
        ),
        Target::new("tc ingress per-packet cost", Measured::Missing, false),
    ];
    let charts = ["/out/bench-nodeport-pps.svg".to_owned()];
    let md = report::nodeport_only(
        &plan(&[1]),
        &nodeport(Some(120)),
        &targets,
        &conditions(),
        &charts,
    );
    has_lines(
        &md,
        &[
            "# lb-agent NodePort benchmark",
            "Machine: 2 cores.",
            "Load average (1, 5, 15 min) at the start: 0.50 0.40 0.30, at the end: 1.00 0.90 0.80.",
            "### TCP short connections to a NodePort",
            "| N | mode | conn/s | vs direct | vs ours | spread | connect p50 µs | connect p99 µs | tc ns/packet in, out |",
            "| 1 | direct | 4200 | 1.00 | 1.33 | 4000-4400 | 11.0 | 25.0 |  |",
            "| 1 | ours (tc) | 3150 | 0.75 | 1.00 | 3000-3300 | 11.0 | 25.0 | 100, 200 |",
            "| 1 | nftables | 1050 | 0.25 | 0.33 | 1000-1100 | 11.0 | 25.0 |  |",
            "### TCP short connections to a NodePort, over IPv6",
            "| 1 | direct | 2100 | 1.00 | 1.33 | 2000-2200 | 11.0 | 25.0 |  |",
            "| 1 | ours (tc) | 1575 | 0.75 | 1.00 | 1500-1650 | 11.0 | 25.0 | 100, 200 |",
            "### UDP request/response to a NodePort, one socket per client",
            "### UDP request/response to a NodePort, one socket per client, over IPv6",
            "| 1 | nftables | 525 | 0.25 | 0.33 | 500-550 | 11.0 | 25.0 |  |",
            "| IPv4 | ours (tc) | Tcp | 1000 | 1000 | 0 | 0 |",
            "| IPv6 | iptables | Udp | 1050 | 1050 | 0 |  |",
            "tc per-packet cost",
            "### Targets (measured, not asserted)",
            "- [met] NodePort: ours >= nftables at N=1 (TCP): 3.00x",
            "- [MISSED] tc ingress per-packet cost: not measured",
            "## Packets per second: UDP to a NodePort (externalTrafficPolicy: Cluster)",
            "### XDP sink: to a counter in XDP behind another veth, over IPv6",
            "### end to end: through a bridge to the pods, over IPv6",
            "Charts: /out/bench-nodeport-pps.svg.",
            "Run took 12 s.",
        ],
    );
    assert!(
        md.contains("Failed requests over all NodePort runs: 20."),
        "{md}"
    );
    assert!(
        md.contains("4 concurrent clients for 2 s, longer than the UDP timeout"),
        "{md}"
    );
}

#[test]
fn the_pps_report_shows_rates_ratios_and_cpus() {
    let targets = [Target::new(
        "pps: ours (tc) >= 4x iptables per core at N=1 over IPv4 (the XDP target)",
        Measured::Times(2.0),
        false,
    )];
    let charts = ["/out/bench-pps.svg".to_owned()];
    let md = report::pps_only(&plan(&[1]), &super::pps(), &targets, &conditions(), &charts);
    has_lines(
        &md,
        &[
            "# lb-agent packets-per-second benchmark (--quick)",
            "### XDP sink: to a counter in XDP behind another veth, over IPv4",
            "### end to end: through a bridge to the pods, over IPv4",
            "| N | mode | received pps | offered pps | vs ceiling | vs iptables | node ns/packet | CPUs | per core | received by CPU | softirq by CPU |",
            // 1e9/1e6 = 1000 ns a frame at the ceiling; ours 2000: 1000 more.
            "| 1 | generator ceiling | 1000000 | 1100000 | 1.00 | 4.00 |  | 1 | 1000000 | 100% / 0% | 95% / 5% |",
            "| 1 | ours (tc) | 500000 | 550000 | 0.50 | 2.00 | 1000 | 1 | 500000 | 100% / 0% | 95% / 5% |",
            "| 1 | iptables | 250000 | 275000 | 0.25 | 1.00 | 3000 | 1 | 250000 | 100% / 0% | 95% / 5% |",
            "### end to end: through a bridge to the pods, over IPv6",
            "| 1 | nftables | 100000 | 110000 | 0.20 | 0.80 | 8000 | 1 | 100000 | 100% / 0% | 95% / 5% |",
            "- [MISSED] pps: ours (tc) >= 4x iptables per core at N=1 over IPv4 (the XDP target): 2.00x",
            "Charts: /out/bench-pps.svg.",
        ],
    );
    assert!(md.contains("The generator runs on CPU 0"), "{md}");
}
