//! Every round's report of one mode at one N, per load, and what the
//! tables show of them: medians over rounds and the spread between them.

use lb_tests::probe::BenchReport;

pub struct Rounds<L>(Vec<(L, BenchReport)>);

impl<L> Default for Rounds<L> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<L: Copy + PartialEq> Rounds<L> {
    pub fn push(&mut self, load: L, report: BenchReport) {
        self.0.push((load, report));
    }

    fn reports(&self, load: L) -> impl Iterator<Item = &BenchReport> {
        self.0
            .iter()
            .filter(move |(l, _)| *l == load)
            .map(|(_, r)| r)
    }

    /// The median over rounds of requests (or connections) per second.
    pub fn rate(&self, load: L) -> f64 {
        median(self.reports(load).map(|r| r.rate))
    }

    /// The median over rounds of each round's latency percentile.
    pub fn p50(&self, load: L) -> f64 {
        median(self.reports(load).filter_map(BenchReport::p50_us))
    }

    pub fn p99(&self, load: L) -> f64 {
        median(self.reports(load).filter_map(BenchReport::p99_us))
    }

    /// (smallest, largest) round rate: the spread between rounds.
    pub fn spread(&self, load: L) -> (f64, f64) {
        self.reports(load)
            .map(|r| r.rate)
            .fold((f64::INFINITY, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
    }

    pub fn failed(&self) -> u64 {
        self.0.iter().map(|(_, r)| r.failed).sum()
    }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}
