//! The NodePort section's results: every round of every mode at each N in
//! each family, the SNAT capacity runs, and the `tc_cost` bench's figures.

pub(crate) use lb_tests::kubeproxy::Family;
use lb_tests::{probe::BenchReport, progstats::Runs};
use serde::Deserialize;

pub(crate) use super::node::Mode;
use super::{
    super::rounds::{Compared, Rounds},
    pps::Pps,
};

/// Everything the NodePort section measured.
pub(crate) struct NodePort {
    pub rows: Vec<Row>,
    pub capacity: Vec<Capacity>,
    /// How long each capacity run lasted.
    pub capacity_seconds: &'static str,
    pub tc_cost: TcCost,
    /// Packets per second at each N.
    pub pps: Pps,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    /// Connect, one request/response, close (RST): one new flow each.
    Tcp,
    /// One UDP socket per client worker, request/response on it.
    Udp,
}

impl Load {
    pub(crate) const ALL: [Load; 2] = [Load::Tcp, Load::Udp];
}

impl Compared for Mode {
    type Load = Load;

    fn name(self) -> &'static str {
        Mode::name(self)
    }

    fn loads(self) -> &'static [Load] {
        &Load::ALL
    }
}

/// One mode at one N over one family: every round's report per load, and
/// for ours what the tc programs ran meanwhile (ingress, egress; over both
/// devices).
pub(crate) struct Row {
    pub family: Family,
    pub mode: Mode,
    pub n: usize,
    pub runs: Rounds<Load>,
    pub tc: Vec<(Load, Runs, Runs)>,
}

impl Row {
    /// Mean ns per run of (ingress, egress) during `load`.
    pub(crate) fn tc_ns(&self, load: Load) -> (f64, f64) {
        let (mut i, mut e) = (Runs::default(), Runs::default());
        for (_, ri, re) in self.tc.iter().filter(|(l, ..)| *l == load) {
            i = Runs {
                time: i.time + ri.time,
                count: i.count + ri.count,
            };
            e = Runs {
                time: e.time + re.time,
                count: e.count + re.count,
            };
        }
        (i.ns_per_run(), e.ns_per_run())
    }
}

/// SNAT capacity: new flows to a NodePort whose one endpoint is on another
/// node, each from a fresh client port (a DNS-style resolver; short TCP
/// connections), for longer than the UDP timeout, through ours and
/// kube-proxy's layouts: how many were answered, and how many failed.
/// In each family.
pub(crate) struct Capacity {
    pub family: Family,
    pub mode: Mode,
    pub load: Load,
    pub report: BenchReport,
    /// Ours: packets dropped for want of a SNAT port meanwhile.
    pub exhausted: Option<u64>,
}

/// The row of `mode` at `n` over `family`.
pub(crate) fn find(rows: &[Row], family: Family, mode: Mode, n: usize) -> &Row {
    rows.iter()
        .find(|r| r.family == family && r.mode == mode && r.n == n)
        .expect("every mode at every N in every family")
}

/// The `tc_cost` bench's output: its printed table, and its figures.
pub(crate) struct TcCost {
    /// The human-readable table, as printed.
    pub table: String,
    pub figures: Figures,
}

/// The part of the bench's JSON the report uses.
#[derive(Deserialize)]
pub(crate) struct Figures {
    /// One run of many repetitions per case: the kernel's mean.
    repeat: Vec<Repeat>,
}

#[derive(Deserialize)]
struct Repeat {
    id: String,
    ns: u64,
}

impl Figures {
    /// The kernel's mean ns per packet of the repeated case `id`.
    pub(crate) fn repeat_ns(&self, id: &str) -> Option<u64> {
        self.repeat.iter().find(|r| r.id == id).map(|r| r.ns)
    }
}

/// The repeated case of a DNATed packet on a conntrack hit.
pub(crate) const INGRESS_HIT: &str = "ingress_hit";
/// The XDP fast path's: DNATed and sent with `XDP_TX`.
pub(crate) const XDP_HIT: &str = "xdp_hit";
