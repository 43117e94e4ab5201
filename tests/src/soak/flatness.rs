//! The long soak's judgement of its one agent: RSS, open fds, and each
//! map's entries beyond what the live Services need must not grow. The
//! samples after a warm-up are cut in thirds and the last third's median
//! is held against the first third's: a median shrugs off the swing of a
//! relist or an outage, while a leak moves it. The Services come and go
//! between 45 and 55, so the entries are judged by their excess over the
//! need at each sample. They and the fds are judged at settled samples
//! only, taken with nothing in flight or held back (an outage closes the
//! agent's watch connections, and a deletion made meanwhile stays in the
//! maps until the apiserver is back): there the steady state is known. A
//! run with too few settled samples in a third (a short one, whose outages
//! are frequent) leaves them unjudged, and says so.

use std::time::Duration;

use super::observe::Sample;
use crate::percentile::percentile;

/// How far the last third's median may exceed the first third's: RSS by
/// this fraction, ...
pub const RSS_GROWTH: f64 = 0.10;
/// ... open fds by this many, ...
pub const FDS_GROWTH: f64 = 2.0;
/// ... and each map's entries beyond need by this many.
pub const EXCESS_GROWTH: f64 = 2.0;
/// The warm-up: this share of the run, ...
const WARMUP_SHARE: f64 = 0.1;
/// ... and at least this long (the allocator's arenas, the first relist).
const WARMUP_MIN: Duration = Duration::from_secs(20);
/// Fewer samples in a third: too short to judge, which fails. Fewer
/// settled ones: the fds and entries are not judged.
pub const MIN_PER_THIRD: usize = 3;

/// One quantity, first third against last.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub name: &'static str,
    pub first: f64,
    pub last: f64,
    pub limit: f64,
}

impl Check {
    pub fn ok(&self) -> bool {
        self.last <= self.limit
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Flatness {
    pub warmup: Duration,
    /// Seconds from the start of traffic at which the first and the last
    /// third begin and end.
    pub first: (f64, f64),
    pub last: (f64, f64),
    /// Samples in each third.
    pub per_third: usize,
    /// Of those, the settled ones in the first and the last third, which
    /// the fds and the entries are judged by.
    pub settled: (usize, usize),
    pub checks: Vec<Check>,
    /// What was not judged, for want of settled samples.
    pub unjudged: Vec<&'static str>,
}

impl Flatness {
    /// What grew beyond its limit.
    pub fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| !c.ok())
            .map(|c| {
                format!(
                    "{} grew: median {:.1} in the last third against {:.1} in the first (limit {:.1})",
                    c.name, c.last, c.first, c.limit
                )
            })
            .collect()
    }
}

/// A quantity of a sample, and how its limit follows from the first
/// third's median.
struct Quantity {
    name: &'static str,
    of: fn(&Sample) -> Option<f64>,
    limit: fn(f64) -> f64,
    /// Judged at settled samples only.
    settled: bool,
}

fn excess(entries: usize, needed: usize) -> f64 {
    entries as f64 - needed as f64
}

const QUANTITIES: [Quantity; 8] = [
    Quantity {
        name: "agent RSS (KiB)",
        of: |s| s.rss_kib.map(|v| v as f64),
        limit: |m| m * (1.0 + RSS_GROWTH),
        settled: false,
    },
    Quantity {
        name: "agent open fds",
        of: |s| s.fds.map(|v| v as f64),
        limit: |m| m + FDS_GROWTH,
        settled: true,
    },
    Quantity {
        name: "frontends beyond need",
        of: |s| s.entries.map(|e| excess(e.frontends, s.needed.0)),
        limit: |m| m + EXCESS_GROWTH,
        settled: true,
    },
    Quantity {
        name: "states beyond need",
        of: |s| s.entries.map(|e| excess(e.states, s.needed.0)),
        limit: |m| m + EXCESS_GROWTH,
        settled: true,
    },
    Quantity {
        name: "slots beyond need",
        of: |s| s.entries.map(|e| excess(e.slots, s.needed.1)),
        limit: |m| m + EXCESS_GROWTH,
        settled: true,
    },
    Quantity {
        name: "backends beyond need",
        of: |s| s.entries.map(|e| excess(e.backends, s.needed.2)),
        limit: |m| m + EXCESS_GROWTH,
        settled: true,
    },
    Quantity {
        name: "members (none needed)",
        of: |s| s.entries.map(|e| e.members as f64),
        limit: |m| m + EXCESS_GROWTH,
        settled: true,
    },
    Quantity {
        name: "affinity entries (none needed)",
        of: |s| s.entries.map(|e| e.affinity as f64),
        limit: |m| m + EXCESS_GROWTH,
        settled: true,
    },
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 50.0).unwrap_or(0.0)
}

/// Judges the samples of a run whose traffic ran over `traffic` (ns);
/// `Err` when the run is too short to.
pub fn judge(samples: &[Sample], traffic: (u64, u64)) -> Result<Flatness, String> {
    let (from, to) = traffic;
    let ran = Duration::from_nanos(to.saturating_sub(from));
    let warmup = ran.mul_f64(WARMUP_SHARE).max(WARMUP_MIN);
    let start = from + warmup.as_nanos() as u64;
    let judged: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.pid != 0 && (start..=to).contains(&s.t_ns))
        .filter(|s| QUANTITIES.iter().all(|q| (q.of)(s).is_some()))
        .collect();
    let per_third = judged.len() / 3;
    if per_third < MIN_PER_THIRD {
        return Err(format!(
            "too short to judge flatness: {} samples after a {:.0} s warm-up, {MIN_PER_THIRD} per third needed",
            judged.len(),
            warmup.as_secs_f64()
        ));
    }
    let (head, tail) = (&judged[..per_third], &judged[judged.len() - per_third..]);
    let secs = |third: &[&Sample]| {
        let t = |s: &Sample| s.t_ns.saturating_sub(from) as f64 / 1e9;
        (t(third[0]), t(third[third.len() - 1]))
    };
    let settled = |third: &[&Sample]| third.iter().filter(|s| s.settled).count();
    let settled = (settled(head), settled(tail));
    let judgeable = settled.0.min(settled.1) >= MIN_PER_THIRD;
    let (checked, unjudged): (Vec<&Quantity>, Vec<&Quantity>) =
        QUANTITIES.iter().partition(|q| judgeable || !q.settled);
    let checks = checked
        .into_iter()
        .map(|q| {
            let of = |third: &[&Sample]| {
                median(
                    third
                        .iter()
                        .filter(|s| s.settled || !q.settled)
                        .filter_map(|s| (q.of)(s))
                        .collect(),
                )
            };
            let first = of(head);
            Check {
                name: q.name,
                first,
                last: of(tail),
                limit: (q.limit)(first),
            }
        })
        .collect();
    Ok(Flatness {
        warmup,
        first: secs(head),
        last: secs(tail),
        per_third,
        settled,
        checks,
        unjudged: unjudged.iter().map(|q| q.name).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::Entries;

    const SEC: u64 = 1_000_000_000;

    /// A sample at `t` s with this RSS and these fds, whose maps hold what
    /// `services` Services need plus `extra` slots.
    fn sample(t: u64, rss_kib: u64, fds: usize, services: usize, extra: usize) -> Sample {
        let needed = (2 * services, 2 * services, 2 * services);
        Sample {
            t_ns: t * SEC,
            took: Duration::ZERO,
            pid: 7,
            rss_kib: Some(rss_kib),
            fds: Some(fds),
            entries: Some(Entries {
                frontends: needed.0,
                states: needed.0,
                slots: needed.1 + extra,
                members: 0,
                backends: needed.2,
                affinity: 0,
                revnat: None,
            }),
            needed,
            settled: true,
        }
    }

    /// 600 s of samples every 5 s, from `f(t)`.
    fn run(f: impl Fn(u64) -> Sample) -> Vec<Sample> {
        (0..=120).map(|i| f(i * 5)).collect()
    }

    fn failed(samples: &[Sample]) -> Vec<&'static str> {
        let flat = judge(samples, (0, 600 * SEC)).expect("long enough");
        flat.checks
            .iter()
            .filter(|c| !c.ok())
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn a_steady_agent_passes_while_the_services_come_and_go() {
        // The Services oscillate 45..55, with the odd change in flight; an
        // outage's relist swells RSS for a while.
        let samples = run(|t| {
            let services = 45 + (t / 5 % 11) as usize;
            let rss = if (300..330).contains(&t) {
                40_000
            } else {
                30_000 + t % 7 * 50
            };
            sample(
                t,
                rss,
                36 + (t / 5 % 2) as usize,
                services,
                usize::from(t % 35 == 0),
            )
        });
        assert_eq!(failed(&samples), Vec::<&str>::new());
        let flat = judge(&samples, (0, 600 * SEC)).unwrap();
        assert_eq!(flat.warmup, Duration::from_secs(60));
        // 109 samples from 60 s to 600 s: thirds of 36.
        assert_eq!(flat.per_third, 36);
        assert_eq!(flat.first, (60.0, 235.0));
        assert_eq!(flat.last, (425.0, 600.0));
    }

    #[test]
    fn rss_fds_or_entries_that_creep_up_fail() {
        // 20 % more RSS over the run.
        let leak = run(|t| sample(t, 30_000 + t * 10, 36, 50, 0));
        assert_eq!(failed(&leak), ["agent RSS (KiB)"]);
        // One fd more a minute.
        let fds = run(|t| sample(t, 30_000, 36 + (t / 60) as usize, 50, 0));
        assert_eq!(failed(&fds), ["agent open fds"]);
        // Slots left behind, one every 20 s, while the need stays put.
        let slots = run(|t| sample(t, 30_000, 36, 50, (t / 20) as usize));
        assert_eq!(failed(&slots), ["slots beyond need"]);
    }

    #[test]
    fn growth_within_the_limits_passes() {
        // 5 % of RSS and one fd, once.
        let samples = run(|t| {
            let late = t > 300;
            sample(
                t,
                if late { 31_500 } else { 30_000 },
                36 + usize::from(late),
                50,
                0,
            )
        });
        assert_eq!(failed(&samples), Vec::<&str>::new());
    }

    #[test]
    fn entries_are_judged_where_no_change_is_in_flight() {
        // Late in the run, deletions made during outages linger in the
        // maps until the apiserver is back: at those samples only.
        let samples = run(|t| {
            let outage = t > 300 && t % 30 < 20;
            Sample {
                settled: !outage,
                ..sample(t, 30_000, 36, 50, if outage { 9 } else { 0 })
            }
        });
        assert_eq!(failed(&samples), Vec::<&str>::new());
        let flat = judge(&samples, (0, 600 * SEC)).unwrap();
        assert_eq!(flat.settled, (36, 12));
        // With nothing settled in a third, only RSS is judged.
        let busy = run(|t| Sample {
            settled: t < 300,
            ..sample(t, 30_000 + t * 10, 36 + t as usize, 50, t as usize)
        });
        let flat = judge(&busy, (0, 600 * SEC)).unwrap();
        assert_eq!(flat.settled, (36, 0));
        assert_eq!(flat.unjudged.len(), 7, "{flat:?}");
        assert_eq!(flat.failures().len(), 1, "RSS: {flat:?}");
    }

    #[test]
    fn a_run_too_short_or_without_its_agent_cannot_be_judged() {
        let short: Vec<Sample> = (0..6).map(|i| sample(i * 5, 30_000, 36, 50, 0)).collect();
        assert!(judge(&short, (0, 30 * SEC)).is_err());
        let down: Vec<Sample> = run(|t| Sample {
            pid: 0,
            ..sample(t, 30_000, 36, 50, 0)
        });
        assert!(judge(&down, (0, 600 * SEC)).is_err());
    }
}
