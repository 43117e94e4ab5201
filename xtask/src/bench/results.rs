//! What the bench measured, as plain data: what the renderers and the
//! targets read, and nothing of how it was measured.

pub mod control;
pub mod datapath;
pub mod nodeport;
pub mod scale;

/// Everything a run of the main bench measured.
pub struct Results {
    /// Every datapath mode at each N; none with `--control-only`.
    pub datapath: Vec<datapath::Row>,
    /// None with `--control-only`.
    pub nodeport: Option<nodeport::NodePort>,
    pub control: control::Control,
}
