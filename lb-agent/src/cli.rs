//! Command-line interface. Flags mirror kube-proxy where the meaning is the same.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use lb_agent::{
    bpf::{cgroup, pins::DEFAULT_BPFFS_DIR},
    model::ExcludedCidrs,
};

#[derive(Parser)]
#[command(
    name = "lb-agent",
    version,
    about = "eBPF kube-proxy replacement: node agent"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Load and attach the programs, then keep the maps in sync until SIGTERM.
    Run(RunArgs),
    /// Detach the programs and remove every pinned map and link.
    Cleanup(CleanupArgs),
    /// List the programmed frontends and their backends, like `ipvsadm -ln`.
    Dump(DumpArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// A file or directory of Service and EndpointSlice manifests (YAML or JSON).
    /// It is watched; edits are reconciled.
    #[arg(long, value_name = "PATH")]
    pub from_file: PathBuf,
    /// Endpoints in these CIDRs belong to another CNI and are never programmed.
    /// Comma-separated and repeatable; a trailing comma is accepted.
    #[arg(long, value_name = "CIDR,...")]
    pub exclude_cluster_cidr: Vec<String>,
    /// The cgroup v2 directory to attach to [default: the cgroup2 mount root].
    #[arg(long, value_name = "DIR")]
    pub cgroup_path: Option<PathBuf>,
    #[command(flatten)]
    pub pins: PinArgs,
}

#[derive(Args)]
pub struct PinArgs {
    /// The bpffs directory holding the pinned maps and links.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS_DIR)]
    pub bpffs_dir: PathBuf,
}

#[derive(Args)]
pub struct CleanupArgs {
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS_DIR)]
    pub bpffs_dir: PathBuf,
    /// Accepted for symmetry with `run`; the links pinned under --bpffs-dir
    /// identify the attachments, whatever cgroup they are on.
    #[arg(long, value_name = "DIR")]
    pub cgroup_path: Option<PathBuf>,
}

#[derive(Args)]
pub struct DumpArgs {
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS_DIR)]
    pub bpffs_dir: PathBuf,
}

/// Validated settings for `run`.
pub struct RunConfig {
    pub from_file: PathBuf,
    pub excluded: ExcludedCidrs,
    pub cgroup: PathBuf,
    pub bpffs_dir: PathBuf,
}

impl RunArgs {
    pub fn into_config(self) -> anyhow::Result<RunConfig> {
        let excluded = ExcludedCidrs::parse(self.exclude_cluster_cidr.iter().map(String::as_str))?;
        let cgroup = match self.cgroup_path {
            Some(p) => p,
            None => cgroup::cgroup2_mount()
                .context("finding the cgroup2 mount (or pass --cgroup-path)")?,
        };
        Ok(RunConfig {
            from_file: self.from_file,
            excluded,
            cgroup,
            bpffs_dir: self.pins.bpffs_dir,
        })
    }
}
