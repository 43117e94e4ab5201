//! The effective settings of `run`: command-line flags over a
//! KubeProxyConfiguration file over defaults.

mod kube_proxy;

use std::{net::SocketAddr, path::PathBuf};

pub use kube_proxy::{FileConfig, FileError};

use lb_common::{DEFAULT_NAT_PORT_MAX, DEFAULT_NAT_PORT_MIN, Timeouts};

use crate::{
    cli::{ConntrackArgs, MapSizeArgs, RunArgs},
    datapath::layout::Capacities,
    model::{
        ExcludedCidrs, NodePortAddresses, NodePortAddressesError, ParseCidrError,
        forwarding::LbMode,
        maglev::{Algorithm, MaglevParams},
    },
    source::apiserver::{ApiserverError, Inputs},
};

pub use crate::source::Source;

pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "127.0.0.1:10249";
pub const DEFAULT_HEALTHZ_BIND_ADDRESS: &str = "0.0.0.0:10256";

/// How the tc programs track flows from outside the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conntrack {
    pub timeouts: Timeouts,
    /// The SNAT port range, inclusive.
    pub snat_ports: (u16, u16),
}

/// Validated settings for `run`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub source: Source,
    pub node_name: String,
    pub excluded: ExcludedCidrs,
    pub node_port_addresses: NodePortAddresses,
    /// `--devices`; empty: the devices holding the NodePort addresses.
    pub devices: Vec<String>,
    /// `--enable-tcx`.
    pub enable_tcx: bool,
    /// `--bpf-lb-acceleration`.
    pub acceleration: crate::datapath::xdp::Acceleration,
    /// `None`: the cgroup2 mount root, found at start.
    pub cgroup: Option<PathBuf>,
    pub bpffs_dir: PathBuf,
    pub capacities: Capacities,
    pub conntrack: Conntrack,
    /// `--bpf-lb-algorithm`.
    pub lb_algorithm: Algorithm,
    /// `--bpf-lb-mode`.
    pub lb_mode: LbMode,
    /// `--bpf-lb-source-range-all-types`.
    pub source_range_all_types: bool,
    /// `--bpf-lb-sock-hostns-only`.
    pub sock_hostns_only: bool,
    /// `--bpf-lb-maglev-table-size` and `--bpf-lb-maglev-hash-seed`.
    pub maglev: MaglevParams,
    pub metrics_addr: SocketAddr,
    pub healthz_addr: SocketAddr,
    /// `None`: never prune.
    pub prune_interval: Option<std::time::Duration>,
    /// Settings from the file that this agent does not apply, for a warning.
    pub ignored: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(transparent)]
    Cidr(#[from] ParseCidrError),
    #[error(transparent)]
    NodePortAddresses(#[from] NodePortAddressesError),
    #[error("invalid {what} {value:?}: expected IP:PORT")]
    Addr { what: &'static str, value: String },
    #[error("no node name: pass --hostname-override or set NODE_NAME")]
    NoNodeName,
    #[error(transparent)]
    Apiserver(#[from] ApiserverError),
}

impl RunConfig {
    /// Merges `args` over the `--config` file (read from disk) over defaults.
    /// `env_node_name` is `$NODE_NAME`; `host_name` the last resort, as in kube-proxy.
    /// Refuses a pod without the apiserver's address
    /// ([`crate::source::apiserver`]).
    pub fn resolve(
        args: RunArgs,
        env_node_name: Option<String>,
        host_name: Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => FileConfig::read(path)?,
            None => FileConfig::default(),
        };
        let config = Self::merge(args, file, env_node_name, host_name)?;
        // Before any program is loaded: a pod without the apiserver's
        // address would otherwise attach them and then stop.
        if let Source::Kube { kubeconfig, master } = &config.source {
            Inputs::decide_here(kubeconfig.as_deref(), master.as_deref())?;
        }
        Ok(config)
    }

    /// [`Self::resolve`] with the file already read (the fuzz target
    /// `kube_proxy_config` feeds it what the parser made of any text).
    pub fn merge(
        args: RunArgs,
        file: FileConfig,
        env_node_name: Option<String>,
        host_name: Option<String>,
    ) -> Result<Self, ConfigError> {
        let source = match args.from_file {
            Some(path) => Source::File(path),
            None => Source::Kube {
                kubeconfig: args.kubeconfig.or(file.kubeconfig),
                master: args.master,
            },
        };
        let node_name = [
            args.hostname_override,
            file.hostname_override,
            env_node_name,
            host_name,
        ]
        .into_iter()
        .flatten()
        .map(|n| n.trim().to_lowercase())
        .find(|n| !n.is_empty())
        .ok_or(ConfigError::NoNodeName)?;
        // The flag replaces the file's list rather than adding to it.
        let excluded = if args.exclude_cluster_cidr.is_empty() {
            ExcludedCidrs::parse(file.exclude_cluster_cidrs.iter().map(String::as_str))?
        } else {
            ExcludedCidrs::parse(args.exclude_cluster_cidr.iter().map(String::as_str))?
        };
        let node_port_addresses = if args.nodeport_addresses.is_empty() {
            NodePortAddresses::parse(file.node_port_addresses.iter().map(String::as_str))?
        } else {
            NodePortAddresses::parse(args.nodeport_addresses.iter().map(String::as_str))?
        };
        let metrics_addr = addr(
            "metrics bind address",
            args.metrics_bind_address.or(file.metrics_bind_address),
            DEFAULT_METRICS_BIND_ADDRESS,
        )?;
        let healthz_addr = addr(
            "healthz bind address",
            args.healthz_bind_address.or(file.healthz_bind_address),
            DEFAULT_HEALTHZ_BIND_ADDRESS,
        )?;
        Ok(Self {
            source,
            node_name,
            excluded,
            node_port_addresses,
            devices: args.devices.into_iter().filter(|d| !d.is_empty()).collect(),
            enable_tcx: args.enable_tcx,
            acceleration: args.bpf_lb_acceleration,
            cgroup: args.cgroup_path,
            bpffs_dir: args.bpffs_dir,
            capacities: capacities(&args.maps),
            conntrack: conntrack(&args.conntrack),
            lb_algorithm: args.algorithm.bpf_lb_algorithm,
            lb_mode: args.forwarding.bpf_lb_mode,
            source_range_all_types: args.bpf_lb_source_range_all_types,
            sock_hostns_only: args.bpf_lb_sock_hostns_only,
            maglev: MaglevParams {
                size: args.algorithm.bpf_lb_maglev_table_size,
                seed: args.algorithm.bpf_lb_maglev_hash_seed,
            },
            metrics_addr,
            healthz_addr,
            prune_interval: Some(args.map_prune_interval).filter(|d| !d.is_zero()),
            ignored: file.ignored,
        })
    }
}

/// The capacity flags over the defaults: a map's own flag, else
/// `--bpf-lb-map-max` for the load-balancing maps, else the default.
fn capacities(args: &MapSizeArgs) -> Capacities {
    let default = Capacities::default();
    let lb = |own: Option<u32>, fallback: u32| own.or(args.bpf_lb_map_max).unwrap_or(fallback);
    Capacities {
        frontends: lb(args.bpf_lb_service_map_max, default.frontends),
        slots: lb(args.bpf_lb_slot_map_max, default.slots),
        backends: lb(args.bpf_lb_service_backend_map_max, default.backends),
        revnat: args.bpf_sock_rev_map_max.unwrap_or(default.revnat),
        affinity: args.bpf_lb_affinity_map_max.unwrap_or(default.affinity),
        ct: args.bpf_ct_global_max.unwrap_or(default.ct),
        nat: args.bpf_nat_global_max.unwrap_or(default.nat),
        frag: args.bpf_fragments_map_max.unwrap_or(default.frag),
        maglev: args.bpf_lb_maglev_map_max.unwrap_or(default.maglev),
    }
}

/// The conntrack flags over the defaults.
fn conntrack(args: &ConntrackArgs) -> Conntrack {
    let t = Timeouts::DEFAULT;
    Conntrack {
        timeouts: Timeouts {
            tcp: args.bpf_ct_timeout_regular_tcp.unwrap_or(t.tcp),
            tcp_syn: args.bpf_ct_timeout_regular_tcp_syn.unwrap_or(t.tcp_syn),
            tcp_fin: args.bpf_ct_timeout_regular_tcp_fin.unwrap_or(t.tcp_fin),
            any: args.bpf_ct_timeout_regular_any.unwrap_or(t.any),
        },
        snat_ports: args
            .snat_port_range
            .unwrap_or((DEFAULT_NAT_PORT_MIN, DEFAULT_NAT_PORT_MAX)),
    }
}

/// Parses `IP:PORT`. As in kube-proxy, an empty value means the default, a
/// bare IP takes the default port and `:PORT` means every address.
fn addr(
    what: &'static str,
    value: Option<String>,
    default: &str,
) -> Result<SocketAddr, ConfigError> {
    let default: SocketAddr = default.parse().expect("valid default address");
    let Some(text) = value.filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    let bad = || ConfigError::Addr {
        what,
        value: text.clone(),
    };
    if let Ok(sa) = text.parse::<SocketAddr>() {
        return Ok(sa);
    }
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, default.port()));
    }
    match text.strip_prefix(':').map(str::parse::<u16>) {
        Some(Ok(port)) => Ok(SocketAddr::new(
            std::net::Ipv4Addr::UNSPECIFIED.into(),
            port,
        )),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests;
