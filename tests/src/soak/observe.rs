//! The observer thread: reads the frontends of the changes in flight
//! every 2 ms (every frontend every 100 ms otherwise, to catch drift, or
//! while a disturbance waits for all of them) and feeds the reads to the
//! convergence [`Tracker`]; and the sampler thread, which every few
//! seconds samples the agent's RSS and open file descriptors (`/proc`) and
//! the entries of every pinned map.

use std::{
    collections::BTreeSet,
    fs,
    net::Ipv4Addr,
    path::PathBuf,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{converge::Tracker, wire::now_ns};
use crate::maps::{self, Entries, LbMaps};

/// One sample of the agent and its maps.
#[derive(Clone, Debug)]
pub struct Sample {
    pub t_ns: u64,
    /// How long counting the entries took.
    pub took: Duration,
    /// The agent's pid; 0 while it is down.
    pub pid: u32,
    pub rss_kib: Option<u64>,
    pub fds: Option<usize>,
    pub entries: Option<Entries>,
    /// What the live Services need: frontends, slots, backends.
    pub needed: (usize, usize, usize),
    /// Nothing was in flight, made or held back (an outage, watches held)
    /// while the entries were counted: the agent is connected and the maps
    /// should hold what the live Services need.
    pub settled: bool,
}

/// How often the maps are read while a change is in flight.
const FAST: Duration = Duration::from_millis(2);
/// How often every frontend is read when nothing is in flight.
const SLOW: Duration = Duration::from_millis(100);
/// How often the reverse-NAT map's entries are counted.
const REVNAT_EVERY: Duration = Duration::from_secs(30);

struct Inner {
    maps: PathBuf,
    tracker: Mutex<Tracker>,
    samples: Mutex<Vec<Sample>>,
    /// Reads of the maps that failed (the message of each, at most 20).
    errors: Mutex<(u64, Vec<String>)>,
    /// Every read: whether it covered every frontend, and how long it took
    /// (µs).
    reads: Mutex<Vec<(bool, u32)>>,
    pid: AtomicU32,
    stop: AtomicBool,
}

pub struct Observer {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

/// What the observer saw over the run.
pub struct Observed {
    pub tracker: Tracker,
    pub samples: Vec<Sample>,
    pub read_errors: (u64, Vec<String>),
    /// Every read of the maps: full or not, and how long it took (µs).
    pub reads: Vec<(bool, u32)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Observer {
    /// Starts observing the maps pinned in `maps` (a pin directory's
    /// `maps/`), sampling every `every`.
    pub fn start(maps: PathBuf, tracker: Tracker, pid: u32, every: Duration) -> Self {
        let inner = Arc::new(Inner {
            maps,
            tracker: Mutex::new(tracker),
            samples: Mutex::new(Vec::new()),
            errors: Mutex::new((0, Vec::new())),
            reads: Mutex::new(Vec::new()),
            pid: AtomicU32::new(pid),
            stop: AtomicBool::new(false),
        });
        let threads = vec![
            {
                let inner = inner.clone();
                std::thread::spawn(move || observe(&inner))
            },
            {
                let inner = inner.clone();
                std::thread::spawn(move || sampler(&inner, every))
            },
        ];
        Self { inner, threads }
    }

    /// The convergence tracker, to record changes and ask about them.
    pub fn tracker(&self) -> MutexGuard<'_, Tracker> {
        lock(&self.inner.tracker)
    }

    /// The latest sample, if any.
    pub fn last_sample(&self) -> Option<Sample> {
        lock(&self.inner.samples).last().cloned()
    }

    /// The agent's pid now (0: down).
    pub fn set_pid(&self, pid: u32) {
        self.inner.pid.store(pid, Ordering::SeqCst);
    }

    /// Stops the thread; returns what it saw.
    pub fn finish(mut self) -> Observed {
        self.stop();
        Observed {
            tracker: std::mem::take(&mut *lock(&self.inner.tracker)),
            samples: std::mem::take(&mut *lock(&self.inner.samples)),
            read_errors: std::mem::take(&mut *lock(&self.inner.errors)),
            reads: std::mem::take(&mut *lock(&self.inner.reads)),
        }
    }
}

impl Observer {
    fn stop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn observe(inner: &Inner) {
    let mut maps: Option<LbMaps> = None;
    let mut next_full = 0;
    while !inner.stop.load(Ordering::SeqCst) {
        let (pending, blocked, keys) = {
            let t = lock(&inner.tracker);
            (t.pending() > 0, t.blocked(), t.pending_keys())
        };
        let now = now_ns();
        // A change in flight: its frontends, often. Nothing in flight: every
        // frontend, to catch drift.
        let read = match keys {
            Some(keys) if pending => Some((Some(keys), false)),
            _ if pending || now >= next_full => Some((None, true)),
            _ => None,
        };
        if let Some((keys, full)) = read {
            let t0 = Instant::now();
            let started = now_ns();
            let covered: Option<BTreeSet<Ipv4Addr>> = keys
                .as_ref()
                .map(|k| k.iter().map(|(vip, _, _)| *vip).collect());
            let result = maps
                .take()
                .map_or_else(|| LbMaps::open(&inner.maps), Ok)
                .and_then(|m| {
                    let view = match &keys {
                        Some(keys) => m.view_of(keys),
                        None => m.view(),
                    };
                    maps = Some(m);
                    view
                });
            let took = t0.elapsed();
            match result {
                Ok(view) => {
                    lock(&inner.tracker).observe(&view, covered.as_ref(), started, now_ns());
                }
                Err(e) => {
                    // Opened again at the next read.
                    maps = None;
                    let mut errors = lock(&inner.errors);
                    errors.0 += 1;
                    if errors.1.len() < 20 {
                        errors.1.push(format!("{e:#}"));
                    }
                }
            }
            lock(&inner.reads).push((full, took.as_micros() as u32));
            if full {
                next_full = now + SLOW.as_nanos() as u64;
            }
        }
        std::thread::sleep(if pending && !blocked { FAST } else { FAST * 5 });
    }
}

/// Samples every `every` until stopped: on a thread of its own, as
/// counting every entry of the maps walks hundreds of thousands of keys.
fn sampler(inner: &Inner, every: Duration) {
    let mut next = now_ns();
    let mut next_revnat = next;
    while !inner.stop.load(Ordering::SeqCst) {
        let now = now_ns();
        if now >= next {
            let revnat = now >= next_revnat;
            if revnat {
                next_revnat = now + REVNAT_EVERY.as_nanos() as u64;
            }
            let sample = sample(inner, now, revnat);
            lock(&inner.samples).push(sample);
            next = now + every.as_nanos() as u64;
        }
        std::thread::sleep(SLOW);
    }
}

fn sample(inner: &Inner, now: u64, revnat: bool) -> Sample {
    let pid = inner.pid.load(Ordering::SeqCst);
    let (rss_kib, fds) = if pid == 0 {
        (None, None)
    } else {
        (rss_kib(pid), fds(pid))
    };
    // Nothing in flight or held back, the changes made so far, the need.
    let state = || {
        let t = lock(&inner.tracker);
        (
            t.pending() == 0 && !t.blocked(),
            t.records().len(),
            t.needed(),
        )
    };
    let before = state();
    let t = Instant::now();
    let entries = maps::count_entries(&inner.maps, revnat).ok();
    let took = t.elapsed();
    let after = state();
    Sample {
        t_ns: now,
        took,
        pid,
        rss_kib,
        fds,
        entries,
        needed: after.2,
        settled: before.0 && after.0 && before.1 == after.1,
    }
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Open file descriptors of `pid`.
pub fn fds(pid: u32) -> Option<usize> {
    Some(fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}
