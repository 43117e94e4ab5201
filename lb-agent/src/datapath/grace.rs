//! RCU grace periods from userspace, for deferred deletion.
//!
//! Every eBPF program runs inside an RCU read-side critical section (cgroup
//! programs under `rcu_read_lock()`, tc and XDP with bottom halves off),
//! and `membarrier(MEMBARRIER_CMD_GLOBAL)` returns only after
//! `synchronize_rcu()`: once it returns, every program that was running when
//! it was called has finished. The kernel skips the wait on a machine with
//! one online CPU and refuses the command with `nohz_full`; then a fixed
//! wait stands in, far longer than any program run.

use std::{
    io,
    sync::{
        Arc, Condvar, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rustix::thread::{MembarrierCommand, membarrier, membarrier_query};

use crate::reconcile::GracePeriods;

/// The wait used where `membarrier` cannot stand for a grace period.
const FALLBACK_WAIT: Duration = Duration::from_secs(1);

/// Grace periods run by a background thread, one after another, each
/// covering every mark made before it started.
#[derive(Clone, Debug)]
pub struct MembarrierGrace {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The newest token handed out.
    marked: AtomicU64,
    /// Every token up to this one has passed.
    passed: AtomicU64,
    /// Set when a mark waits for the thread.
    wake: Mutex<bool>,
    cond: Condvar,
}

impl MembarrierGrace {
    /// Starts the grace-period thread.
    pub fn start() -> io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let worker = shared.clone();
        std::thread::Builder::new()
            .name("grace-period".into())
            .spawn(move || worker.run())?;
        Ok(Self { shared })
    }

    /// Whether `membarrier` gives real RCU grace periods here (for logs).
    pub fn exact() -> bool {
        membarrier_query().contains_command(MembarrierCommand::Global) && online_cpus() > 1
    }
}

impl Shared {
    fn run(&self) {
        loop {
            {
                let mut wake = self.wake.lock().unwrap_or_else(|p| p.into_inner());
                while !*wake {
                    wake = self.cond.wait(wake).unwrap_or_else(|p| p.into_inner());
                }
                *wake = false;
            }
            // Read before the grace period starts: it covers these marks.
            let target = self.marked.load(Ordering::SeqCst);
            wait_for_readers();
            self.passed.store(target, Ordering::SeqCst);
        }
    }
}

/// Returns once every eBPF program running at the call has finished.
pub fn wait_for_readers() {
    if membarrier(MembarrierCommand::Global).is_err() || online_cpus() <= 1 {
        std::thread::sleep(FALLBACK_WAIT);
    }
}

/// The CPUs online (rustix has no `sysconf`; glibc reads sysfs for this).
fn online_cpus() -> libc::c_long {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }
}

impl GracePeriods for MembarrierGrace {
    fn mark(&mut self) -> u64 {
        let token = self.shared.marked.fetch_add(1, Ordering::SeqCst) + 1;
        *self.shared.wake.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.cond.notify_one();
        token
    }

    fn passed(&self, token: u64) -> bool {
        self.shared.passed.load(Ordering::SeqCst) >= token
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_mark_passes_after_a_grace_period_and_later_marks_wait_for_another() {
        let mut g = MembarrierGrace::start().unwrap();
        let first = g.mark();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !g.passed(first) {
            assert!(Instant::now() < deadline, "no grace period in 10 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        let second = g.mark();
        assert!(second > first);
        while !g.passed(second) {
            assert!(Instant::now() < deadline, "no second grace period");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
