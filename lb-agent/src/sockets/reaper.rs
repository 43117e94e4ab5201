//! [`SocketReaper`]: passes on a thread of their own, so that whoever
//! learns a backend stopped serving (the sync loop) never waits for one.

use std::{
    io,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::{self, JoinHandle},
};

use super::{NetnsSources, Report, SocketsError, StaleUdp, UdpIter, UdpServing, scan};

/// Runs [`destroy_stale`](super::destroy_stale) passes one after another.
/// Requests that queue up while a pass runs become one pass. Dropping it
/// stops the thread: a running pass ends after its current namespace, and
/// what is still queued is dropped.
pub struct SocketReaper {
    jobs: Option<mpsc::Sender<Job>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One request; requests merge into one with the newest maps directory
/// and iterator, as the maps may have moved (a migration).
#[derive(Debug)]
struct Job {
    maps_dir: PathBuf,
    iter: Option<UdpIter>,
    stale: StaleUdp,
}

impl Job {
    fn absorb(&mut self, later: Job) {
        self.maps_dir = later.maps_dir;
        if later.iter.is_some() {
            self.iter = later.iter;
        }
        self.stale.merge(later.stale);
    }
}

impl SocketReaper {
    /// Starts the thread. Passes ask `serving` whether a socket's backend
    /// still serves (it is the sync loop's). `on_pass` gets each pass's outcome on that
    /// thread, e.g. to add `sockets_destroyed` to a counter and log
    /// `first_failure`.
    pub fn spawn<F>(
        netns: NetnsSources,
        serving: Arc<UdpServing>,
        mut on_pass: F,
    ) -> io::Result<Self>
    where
        F: FnMut(Result<Report, SocketsError>) + Send + 'static,
    {
        let (jobs, queue) = mpsc::channel::<Job>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::Builder::new()
            .name("socket-reaper".into())
            .spawn(move || {
                while let Ok(mut job) = queue.recv() {
                    for later in queue.try_iter() {
                        job.absorb(later);
                    }
                    if stopped.load(Ordering::Relaxed) {
                        break;
                    }
                    on_pass(scan::run(
                        &job.maps_dir,
                        job.iter.as_ref(),
                        &job.stale,
                        &serving,
                        &netns,
                        &stopped,
                    ));
                }
            })?;
        Ok(Self {
            jobs: Some(jobs),
            stop,
            thread: Some(thread),
        })
    }

    /// Queues a pass over `stale` with the sockets' storage read through
    /// `iter` and the reverse-NAT maps pinned in `maps_dir`. Fails only if
    /// the thread has died (`on_pass` panicked).
    pub fn submit(
        &self,
        maps_dir: PathBuf,
        iter: Option<UdpIter>,
        stale: StaleUdp,
    ) -> Result<(), SocketsError> {
        let job = Job {
            maps_dir,
            iter,
            stale,
        };
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or(SocketsError::ReaperStopped)
    }
}

impl Drop for SocketReaper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing the channel ends the thread's wait for a job.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            // A panic in `on_pass` has been reported by the panic hook.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::mpsc::RecvTimeoutError, time::Duration};

    use super::*;

    fn request(frontends: &[&str]) -> StaleUdp {
        frontends.iter().map(|f| f.parse().unwrap()).collect()
    }

    #[test]
    fn queued_requests_merge_into_the_newest_pin() {
        let mut job = Job {
            maps_dir: "/old".into(),
            iter: None,
            stale: request(&["192.0.2.1:53"]),
        };
        job.absorb(Job {
            maps_dir: "/new".into(),
            iter: None,
            stale: request(&["192.0.2.2:53"]),
        });
        assert_eq!(job.maps_dir, PathBuf::from("/new"));
        assert_eq!(job.stale, request(&["192.0.2.1:53", "192.0.2.2:53"]));
    }

    #[test]
    fn each_pass_is_reported_and_drop_stops_the_thread() {
        let (tx, rx) = mpsc::channel();
        let reaper = SocketReaper::spawn(
            NetnsSources {
                own: false,
                dirs: Vec::new(),
                proc: None,
            },
            Arc::default(),
            move |outcome| tx.send(outcome).unwrap(),
        )
        .unwrap();
        let missing = PathBuf::from("/sys/fs/bpf/lb-agent-test-no-such-map");
        reaper
            .submit(missing.clone(), None, request(&["192.0.2.1:53"]))
            .unwrap();
        let outcome = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(
                &outcome,
                Err(SocketsError::RevNat { path, .. }) if *path == missing.join(lb_common::REVNAT4.pin)
            ),
            "{outcome:?}"
        );
        // An empty request touches no map.
        reaper.submit(missing, None, StaleUdp::new()).unwrap();
        let outcome = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(matches!(
            outcome,
            Ok(Report {
                netns_visited: 0,
                ..
            })
        ));
        drop(reaper);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(1)).unwrap_err(),
            RecvTimeoutError::Disconnected,
            "the thread ended and dropped the callback"
        );
    }
}
