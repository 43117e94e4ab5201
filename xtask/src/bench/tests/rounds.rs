//! Medians and spread over rounds, percentiles, and the round driver.

use std::{collections::BTreeMap, time::Duration};

use super::{super::stats, report};
use crate::bench::rounds::{Compared, Rounds, drive, losses};

#[test]
fn median_is_the_middle_or_the_mean_of_the_middle_two() {
    assert_eq!(stats::median([3.0, 1.0, 2.0].into_iter()), 2.0);
    assert_eq!(stats::median([4.0, 1.0, 3.0, 2.0].into_iter()), 2.5);
    assert!(stats::median(std::iter::empty()).is_nan());
}

#[test]
fn percentile_is_the_nearest_rank() {
    let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
    assert_eq!(stats::percentile(&ms, 50.0), Duration::from_millis(50));
    assert_eq!(stats::percentile(&ms, 99.0), Duration::from_millis(99));
    assert_eq!(stats::percentile(&ms, 0.0), Duration::from_millis(1));
    assert_eq!(stats::percentile(&[], 99.0), Duration::ZERO);
}

#[test]
fn rounds_give_medians_spread_and_failures_per_load() {
    let mut r = Rounds::default();
    for (rate, p50, p99, failed) in [
        (100.0, 5.0, 9.0, 1),
        (300.0, 7.0, 19.0, 0),
        (200.0, 6.0, 11.0, 2),
    ] {
        r.push('t', report(rate, p50, p99, failed));
    }
    r.push('u', report(50.0, 1.0, 2.0, 4));
    assert_eq!(r.rate('t'), 200.0);
    assert_eq!(r.p50('t'), 6.0);
    assert_eq!(r.p99('t'), 11.0);
    assert_eq!(r.spread('t'), (100.0, 300.0));
    assert_eq!(r.rate('u'), 50.0);
    assert_eq!(r.failed(), 7);
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    A,
    B,
}

impl Compared for Way {
    type Load = char;

    fn name(self) -> &'static str {
        match self {
            Way::A => "a",
            Way::B => "b",
        }
    }

    fn loads(self) -> &'static [char] {
        match self {
            Way::A => &['x', 'y'],
            Way::B => &['x'],
        }
    }
}

#[test]
fn drive_runs_rounds_in_abba_order_and_groups_them_by_mode() {
    use Way::{A, B};
    let mut calls = Vec::new();
    let all = drive(3, 1, "", &[A, B], |way: Way, load| {
        calls.push((way, load));
        Ok(report(calls.len() as f64, 1.0, 2.0, 0))
    })
    .expect("every measurement answered");
    assert_eq!(
        calls,
        [
            (A, 'x'),
            (A, 'y'),
            (B, 'x'),
            (B, 'x'),
            (A, 'x'),
            (A, 'y'),
            (A, 'x'),
            (A, 'y'),
            (B, 'x')
        ]
    );
    let modes: Vec<Way> = all.iter().map(|(w, _)| *w).collect();
    assert_eq!(modes, [A, B]);
    // Only the modes asked for run.
    let mut only = Vec::new();
    drive(2, 1, "", &[B], |way: Way, load| {
        only.push((way, load));
        Ok(report(1.0, 1.0, 2.0, 0))
    })
    .expect("every measurement answered");
    assert_eq!(only, [(B, 'x'), (B, 'x')]);
    // A's x-rates were the 1st, 5th and 7th measurements; B's the 3rd,
    // 4th and 9th.
    assert_eq!(all[0].1.spread('x'), (1.0, 7.0));
    assert_eq!(all[0].1.rate('x'), 5.0);
    assert_eq!(all[0].1.rate('y'), 6.0);
    assert_eq!(all[1].1.rate('x'), 4.0);
}

#[test]
fn drive_fails_on_a_measurement_that_answered_nothing() {
    let Err(err) = drive(1, 7, "NodePort ", &[Way::A, Way::B], |way: Way, _| {
        Ok(report(if way == Way::B { 0.0 } else { 1.0 }, 1.0, 2.0, 3))
    }) else {
        panic!("b answered nothing, and the drive went on");
    };
    assert_eq!(err.to_string(), "NodePort b 'x' at N=7 answered nothing");
}

#[test]
fn a_run_that_lost_requests_names_their_causes_and_the_kernels_drops() {
    let mut lost = report(100.0, 5.0, 9.0, 2);
    lost.errors = BTreeMap::from([
        ("TimedOut".to_owned(), 1),
        ("WrongPeer 10.42.0.1:5353".to_owned(), 1),
    ]);
    lost.kernel_drops = BTreeMap::from([(
        "client".to_owned(),
        BTreeMap::from([("Udp.RcvbufErrors".to_owned(), 1)]),
    )]);
    assert_eq!(
        losses(&lost),
        ": TimedOut 1; WrongPeer 10.42.0.1:5353 1; kernel client Udp.RcvbufErrors 1"
    );
    let mut timed_out = report(100.0, 5.0, 9.0, 1);
    timed_out.errors = BTreeMap::from([("TimedOut".to_owned(), 1)]);
    assert_eq!(losses(&timed_out), ": TimedOut 1; no kernel drop counted");
    let mut dropped = report(100.0, 5.0, 9.0, 0);
    dropped.kernel_drops = BTreeMap::from([(
        "pods".to_owned(),
        BTreeMap::from([("Udp.InErrors".to_owned(), 3)]),
    )]);
    assert_eq!(losses(&dropped), ": kernel pods Udp.InErrors 3");
    assert_eq!(losses(&report(100.0, 5.0, 9.0, 0)), "");

    // The runs listed, with their load and round.
    let mut r = Rounds::default();
    r.push("udp", report(100.0, 5.0, 9.0, 0));
    r.push("tcp", timed_out);
    r.push("udp", lost);
    r.push("udp", dropped);
    let listed: Vec<(&str, usize, u64)> = r.lossy().map(|(l, n, x)| (l, n, x.failed)).collect();
    assert_eq!(listed, [("tcp", 0, 1), ("udp", 1, 2), ("udp", 2, 0)]);
}
