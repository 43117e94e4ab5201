//! What one run of the bench measures, derived from its flags.

use std::path::PathBuf;

use super::args::BenchArgs;

/// What one run measures, derived from the flags.
pub(super) struct Plan {
    pub quick: bool,
    /// No datapath rounds.
    pub control_only: bool,
    /// No kube-proxy rule loads in the control plane part.
    pub ours_only: bool,
    /// Control plane objects carry what a real cluster adds to them.
    pub realistic: bool,
    /// The lb-agent binary measured.
    pub agent_bin: PathBuf,
    pub scales: Vec<usize>,
    /// The NodePort section's N (the datapath section goes further).
    pub nodeport_scales: Vec<usize>,
    /// Packets per second: larger N, ours alone (kube-proxy's rules at
    /// that size take longer to load than the section to run).
    pub pps_ours_scales: Vec<usize>,
    pub endpoints: usize,
    pub concurrency: u32,
    pub seconds: f64,
    /// Datapath rounds per mode, alternating in ABBA order.
    pub rounds: usize,
    /// Packets per second: seconds per measurement, and rounds per mode
    /// (ABBA).
    pub pps_seconds: f64,
    pub pps_rounds: usize,
    /// The connect loop's N, and the Service addresses of each protocol it
    /// cycles over.
    pub connect_n: usize,
    pub connect_addrs: usize,
    /// Control plane: Services and endpoints each.
    pub cold: (usize, usize),
    /// Control plane: one-endpoint changes for ours, and kube-proxy partial
    /// syncs for the others.
    pub updates: usize,
    pub partial_syncs: usize,
    pub out_dir: PathBuf,
}

impl Plan {
    pub(super) fn new(a: &BenchArgs) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace")
            .to_path_buf();
        let (scales, seconds, rounds, cold, updates, partial_syncs) = if a.quick {
            (vec![1, 100], 1.0, 2, (500, 10), 20, 5)
        } else {
            (
                vec![1, 1000, 10_000, 100_000],
                3.0,
                4,
                (10_000, 10),
                200,
                10,
            )
        };
        Self {
            quick: a.quick,
            control_only: a.control_only,
            ours_only: a.ours_only,
            realistic: a.realistic_objects,
            agent_bin: lb_tests::agent::agent_bin(),
            nodeport_scales: if a.control_only {
                Vec::new()
            } else {
                scales.iter().copied().filter(|&n| n <= 10_000).collect()
            },
            pps_ours_scales: if a.control_only {
                Vec::new()
            } else {
                scales.iter().copied().filter(|&n| n > 10_000).collect()
            },
            scales: if a.control_only { Vec::new() } else { scales },
            endpoints: a.endpoints,
            concurrency: a.concurrency,
            seconds: a.seconds.unwrap_or(seconds),
            rounds,
            pps_seconds: if a.quick { 0.5 } else { 2.0 },
            pps_rounds: if a.quick { 1 } else { 3 },
            connect_n: if a.quick { 1000 } else { 10_000 },
            connect_addrs: a.connect_addrs,
            cold,
            updates,
            partial_syncs,
            out_dir: root.join("target/bench"),
        }
    }

    /// Every N of the packets-per-second section: the NodePort section's,
    /// then ours alone.
    pub(super) fn pps_scales(&self) -> impl Iterator<Item = usize> + '_ {
        self.nodeport_scales
            .iter()
            .chain(&self.pps_ours_scales)
            .copied()
    }
}
