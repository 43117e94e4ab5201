//! A bound on how many lines a repeating error writes to the log.

use std::time::{Duration, Instant};

/// Allows `per_window` lines per `window`; what it refuses is counted and
/// reported by the next line it allows.
#[derive(Debug)]
pub struct LogBudget {
    window: Duration,
    per_window: u32,
    started: Option<Instant>,
    used: u32,
    suppressed: u64,
}

impl LogBudget {
    pub const fn new(per_window: u32, window: Duration) -> Self {
        Self {
            window,
            per_window,
            started: None,
            used: 0,
            suppressed: 0,
        }
    }

    /// `Some(n)` when a line may be written now, `n` being the number of
    /// lines suppressed since the last allowed one; `None` when over budget.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .started
            .is_none_or(|s| now.saturating_duration_since(s) >= self.window)
        {
            self.started = Some(now);
            self.used = 0;
        }
        if self.used >= self.per_window {
            self.suppressed += 1;
            return None;
        }
        self.used += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_a_budget_per_window_and_counts_the_rest() {
        let mut b = LogBudget::new(2, Duration::from_secs(10));
        let t = Instant::now();
        assert_eq!(b.allow(t), Some(0));
        assert_eq!(b.allow(t), Some(0));
        assert_eq!(b.allow(t), None);
        assert_eq!(b.allow(t + Duration::from_secs(9)), None);
        assert_eq!(b.allow(t + Duration::from_secs(10)), Some(2));
    }
}
