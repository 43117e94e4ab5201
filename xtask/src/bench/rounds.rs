//! The one round driver of the datapath and NodePort sections, and what
//! the tables show of its rounds: medians over rounds and the spread
//! between them.

use std::fmt::{Debug, Write as _};

use anyhow::ensure;
use lb_tests::probe::BenchReport;

use super::stats::median;

/// The ways through which the same load is measured and compared.
pub(super) trait Compared: Copy + PartialEq + 'static {
    type Load: Copy + PartialEq + Debug + 'static;

    fn name(self) -> &'static str;

    /// The loads measured through this mode.
    fn loads(self) -> &'static [Self::Load];
}

/// Runs `rounds` rounds at `n` Services, in ABBA order so that drift over
/// the run favours no mode; each round takes one `measure` of every mode
/// in `modes` (in that order) through each of its loads.
/// `what` names the section in errors. Returns those modes' rounds.
pub(super) fn drive<M: Compared>(
    rounds: usize,
    n: usize,
    what: &str,
    modes: &[M],
    mut measure: impl FnMut(M, M::Load) -> anyhow::Result<BenchReport>,
) -> anyhow::Result<Vec<(M, Rounds<M::Load>)>> {
    let mut all: Vec<(M, Rounds<M::Load>)> =
        modes.iter().map(|&m| (m, Rounds::default())).collect();
    for round in 0..rounds {
        let mut order = modes.to_vec();
        if round % 2 == 1 {
            order.reverse();
        }
        for mode in order {
            let mut line = format!("   {:<9} N={n:<6}", mode.name());
            for &load in mode.loads() {
                let r = measure(mode, load)?;
                ensure!(
                    r.ok > 0,
                    "{what}{} {load:?} at N={n} answered nothing",
                    mode.name()
                );
                let _ = write!(
                    line,
                    "  {load:?} {:>6.0}/s (p50 {:>5.1} us, {} failed{})",
                    r.rate,
                    r.p50_us().unwrap_or(f64::NAN),
                    r.failed,
                    losses(&r)
                );
                let (_, runs) = all
                    .iter_mut()
                    .find(|(m, _)| *m == mode)
                    .expect("every mode has its rounds");
                runs.push(load, r);
            }
            eprintln!("{line}");
        }
    }
    Ok(all)
}

/// What a run lost, by cause, and the kernel's drop counters that rose
/// meanwhile: `: TimedOut 1; kernel client Udp.RcvbufErrors 1`, or nothing.
pub(super) fn losses(r: &BenchReport) -> String {
    let mut o = String::new();
    if r.failed == 0 && r.kernel_drops.is_empty() {
        return o;
    }
    o.push(':');
    for (cause, n) in &r.errors {
        let _ = write!(o, " {cause} {n};");
    }
    if r.kernel_drops.is_empty() {
        o.push_str(" no kernel drop counted");
    }
    for (group, drops) in &r.kernel_drops {
        let _ = write!(o, " kernel {group}");
        for (counter, n) in drops {
            let _ = write!(o, " {counter} {n}");
        }
        o.push(';');
    }
    o.trim_end_matches(';').to_owned()
}

pub(super) struct Rounds<L>(Vec<(L, BenchReport)>);

impl<L> Default for Rounds<L> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<L: Copy + PartialEq> Rounds<L> {
    pub(super) fn push(&mut self, load: L, report: BenchReport) {
        self.0.push((load, report));
    }

    fn reports(&self, load: L) -> impl Iterator<Item = &BenchReport> {
        self.0
            .iter()
            .filter(move |(l, _)| *l == load)
            .map(|(_, r)| r)
    }

    /// The median over rounds of requests (or connections) per second.
    pub(super) fn rate(&self, load: L) -> f64 {
        median(self.reports(load).map(|r| r.rate))
    }

    /// The median over rounds of each round's latency percentile.
    pub(super) fn p50(&self, load: L) -> f64 {
        median(self.reports(load).filter_map(BenchReport::p50_us))
    }

    pub(super) fn p99(&self, load: L) -> f64 {
        median(self.reports(load).filter_map(BenchReport::p99_us))
    }

    /// (smallest, largest) round rate: the spread between rounds.
    pub(super) fn spread(&self, load: L) -> (f64, f64) {
        self.reports(load)
            .map(|r| r.rate)
            .fold((f64::INFINITY, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
    }

    pub(super) fn failed(&self) -> u64 {
        self.0.iter().map(|(_, r)| r.failed).sum()
    }

    /// The runs that failed a request or saw the kernel drop one, with
    /// their load and round (from 0).
    pub(super) fn lossy(&self) -> impl Iterator<Item = (L, usize, &BenchReport)> {
        let mut round: Vec<(L, usize)> = Vec::new();
        self.0.iter().filter_map(move |(load, r)| {
            let n = match round.iter_mut().find(|(l, _)| l == load) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    round.push((*load, 0));
                    0
                }
            };
            (r.failed > 0 || !r.kernel_drops.is_empty()).then_some((*load, n, r))
        })
    }
}
