//! The flags of `cargo xtask bench`, as clap parses them: what [`Plan`]
//! derives a run from.
//!
//! [`Plan`]: super::plan::Plan

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Clone, Debug)]
pub(crate) struct BenchArgs {
    /// A one-minute smoke run at small N (what CI runs).
    #[arg(long)]
    pub quick: bool,
    /// Endpoints per Service in the datapath runs.
    #[arg(long, default_value_t = 4)]
    pub endpoints: usize,
    /// Concurrent client workers.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u32,
    /// Seconds per datapath measurement.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Only the control plane: cold programming (with the agent's health
    /// endpoint latency and memory), endpoint updates; no datapath rounds.
    /// Writes bench-control.md.
    #[arg(long)]
    pub control_only: bool,
    /// Control plane: leave out kube-proxy's rule loads (minutes at 10,000
    /// Services); only our agent's figures.
    #[arg(long)]
    pub ours_only: bool,
    /// Measure this lb-agent binary instead of the workspace's build.
    #[arg(long, value_name = "PATH")]
    pub agent_bin: Option<PathBuf>,
    /// Control plane: dress the Services and EndpointSlices as a real
    /// cluster serves them (managedFields, annotations, owner references,
    /// endpoint targetRefs), instead of the bare fields.
    #[arg(long)]
    pub realistic_objects: bool,
    /// Only the agent at scale: cold programming, one-endpoint change
    /// latency and RSS at 1,000 to 100,000 Services x 10 endpoints, from a
    /// file and from the stand-in apiserver. Writes bench-scale.md and .svg.
    #[arg(long)]
    pub scale: bool,
    /// Only the NodePort section: traffic from outside the node through
    /// ours (tc), kube-proxy's iptables and nftables layouts, and direct,
    /// packets per second, and the tc programs' per-packet cost. Writes
    /// bench-nodeport.md and bench-nodeport-pps.svg.
    #[arg(long, conflicts_with_all = ["control_only", "scale"])]
    pub nodeport_only: bool,
    /// Only packets per second to a NodePort: the XDP generator's frames
    /// through ours (tc), kube-proxy's iptables and nftables layouts, and
    /// its ceiling. Writes bench-pps-only.md and .svg.
    #[arg(long, conflicts_with_all = ["control_only", "scale", "nodeport_only"])]
    pub pps_only: bool,
    /// Leave out the NodePort section: the datapath section (N = 1 to
    /// 100,000 in a full run) and the control plane.
    #[arg(long, conflicts_with_all = ["control_only", "scale", "nodeport_only", "pps_only"])]
    pub no_nodeport: bool,
    /// Only the connect loop: socket + connect + close over 4,096 Service
    /// addresses at N = 10,000 (1,000 with --quick), UDP and TCP, against
    /// the same loop without programs and to non-Service addresses.
    /// Writes bench-connect.md.
    #[arg(long, conflicts_with_all = ["control_only", "scale", "nodeport_only", "pps_only"])]
    pub connect_only: bool,
    /// The connect loop's Service addresses of each protocol (a few show
    /// the programs with their maps in the CPU's caches).
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub connect_addrs: usize,
    /// With --scale: the largest N measured.
    #[arg(long, value_name = "N", requires = "scale")]
    pub scale_max: Option<usize>,
}

impl BenchArgs {
    /// The smoke run `cargo xtask test` ends with.
    pub(crate) fn quick() -> Self {
        Self {
            quick: true,
            endpoints: 4,
            concurrency: 4,
            seconds: None,
            control_only: false,
            ours_only: false,
            agent_bin: None,
            realistic_objects: false,
            scale: false,
            nodeport_only: false,
            pps_only: false,
            no_nodeport: false,
            connect_only: false,
            connect_addrs: 4096,
            scale_max: None,
        }
    }
}
