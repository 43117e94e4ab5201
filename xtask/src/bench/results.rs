//! What the bench measured, as plain data: what the renderers and the
//! targets read, and nothing of how it was measured.

pub(super) mod connect;
pub(super) mod control;
pub(super) mod datapath;
pub(super) mod node;
pub(super) mod nodeport;
pub(super) mod pps;
pub(super) mod scale;

/// Everything a run of the main bench measured.
pub(super) struct Results {
    /// Every datapath mode at each N; none with `--control-only`.
    pub datapath: Vec<datapath::Row>,
    /// The connect loop's rows; none with `--control-only`.
    pub connect: Vec<connect::Row>,
    /// None with `--control-only`.
    pub nodeport: Option<nodeport::NodePort>,
    pub control: control::Control,
}
