//! How long, how many, how often: the soak's parameters for a run of a
//! given length. A 30-minute run has the issue's figures (agent SIGKILL
//! every 20 to 40 s, apiserver outages of 5 to 60 s); a shorter one scales
//! the apiserver's outages and the gaps between them down in proportion
//! (by `minutes / 30`, at least 0.1; an outage lasts at least 2 s), so that
//! a one-minute run still sees every kind of disturbance, each at least
//! once (the first two apiserver disturbances are one outage and one forced
//! relist, the first three workload changes one rolling update, one
//! Service created and one deleted, each pair or triple in random order).
//! The agent's restarts are not scaled. The long soak has the same
//! disturbances but for the agent's: one agent lives through the run.

use std::time::Duration;

/// A range of seconds to draw from.
pub type Range = (f64, f64);

/// Which soak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Agents SIGKILLed and restarted every 20 to 40 s.
    Chaos,
    /// One agent for the whole run, judged for growth (`flatness.rs`).
    Long,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub mode: Mode,
    pub minutes: f64,
    /// The factor the apiserver disturbances are scaled by.
    pub scale: f64,
    /// Services at the start; the run keeps between `min_services` and
    /// `max_services`.
    pub services: usize,
    pub min_services: usize,
    pub max_services: usize,
    /// Pods per Service (a Deployment's replicas).
    pub replicas: usize,
    /// Agent SIGKILL every ... (never in the long soak)
    pub agent_every: Range,
    /// ... and restarted this long after.
    pub agent_down: Range,
    /// An apiserver outage lasts ...
    pub outage: Range,
    /// Time between two apiserver disturbances (outage or forced relist).
    pub api_gap: Range,
    /// How long the watches are held back before a forced relist.
    pub hold: Range,
    /// Time between two workload changes (rolling update, Service created
    /// or deleted).
    pub workload_gap: Range,
    /// A new pod is ready this long before an old one is deleted.
    pub surge: Range,
    /// A deleted pod's endpoint is terminating (still serving) this long
    /// before it leaves the slice.
    pub terminating: Range,
    /// A pod's process stops this long after its endpoint left the slice
    /// (and not before the agent stopped sending new connections to it).
    pub grace: Range,
    /// Weights of a rolling update, a Service created, a Service deleted.
    pub weights: (u32, u32, u32),
    /// Client pods, each running TCP and UDP workers.
    pub clients: usize,
    /// How often the agent's RSS, fds and the map entries are sampled.
    pub sample_every: Duration,
}

impl Plan {
    pub fn new(minutes: f64, mode: Mode) -> Self {
        let scale = (minutes / 30.0).clamp(0.1, 1.0);
        let s = |lo: f64, hi: f64| (lo * scale, hi * scale);
        let outage = s(5.0, 60.0);
        Self {
            mode,
            minutes,
            scale,
            services: 50,
            min_services: 45,
            max_services: 55,
            replicas: 2,
            agent_every: (20.0, 40.0),
            agent_down: (0.0, 1.0),
            outage: (outage.0.max(2.0), outage.1.max(4.0)),
            api_gap: s(30.0, 90.0),
            hold: (0.3, 1.5),
            workload_gap: (0.5, 3.0),
            surge: (0.2, 1.0),
            terminating: (0.5, 2.0),
            grace: (2.0, 5.0),
            weights: (6, 1, 1),
            clients: 2,
            // A short long soak still gets a few samples per third.
            sample_every: Duration::from_secs(if mode == Mode::Long && minutes < 5.0 {
                2
            } else {
                5
            }),
        }
    }

    /// Whether the agent is SIGKILLed and restarted.
    pub fn restarts(&self) -> bool {
        self.mode == Mode::Chaos
    }

    pub fn run(&self) -> Duration {
        Duration::from_secs_f64(self.minutes * 60.0)
    }
}

/// A duration drawn uniformly from `range`.
pub fn draw(rng: &mut fastrand::Rng, range: Range) -> Duration {
    Duration::from_secs_f64(range.0 + rng.f64() * (range.1 - range.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_minutes_has_the_issues_figures_and_one_minute_scales_them() {
        let full = Plan::new(30.0, Mode::Chaos);
        assert_eq!(full.outage, (5.0, 60.0));
        assert_eq!(full.agent_every, (20.0, 40.0));
        let ci = Plan::new(1.0, Mode::Chaos);
        assert_eq!(ci.scale, 0.1);
        assert_eq!(ci.outage, (2.0, 6.0));
        assert_eq!(ci.api_gap, (3.0, 9.0));
        assert_eq!(ci.agent_every, full.agent_every, "not scaled");
        // The first outage and relist both fit in a minute, with room.
        assert!(ci.api_gap.1 * 2.0 + ci.outage.1 + ci.hold.1 < 30.0);
        assert_eq!(Plan::new(120.0, Mode::Chaos).scale, 1.0);
        // The long soak: the same disturbances, no restarts.
        let long = Plan::new(60.0, Mode::Long);
        assert!(!long.restarts() && full.restarts());
        assert_eq!((long.outage, long.api_gap), (full.outage, full.api_gap));
        assert_eq!(long.sample_every, Duration::from_secs(5));
        assert_eq!(
            Plan::new(1.0, Mode::Long).sample_every,
            Duration::from_secs(2)
        );
    }

    #[test]
    fn draws_stay_in_range_and_a_seed_replays() {
        let mut a = fastrand::Rng::with_seed(7);
        let mut b = fastrand::Rng::with_seed(7);
        for _ in 0..100 {
            let d = draw(&mut a, (2.0, 5.0));
            assert!((2.0..=5.0).contains(&d.as_secs_f64()));
            assert_eq!(d, draw(&mut b, (2.0, 5.0)));
        }
    }
}
