//! Deferred deletion: what the maps no longer point to is deleted only
//! after a grace period in which every program that could still have been
//! reading it has finished.

use std::collections::VecDeque;

/// A source of grace periods. Every eBPF program runs inside an RCU
/// read-side critical section, so an RCU grace period is one
/// (`datapath::grace` waits for them with `membarrier(2)`).
pub trait GracePeriods {
    /// Marks "now". Everything made unreachable before this call may be
    /// deleted once [`Self::passed`] says the returned token has passed.
    fn mark(&mut self) -> u64;
    /// Whether a grace period that started after `mark` returned `token`
    /// has ended.
    fn passed(&self, token: u64) -> bool;
}

/// Items waiting for their grace period, oldest first.
#[derive(Debug)]
pub(super) struct Retired<T> {
    queue: VecDeque<(u64, T)>,
}

impl<T> Default for Retired<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
        }
    }
}

impl<T> Retired<T> {
    /// Queues `items`, unreachable since before `token` was marked.
    pub(super) fn push(&mut self, token: u64, items: impl IntoIterator<Item = T>) {
        self.queue.extend(items.into_iter().map(|i| (token, i)));
    }

    /// Takes the items whose grace period has passed.
    pub(super) fn take_passed(&mut self, grace: &impl GracePeriods) -> Vec<T> {
        let mut out = Vec::new();
        while let Some((token, _)) = self.queue.front() {
            if !grace.passed(*token) {
                break;
            }
            out.extend(self.queue.pop_front().map(|(_, item)| item));
        }
        out
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.queue.iter().map(|(_, item)| item)
    }
}
