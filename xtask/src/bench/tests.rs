//! Unit tests of the bench's pure parts: aggregation over rounds, the
//! round driver, target evaluation and rendering, on fixed results. No
//! root, no namespaces.

mod render;
mod rounds;
mod targets;

use std::{path::PathBuf, time::Duration};

use lb_tests::{pktgen::Sent, probe::BenchReport, progstats::Runs};

use super::{
    plan::Plan,
    results::{
        nodeport::{Capacity, Family, Load, Mode, NodePort, Row, TcCost},
        pps::{Pps, PpsBed, PpsMode, Row as PpsRow, Run as PpsRun},
    },
    rounds::Rounds,
    targets::Measured,
};

/// A smoke run's plan at `scales`, measuring nothing itself.
fn plan(scales: &[usize]) -> Plan {
    Plan {
        quick: true,
        control_only: false,
        ours_only: false,
        realistic: false,
        agent_bin: PathBuf::from("/opt/lb-agent"),
        scales: scales.to_vec(),
        nodeport_scales: scales.to_vec(),
        pps_ours_scales: Vec::new(),
        endpoints: 4,
        concurrency: 4,
        seconds: 1.0,
        rounds: 2,
        pps_seconds: 0.5,
        pps_rounds: 1,
        connect_n: 1000,
        connect_addrs: 4096,
        cold: (500, 10),
        updates: 20,
        partial_syncs: 5,
        out_dir: PathBuf::from("/nonexistent"),
    }
}

/// One measurement's report: `rate` per second, its p50 and p99 in µs.
fn report(rate: f64, p50: f64, p99: f64, failed: u64) -> BenchReport {
    BenchReport {
        ok: rate as u64,
        failed,
        seconds: 1.0,
        rate,
        connect_p50_us: Some(p50),
        connect_p99_us: Some(p99),
        ..BenchReport::default()
    }
}

/// The `tc_cost` bench's output with the conntrack-hit figure `hit` (none
/// if `None`) and an XDP hit of 90 ns, as its JSON reads.
fn tc_cost(hit: Option<u64>) -> TcCost {
    let hit = hit.map_or(String::new(), |ns| {
        format!(r#", {{"id": "ingress_hit", "case": "ingress, conntrack hit (DNAT)", "ns": {ns}}}"#)
    });
    let json = format!(
        r#"{{"runs": 20000, "repeat": [{{"id": "empty", "case": "empty", "ns": 9}}{hit},
            {{"id": "xdp_hit", "case": "XDP, conntrack hit", "ns": 90}}],
            "single": [{{"id": "ingress_miss", "case": "miss", "p50": 1, "p99": 2, "mean": 1.5}}]}}"#
    );
    TcCost {
        table: "tc per-packet cost\n".into(),
        figures: serde_json::from_str(&json).expect("the bench's JSON"),
    }
}

/// A NodePort section at N=1: over IPv4 direct 4000/s, ours 3000/s,
/// iptables 2000/s, nftables 1000/s, over IPv6 half that (TCP and UDP
/// alike, two rounds each, the second 10% faster), ours' tc programs 100 ns
/// in, 200 ns out; SNAT capacity ours 1000/s, iptables 1050/s, nftables
/// 900/s.
fn nodeport(hit: Option<u64>) -> NodePort {
    let rows = Family::ALL
        .into_iter()
        .zip([1.0, 0.5])
        .flat_map(|(family, scale)| {
            Mode::ALL
                .into_iter()
                .zip([4000.0, 3000.0, 2000.0, 1000.0, 3500.0])
                .map(move |(mode, rate)| (family, mode, rate * scale))
        })
        .map(|(family, mode, rate)| {
            let mut runs = Rounds::default();
            for load in Load::ALL {
                runs.push(load, report(rate, 10.0, 20.0, 0));
                runs.push(load, report(rate * 1.1, 12.0, 30.0, 1));
            }
            let tc = if mode == Mode::Ours {
                let ns = |n: u64| Runs {
                    time: Duration::from_nanos(n * 10),
                    count: 10,
                };
                Load::ALL.iter().map(|&l| (l, ns(100), ns(200))).collect()
            } else {
                Vec::new()
            };
            Row {
                family,
                mode,
                n: 1,
                runs,
                tc,
            }
        })
        .collect();
    let capacity = Family::ALL
        .into_iter()
        .flat_map(|family| {
            [
                (Mode::Ours, 1000.0, Some(0)),
                (Mode::Iptables, 1050.0, None),
                (Mode::Nftables, 900.0, None),
            ]
            .map(|m| (family, m))
        })
        .flat_map(|(family, (mode, rate, exhausted))| {
            Load::ALL.map(|load| Capacity {
                family,
                mode,
                load,
                report: report(rate, 0.0, 0.0, 0),
                exhausted,
            })
        })
        .collect();
    NodePort {
        rows,
        capacity,
        capacity_seconds: "2",
        tc_cost: tc_cost(hit),
        pps: pps(),
    }
}

/// Packets per second at N=1, the same on both beds: over IPv4 the
/// ceiling receives 1,000,000/s, ours at XDP 750,000/s, at tc 500,000/s,
/// iptables 250,000/s, nftables 200,000/s, each of 10% more offered, all
/// received on CPU 0, with 1 s of softirq time there and 0.05 s on CPU 1;
/// over IPv6 half the rates.
fn pps() -> Pps {
    let rows = PpsBed::ALL
        .into_iter()
        .flat_map(|bed| {
            Family::ALL
                .into_iter()
                .zip([1.0, 0.5])
                .map(move |f| (bed, f))
        })
        .flat_map(|(bed, (family, scale))| {
            PpsMode::ALL
                .into_iter()
                .zip([1e6, 7.5e5, 5e5, 2.5e5, 2e5])
                .map(move |(mode, rate)| PpsRow {
                    bed,
                    family,
                    mode,
                    n: 1,
                    runs: vec![PpsRun {
                        sent: Sent {
                            frames: (rate * scale * 1.1 * 0.5) as u64,
                            seconds: 0.5,
                            rate: rate * scale * 1.1,
                        },
                        received: vec![(rate * scale * 0.5) as u64, 0],
                        softirq: vec![1.0, 0.05],
                    }],
                })
        })
        .collect();
    Pps {
        rows,
        flows: 1024,
        frame_len: 64,
        generator_cpu: 0,
        seconds: 0.5,
        rounds: 1,
    }
}

#[test]
fn the_connect_loops_targets_read_medians_and_the_floor_of_the_same_protocol() {
    use super::results::connect::{Call, Row, Target as To};
    let row = |call, target, ns_per_loop: &[f64], ns_per_call: &[f64]| Row {
        n: 10_000,
        call,
        target,
        addrs: 4096,
        ns_per_loop: ns_per_loop.to_vec(),
        ns_per_call: ns_per_call.to_vec(),
        failed: 0,
    };
    let rows = [
        row(
            Call::UdpConnect,
            To::Services,
            &[5400.0, 5000.0, 9000.0],
            &[400.0, 450.0, 9000.0],
        ),
        row(Call::UdpConnect, To::NoPrograms, &[5000.0, 4000.0], &[]),
        row(Call::UdpConnect, To::NotServices, &[4100.0], &[90.0]),
        row(Call::TcpConnect, To::Services, &[9000.0], &[600.0]),
        row(Call::TcpConnect, To::NoPrograms, &[1000.0], &[]),
    ];
    let t = super::targets::connect::targets(&rows);
    let met: Vec<(bool, &str)> = t.iter().map(|t| (t.met, t.goal.as_str())).collect();
    assert_eq!(t.len(), 3, "{met:?}");
    // UDP: median 450 ns per call; the loop 5400 / 4500 = 1.2x.
    assert!(t[0].met && t[0].goal.contains("UDP"), "{met:?}");
    assert_eq!(t[0].measured, Measured::Nanos(450.0));
    assert!(!t[1].met, "{met:?}");
    assert_eq!(t[1].measured, Measured::Times(1.2));
    // TCP: 600 ns per call; no loop target for TCP.
    assert!(!t[2].met && t[2].goal.contains("TCP"), "{met:?}");
    // sendmsg4's bound is its own.
    let t =
        super::targets::connect::targets(&[row(Call::UdpSendto, To::Services, &[900.0], &[290.0])]);
    assert!(
        t[0].met && t[0].goal.starts_with("sendmsg4 <= 300 ns"),
        "{:?}",
        t[0]
    );
}
