//! The tests' random scenarios: xorshift64*, deterministic from a seed,
//! so that a failing seed replays exactly.

use std::collections::BTreeSet;

/// xorshift64*: good enough to shuffle test scenarios.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Up to `max` distinct items, in their original order.
    pub(crate) fn subset<T: Copy>(&mut self, items: &[T], max: usize) -> Vec<T> {
        let n = self.below(max + 1);
        let chosen: BTreeSet<usize> = (0..n).map(|_| self.below(items.len())).collect();
        chosen.into_iter().map(|i| items[i]).collect()
    }
}
