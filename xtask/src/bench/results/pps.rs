//! The packets-per-second section's results: UDP frames from the XDP
//! generator to a NodePort, counted where they arrive, per bed and mode at
//! each N in each family.

pub(crate) use lb_tests::kubeproxy::Family;
use lb_tests::pktgen::Sent;

use super::{super::stats::median, node::Mode};

/// Which endpoints the frames go to, and so what they cross after the
/// node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PpsBed {
    /// The NodePort section's pods, on the far side of a bridge: every
    /// frame the node sends on becomes a socket buffer at the next hop and
    /// crosses the bridge (end to end).
    EndToEnd,
    /// Endpoints routed through another veth to a namespace whose XDP
    /// program counts and drops every frame: after the generator, no
    /// socket buffer is made but the ones the node itself makes.
    Sink,
}

impl PpsBed {
    /// Both, in report order.
    pub(crate) const ALL: [PpsBed; 2] = [PpsBed::Sink, PpsBed::EndToEnd];

    /// The bed in a file name or a chart's title.
    pub(crate) fn short(self) -> &'static str {
        match self {
            PpsBed::EndToEnd => "end to end",
            PpsBed::Sink => "XDP sink",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            PpsBed::EndToEnd => "end to end: through a bridge to the pods",
            PpsBed::Sink => "XDP sink: to a counter in XDP behind another veth",
        }
    }
}

/// Where the generator's frames go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PpsMode {
    /// The physical limit: the generator's veth straight to a receiver
    /// that counts and drops (direct's node, with the counter on the
    /// client's link).
    Ceiling,
    /// Through a node of the NodePort section to the bed's endpoints,
    /// counted there.
    Node(Mode),
}

impl PpsMode {
    /// Every row, in table order.
    pub(crate) const ALL: [PpsMode; 5] = [
        PpsMode::Ceiling,
        PpsMode::Node(Mode::OursXdp),
        PpsMode::Node(Mode::Ours),
        PpsMode::Node(Mode::Iptables),
        PpsMode::Node(Mode::Nftables),
    ];
    /// The rows of ours alone (no kube-proxy rules loaded).
    pub(crate) const OURS: [PpsMode; 3] = [
        PpsMode::Ceiling,
        PpsMode::Node(Mode::OursXdp),
        PpsMode::Node(Mode::Ours),
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            PpsMode::Ceiling => "generator ceiling",
            PpsMode::Node(m) => m.name(),
        }
    }
}

/// One measurement: what was sent, what arrived, and where the CPUs spent
/// their softirq time meanwhile.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    pub sent: Sent,
    /// Frames counted at the receivers, per CPU that received them.
    pub received: Vec<u64>,
    /// Seconds of softirq time per CPU during the run (`/proc/stat`).
    pub softirq: Vec<f64>,
}

impl Run {
    /// Frames received per second of sending.
    pub(crate) fn pps(&self) -> f64 {
        self.received.iter().sum::<u64>() as f64 / self.sent.seconds
    }
}

/// One mode at one N over one family on one bed: every round's run.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    pub bed: PpsBed,
    pub family: Family,
    pub mode: PpsMode,
    pub n: usize,
    pub runs: Vec<Run>,
}

impl Row {
    /// The median of the rounds' received rates.
    pub(crate) fn pps(&self) -> f64 {
        median(self.runs.iter().map(Run::pps))
    }

    /// The median of the rounds' offered rates (what the generator sent).
    pub(crate) fn offered(&self) -> f64 {
        median(self.runs.iter().map(|r| r.sent.rate))
    }

    /// CPUs on which at least a tenth of the frames arrived: the ones that
    /// forwarded them (a veth hands a frame to its peer's receive on the
    /// sending CPU, so the node's receive, its forwarding and the pod's
    /// counter run in one softirq on one CPU). Softirq time per CPU would
    /// also count other work on the machine.
    pub(crate) fn cpus(&self) -> usize {
        self.rx_shares()
            .iter()
            .filter(|&&s| s >= 0.1)
            .count()
            .max(1)
    }

    /// [`Self::pps`] per forwarding CPU ([`Self::cpus`]).
    pub(crate) fn per_core(&self) -> f64 {
        self.pps() / self.cpus() as f64
    }

    /// Per CPU, its share of the frames received over all rounds.
    pub(crate) fn rx_shares(&self) -> Vec<f64> {
        shares(
            self.runs
                .iter()
                .map(|r| r.received.iter().map(|&x| x as f64)),
        )
    }

    /// Per CPU, its share of the softirq time over all rounds.
    pub(crate) fn softirq_shares(&self) -> Vec<f64> {
        shares(self.runs.iter().map(|r| r.softirq.iter().copied()))
    }
}

/// Element-wise sums of `per_cpu` vectors, as fractions of their total.
fn shares<I: Iterator<Item = f64>>(per_cpu: impl Iterator<Item = I>) -> Vec<f64> {
    let mut sum: Vec<f64> = Vec::new();
    for v in per_cpu {
        for (i, x) in v.enumerate() {
            if sum.len() <= i {
                sum.resize(i + 1, 0.0);
            }
            sum[i] += x;
        }
    }
    let total: f64 = sum.iter().sum();
    sum.iter().map(|x| x / total).collect()
}

/// Everything the section measured, and how.
#[derive(Clone, Debug)]
pub(crate) struct Pps {
    pub rows: Vec<Row>,
    /// Distinct source ports of the generator's frames.
    pub flows: u32,
    /// Bytes per frame, without the FCS.
    pub frame_len: usize,
    /// The CPU the generator ran on.
    pub generator_cpu: usize,
    pub seconds: f64,
    pub rounds: usize,
}

/// The row of `mode` at `n` over `family` on `bed`, if measured.
pub(crate) fn find(
    rows: &[Row],
    bed: PpsBed,
    family: Family,
    mode: PpsMode,
    n: usize,
) -> Option<&Row> {
    rows.iter()
        .find(|r| r.bed == bed && r.family == family && r.mode == mode && r.n == n)
}
