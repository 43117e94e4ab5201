//! `cargo xtask bench`: our socket LB against kube-proxy's iptables and
//! nftables layouts and against the direct path, on the same machine, in one
//! run, with the same Services and backends.

mod control;
mod datapath;
mod health;
mod nodeport;
mod realistic;
mod report;
mod rounds;
mod scale;
mod target;
mod tc_cost;

use std::{path::PathBuf, time::Duration};

use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
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
    /// and the tc programs' per-packet cost. Writes bench-nodeport.md.
    #[arg(long, conflicts_with_all = ["control_only", "scale"])]
    pub nodeport_only: bool,
    /// With --scale: the largest N measured.
    #[arg(long, value_name = "N", requires = "scale")]
    pub scale_max: Option<usize>,
}

impl BenchArgs {
    /// The smoke run `cargo xtask test` ends with.
    pub fn quick() -> Self {
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
            scale_max: None,
        }
    }
}

/// What one run measures, derived from the flags.
pub struct Plan {
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
    pub endpoints: usize,
    pub concurrency: u32,
    pub seconds: f64,
    /// Datapath rounds per mode, alternating in ABBA order.
    pub rounds: usize,
    /// Control plane: Services and endpoints each.
    pub cold: (usize, usize),
    /// Control plane: one-endpoint changes for ours, and kube-proxy partial
    /// syncs for the others.
    pub updates: usize,
    pub partial_syncs: usize,
    pub out_dir: PathBuf,
}

impl Plan {
    fn new(a: &BenchArgs) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask sits in the workspace")
            .to_path_buf();
        let (scales, seconds, rounds, cold, updates, partial_syncs) = if a.quick {
            (vec![1, 100], 1.0, 2, (500, 10), 20, 5)
        } else {
            (vec![1, 1000, 10_000], 3.0, 4, (10_000, 10), 200, 10)
        };
        Self {
            quick: a.quick,
            control_only: a.control_only,
            ours_only: a.ours_only,
            realistic: a.realistic_objects,
            agent_bin: lb_tests::agent::agent_bin(),
            scales: if a.control_only { Vec::new() } else { scales },
            endpoints: a.endpoints,
            concurrency: a.concurrency,
            seconds: a.seconds.unwrap_or(seconds),
            rounds,
            cold,
            updates,
            partial_syncs,
            out_dir: root.join("target/bench"),
        }
    }
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    lb_tests::require_root();
    let plan = Plan::new(args);
    if args.scale {
        let max = args.scale_max.unwrap_or(usize::MAX);
        let scales: Vec<usize> = scale::SCALES.into_iter().filter(|&n| n <= max).collect();
        return scale::run(&plan.out_dir, &scales);
    }
    let cond = report::Conditions::now();
    let started = std::time::Instant::now();
    let node_ports = || -> anyhow::Result<_> {
        let mut rows = Vec::new();
        for &n in &plan.scales {
            eprintln!("== NodePort, N = {n}");
            rows.extend(nodeport::measure(&plan, n)?);
        }
        eprintln!("== SNAT ports: fresh-port flows to one remote endpoint");
        let capacity = nodeport::capacity(&plan)?;
        eprintln!("== tc programs on crafted packets");
        Ok(nodeport::render(
            &plan,
            &rows,
            &capacity,
            &tc_cost::run(&plan)?,
        ))
    };
    if args.nodeport_only {
        let (section, targets) = node_ports()?;
        return report::write_nodeport(&plan, &section, &targets, started.elapsed(), &cond);
    }
    let mut rows = Vec::new();
    for &n in &plan.scales {
        eprintln!("== datapath, N = {n}");
        rows.extend(datapath::measure(&plan, n)?);
    }
    let nodeport = if plan.control_only {
        None
    } else {
        Some(node_ports()?)
    };
    eprintln!("== control plane, {} x {}", plan.cold.0, plan.cold.1);
    let control = control::measure(&plan)?;
    let took = started.elapsed();
    report::write(&plan, &rows, nodeport.as_ref(), &control, took, &cond)?;
    Ok(())
}

/// Percentile (nearest rank) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
