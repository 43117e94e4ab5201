//! The watchers' backoff: kube-runtime's default (0.8 s doubling to 30 s,
//! jittered to up to twice that, reset by any event), except that a watch
//! the apiserver expired (410 Gone: it compacted past the watch's
//! position) relists at once. An expiry is no failure: it is how the
//! apiserver asks for a relist, and waiting for the backoff (client-go's
//! reflector waits too) leaves the maps behind the cluster for 0.8 to
//! 1.6 s more. At most one expiry per [`AT_ONCE_EVERY`] relists at once,
//! so an apiserver that expires every watch is not asked for a list after
//! list.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt as _};
use kube::runtime::{
    utils::{Backoff, StreamBackoff},
    watcher::{self, DefaultBackoff},
};

/// How often an expired watch may relist without waiting.
pub(super) const AT_ONCE_EVERY: Duration = Duration::from_secs(10);

/// Whether a watcher error is the apiserver expiring the watch's position.
pub(super) fn expired(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchError(status) if status.code == 410)
}

/// `watcher`'s stream with the backoff of this module.
pub(super) fn with_backoff<S, T>(stream: S) -> impl Stream<Item = watcher::Result<T>> + Send
where
    S: Stream<Item = watcher::Result<T>> + Send,
{
    let flag = Arc::new(AtomicBool::new(false));
    let mark = flag.clone();
    // The backoff is asked for a delay right after it sees an error; the
    // flag tells it what kind that error was.
    let marked = stream.inspect(move |item| {
        if let Err(e) = item {
            mark.store(expired(e), Ordering::SeqCst);
        }
    });
    StreamBackoff::new(
        marked,
        RelistAtOnce {
            policy: Policy::new(DefaultBackoff::default()),
            expired: flag,
        },
    )
}

/// The [`Backoff`] of [`with_backoff`].
struct RelistAtOnce {
    policy: Policy<DefaultBackoff>,
    expired: Arc<AtomicBool>,
}

impl Iterator for RelistAtOnce {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let expired = self.expired.swap(false, Ordering::SeqCst);
        self.policy.delay(expired, Instant::now())
    }
}

impl Backoff for RelistAtOnce {
    fn reset(&mut self) {
        self.policy.inner.reset();
    }
}

/// The choice, apart from the clock and the stream.
struct Policy<B> {
    inner: B,
    last_at_once: Option<Instant>,
}

impl<B: Backoff> Policy<B> {
    fn new(inner: B) -> Self {
        Self {
            inner,
            last_at_once: None,
        }
    }

    /// The delay after an error at `now`; `expired` if the watch expired.
    fn delay(&mut self, expired: bool, now: Instant) -> Option<Duration> {
        let recent = self
            .last_at_once
            .is_some_and(|at| now.duration_since(at) < AT_ONCE_EVERY);
        if expired && !recent {
            self.last_at_once = Some(now);
            return Some(Duration::ZERO);
        }
        self.inner.next()
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn status(code: u16) -> watcher::Error {
        watcher::Error::WatchError(Box::new(Status {
            code,
            ..Status::failure("too old resource version", "Expired")
        }))
    }

    #[test]
    fn only_a_410_from_the_apiserver_is_an_expiry() {
        assert!(expired(&status(410)));
        assert!(!expired(&status(500)));
        assert!(!expired(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn an_expired_watch_relists_at_once_but_not_twice_in_ten_seconds() {
        let mut p = Policy::new(DefaultBackoff::default());
        let t0 = Instant::now();
        assert_eq!(p.delay(true, t0), Some(Duration::ZERO));
        // Another expiry soon after: the ordinary backoff, 0.8 s at least.
        let second = p.delay(true, t0 + Duration::from_secs(1)).unwrap();
        assert!(second >= Duration::from_millis(800), "{second:?}");
        // Any other error backs off as before.
        let other = p.delay(false, t0 + Duration::from_secs(11)).unwrap();
        assert!(other >= Duration::from_millis(800), "{other:?}");
        // Ten seconds after the last relist at once, an expiry relists at
        // once again.
        assert_eq!(
            p.delay(true, t0 + Duration::from_secs(12)),
            Some(Duration::ZERO)
        );
    }
}
