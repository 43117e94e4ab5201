//! Target evaluation on fixed results.

use std::time::Duration;

use super::{nodeport, plan};
use crate::bench::targets::{self, Measured, Target};

#[test]
fn bounds_are_inclusive() {
    assert!(Target::at_least("g", 1.0, 1.0, Measured::Times(1.0)).met);
    assert!(!Target::at_least("g", 0.99, 1.0, Measured::Times(0.99)).met);
    assert!(Target::at_most("g", 150.0, 150.0, Measured::Nanos(150.0)).met);
    assert!(!Target::at_most("g", 151.0, 150.0, Measured::Nanos(151.0)).met);
    let ms = Duration::from_millis;
    assert!(Target::within("g", ms(10), ms(10)).met);
    assert!(!Target::within("g", ms(11), ms(10)).met);
    // NaN (a mode that never ran) meets nothing.
    assert!(!Target::at_least("g", f64::NAN, 1.0, Measured::Missing).met);
}

#[test]
fn nodeport_targets_are_evaluated_from_its_results() {
    let t = targets::nodeport::targets(&plan(&[1]), &nodeport(Some(120)));
    let snat = |load: &str, family: &str| {
        Target::new(
            format!(
                "SNAT: fresh-port {load} flows to one remote endpoint over {family} without a \
                 failure, at least kube-proxy's (iptables) rate within 10%"
            ),
            Measured::Text("1000/s, 0 failed; iptables 1050/s".into()),
            true,
        )
    };
    assert_eq!(
        t,
        [
            snat("Tcp", "IPv4"),
            snat("Udp", "IPv4"),
            snat("Tcp", "IPv6"),
            snat("Udp", "IPv6"),
            Target::new(
                "NodePort: ours >= nftables at N=1 (TCP)",
                Measured::Times(3150.0 / 1050.0),
                true
            ),
            Target::new(
                "tc ingress <= 150 ns per packet on a conntrack hit (BPF_PROG_TEST_RUN)",
                Measured::Nanos(120.0),
                true
            ),
            Target::new(
                "XDP <= 100 ns per packet on a conntrack hit, forwarded (BPF_PROG_TEST_RUN)",
                Measured::Nanos(90.0),
                true
            ),
        ]
    );
}

#[test]
fn the_tc_cost_target_reads_the_conntrack_hit_figure() {
    let last = |hit| {
        targets::nodeport::targets(&plan(&[1]), &nodeport(hit))
            .into_iter()
            .find(|t| t.goal.starts_with("tc ingress"))
            .expect("the tc target")
    };
    let slow = last(Some(151));
    assert_eq!(slow.measured, Measured::Nanos(151.0));
    assert!(!slow.met);
    assert_eq!(
        last(None),
        Target::new("tc ingress per-packet cost", Measured::Missing, false)
    );
}

#[test]
fn the_10000_services_target_is_only_set_at_10000() {
    let mut np = nodeport(Some(100));
    for row in &mut np.rows {
        row.n = 10_000;
    }
    let t = targets::nodeport::targets(&plan(&[10_000]), &np);
    let twice = t
        .iter()
        .find(|t| t.goal == "NodePort: ours >= 2x iptables at N=10000 (TCP)")
        .expect("set at 10,000");
    assert_eq!(twice.measured, Measured::Times(3150.0 / 2100.0));
    assert!(!twice.met);
    let t = targets::nodeport::targets(&plan(&[1]), &nodeport(Some(100)));
    assert!(!t.iter().any(|t| t.goal.contains("2x iptables")));
}

#[test]
fn pps_targets_hold_ours_at_xdp_to_the_xdp_targets() {
    let t = targets::pps::targets(&plan(&[1]), &super::pps());
    let target = |goal: &str, measured, met| Target::new(goal, measured, met);
    let both = |over: &str| {
        [
            target(
                &format!(
                    "pps: ours (XDP) >= 4x iptables per core at N=1 over {over} (the XDP target)"
                ),
                Measured::Times(3.0),
                false,
            ),
            target(
                &format!(
                    "pps: ours (XDP) >= 80% of the generator ceiling at N=1 over {over} (the XDP target)"
                ),
                Measured::Percent(0.75),
                false,
            ),
        ]
    };
    let ahead = |over: &str| {
        target(
            &format!("pps: ours (XDP) ahead of ours (tc) at N=1 over {over} (end to end)"),
            Measured::Times(1.5),
            true,
        )
    };
    let want: Vec<Target> = both("IPv4 (XDP sink)")
        .into_iter()
        .chain([ahead("IPv4")])
        .chain(both("IPv6 (XDP sink)"))
        .chain([ahead("IPv6")])
        .collect();
    assert_eq!(t, want);
}
