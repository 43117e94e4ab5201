//! One listener's open connections, and which one to close when there are
//! too many.
//!
//! At the cap, a new connection evicts the open one that has been least
//! useful: first those that never sent a request, oldest first (so a flood
//! of idle connections evicts itself, not the probes and scrapers), then the
//! one whose last request is the oldest.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Instant,
};

use tokio::sync::oneshot;

#[derive(Debug)]
pub(super) struct Conns {
    cap: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// The eviction order: the first is evicted first.
    order: BTreeSet<Rank>,
    /// Each open connection's rank, and the sender whose drop evicts it.
    open: HashMap<u64, (Rank, oneshot::Sender<()>)>,
}

/// Sorts the least useful connection first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// Whether it has sent a request head (`false` sorts first).
    requested: bool,
    /// When it was accepted, or when its last request head arrived.
    since: Instant,
    id: u64,
}

/// A connection's entry in the table; dropping it removes the entry.
#[derive(Debug)]
pub(super) struct Ticket {
    conns: Arc<Conns>,
    id: u64,
}

impl Conns {
    pub(super) fn new(cap: usize) -> Self {
        assert!(cap > 0, "a listener must admit at least one connection");
        Self {
            cap,
            inner: Mutex::default(),
        }
    }

    /// Enters a new connection, first evicting one if the table is full.
    /// The receiver resolves when this connection is evicted in turn.
    pub(super) fn admit(this: &Arc<Self>) -> (Ticket, oneshot::Receiver<()>) {
        let (evict, evicted) = oneshot::channel();
        let mut inner = this.lock();
        while inner.open.len() >= this.cap {
            inner.evict_first();
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let rank = Rank {
            requested: false,
            since: Instant::now(),
            id,
        };
        inner.order.insert(rank);
        inner.open.insert(id, (rank, evict));
        let ticket = Ticket {
            conns: this.clone(),
            id,
        };
        (ticket, evicted)
    }

    /// Evicts the least useful connection; false if none is open.
    pub(super) fn evict_one(&self) -> bool {
        self.lock().evict_first()
    }

    /// Open connections.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().open.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Inner {
    fn evict_first(&mut self) -> bool {
        let Some(rank) = self.order.pop_first() else {
            return false;
        };
        // Dropping the sender wakes the connection's task, which then drops
        // (closes) the connection.
        self.open.remove(&rank.id);
        tracing::debug!(
            requested = rank.requested,
            idle = ?rank.since.elapsed(),
            "connection cap reached; closed the least useful connection"
        );
        true
    }
}

impl Ticket {
    /// The connection sent a request head: it moves behind every
    /// connection that never did, and behind the ones that asked earlier.
    pub(super) fn requested(&self) {
        let mut guard = self.conns.lock();
        let inner = &mut *guard;
        // Absent once evicted.
        let Some((rank, _)) = inner.open.get_mut(&self.id) else {
            return;
        };
        inner.order.remove(rank);
        *rank = Rank {
            requested: true,
            since: Instant::now(),
            id: self.id,
        };
        inner.order.insert(*rank);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut inner = self.conns.lock();
        if let Some((rank, _)) = inner.open.remove(&self.id) {
            inner.order.remove(&rank);
        }
    }
}
