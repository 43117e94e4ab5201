//! The syncer's clock: what is due at a moment (a prune, a sync, a reap),
//! and when it wants to be woken next without a change. The sync loop
//! only does I/O: it hands changes in, calls [`Syncer::tick`], acts on
//! the syncs it reports and sleeps until the wake-up it is given.

use std::time::{Duration, Instant};

use super::{SyncStats, Syncer};
use crate::reconcile::{GracePeriods, SettingsStore, Tables};

/// How often retired revisions are checked for a passed grace period.
const REAP: Duration = Duration::from_millis(50);
/// How long a prune that had to wait (revisions in their grace period)
/// waits before trying again.
const PRUNE_RETRY: Duration = Duration::from_secs(1);

/// When the maps are re-read and repaired (`--map-prune-interval`).
#[derive(Debug, Default)]
pub(super) struct Prunes {
    every: Option<Duration>,
    next: Option<Instant>,
}

/// What one [`Syncer::tick`] did, and when to tick again.
#[derive(Debug)]
pub struct Tick {
    /// The prune it ran (a full sync against the maps as re-read).
    pub pruned: Option<SyncStats>,
    /// The sync it ran.
    pub synced: Option<SyncStats>,
    /// The earliest of a retry, a prune, the end of the wait for this
    /// node's Node and, while revisions retire, a reap; `None`: nothing
    /// but a change wakes it.
    pub wake: Option<Instant>,
}

impl<T: Tables, G: GracePeriods, S: SettingsStore> Syncer<T, G, S> {
    /// Re-reads and repairs the maps every `every` (`None`: never).
    pub fn prune_every(&mut self, every: Option<Duration>) {
        self.prunes = Prunes { every, next: None };
    }

    /// Runs what is due at `now`: a reap (revisions retired by an
    /// earlier sync), then a prune, then a sync.
    pub fn tick(&mut self, now: Instant) -> Tick {
        if self.retiring() {
            self.reap();
        }
        let pruned = self.prune_if_due(now);
        let synced = self.sync(now);
        let reap = self.retiring().then(|| Instant::now() + REAP);
        let wake = [
            self.next_retry(),
            self.prunes.next,
            self.node_wait_until(),
            reap,
        ]
        .into_iter()
        .flatten()
        .min();
        Tick {
            pruned,
            synced,
            wake,
        }
    }

    /// Prunes if one is due at `now`, the first one `every` after the
    /// first tick; one that had to wait is tried again soon.
    fn prune_if_due(&mut self, now: Instant) -> Option<SyncStats> {
        let every = self.prunes.every?;
        let at = *self.prunes.next.get_or_insert(now + every);
        if at > now {
            return None;
        }
        let pruned = self.prune(now);
        self.prunes.next = Some(
            now + if pruned.is_some() {
                every
            } else {
                PRUNE_RETRY.min(every)
            },
        );
        pruned
    }
}
