//! What the connect loop measured.

use lb_tests::kubeproxy::Proto;

/// Where a loop's connects go, and through what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Service addresses, through our programs.
    Services,
    /// The same addresses with no program attached: the kernel's floor.
    NoPrograms,
    /// Addresses that are no Service (the endpoints'), through our programs.
    NotServices,
}

impl Target {
    pub(crate) const ALL: [Target; 3] = [Target::Services, Target::NoPrograms, Target::NotServices];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::Services => "Service addresses, ours",
            Target::NoPrograms => "same addresses, no programs",
            Target::NotServices => "non-Service addresses, ours",
        }
    }
}

/// One loop (socket + connect + close, back to back on one thread), each
/// round's figures.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Services programmed.
    pub n: usize,
    pub proto: Proto,
    pub target: Target,
    /// Addresses cycled through.
    pub addrs: usize,
    /// Wall time per iteration, ns, per round.
    pub ns_per_loop: Vec<f64>,
    /// The connect program's mean run time per call, ns, per round (ours
    /// only): the kernel's `run_time_ns / run_cnt`.
    pub ns_per_call: Vec<f64>,
    /// Iterations that failed, over all rounds.
    pub failed: u64,
}
