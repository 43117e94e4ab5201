//! Command-line interface. Flags mirror kube-proxy's where the meaning is the
//! same (README, "Running the agent"); a flag given on the command line overrides `--config`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::{
    datapath::pins::DEFAULT_BPFFS_DIR,
    model::{
        forwarding::{DsrDispatch, LbMode},
        maglev::{Algorithm, HashSeed, TableSize},
    },
};

/// `lb-agent --version`: the version, the commit it was built from, and the
/// map layout it pins (the `_V<layout>` suffix of the pin names).
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{} (commit {}, map layout {})",
            env!("CARGO_PKG_VERSION"),
            env!("LB_AGENT_COMMIT"),
            lb_common::LAYOUT_VERSION
        )
    });
    &VERSION
}

#[derive(Parser, Debug)]
#[command(
    name = "lb-agent",
    version = version(),
    about = "eBPF kube-proxy replacement: node agent"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once at start; boxing would only complicate the callers"
)]
pub enum Command {
    /// Load and attach the programs, then keep the maps in sync with the
    /// apiserver (or with --from-file) until SIGTERM.
    Run(RunArgs),
    /// Detach the programs and remove every pinned map and link.
    Cleanup(CleanupArgs),
    /// List the programmed frontends and their backends, like `ipvsadm -ln`.
    Dump(DumpArgs),
    /// Mount bpffs on DIR unless it is on bpffs already (the DaemonSet's
    /// init container: the image has no shell or mount(8)).
    MountBpffs(MountBpffsArgs),
    /// Wait for SIGTERM or SIGINT, then exit 0: the long-running container
    /// of a pod whose work was done by its init containers
    /// (manifests/cleanup).
    Pause,
}

#[derive(Args, Debug)]
pub struct MountBpffsArgs {
    /// Where bpffs must be mounted (created if missing).
    #[arg(value_name = "DIR", default_value = "/sys/fs/bpf")]
    pub dir: PathBuf,
}

/// Flags of `run`. Every value is optional here so that `--config` can fill
/// what the command line leaves out; defaults apply last.
#[derive(Args, Debug, Default)]
pub struct RunArgs {
    /// A KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1).
    /// Fields that apply are used; the others are reported with a warning.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Path to a kubeconfig [default: in-cluster config, then ~/.kube/config].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The apiserver address; overrides the kubeconfig's server.
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,
    /// This node's name [default: $NODE_NAME, then the host name]. Used to
    /// watch this Node (its deletion or draining fails /healthz).
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,
    /// Endpoints in these CIDRs belong to another CNI and are never programmed.
    /// Comma-separated and repeatable; a trailing comma is accepted.
    #[arg(long, value_name = "CIDR,...")]
    pub exclude_cluster_cidr: Vec<String>,
    /// The node addresses that serve NodePorts: `primary` (the Node's
    /// primary address of each family, the default), `all`, or CIDRs
    /// selecting among the addresses of this node's interfaces. A family
    /// named by nothing serves on all of its addresses; loopback never.
    /// Comma-separated and repeatable.
    #[arg(long, value_name = "primary|all|CIDR,...")]
    pub nodeport_addresses: Vec<String>,
    /// The devices traffic from outside the node arrives on and leaves by,
    /// where the tc programs attach (Cilium's flag): comma-separated and
    /// repeatable. Default: the devices that hold the Node's primary
    /// addresses (its first InternalIP of each family, else ExternalIP).
    /// Add the device that leads to other nodes' pods if it is another one
    /// (a tunnel device, say): packets SNATed for them leave through it.
    #[arg(long, value_name = "DEV,...", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Attach the tc programs with TCX links where the kernel has them
    /// (6.6+), as Cilium's flag. `false`, or an older kernel: cls_bpf
    /// filters on a clsact qdisc.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_tcx: bool,
    /// The XDP fast path for traffic from outside the node (Cilium's
    /// flag): `native` attaches it in driver mode on every device of
    /// `--devices` (a device that cannot have it stays on tc, is logged and
    /// counted unattached), `best-effort` where the driver can, `disabled`
    /// (the default) tc only. The tc programs stay attached either way.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Default::default())]
    pub bpf_lb_acceleration: crate::datapath::xdp::Acceleration,
    /// Accepted for kube-proxy compatibility. The socket LB needs no
    /// masquerade, so the pod CIDR changes nothing.
    #[arg(long, value_name = "CIDR")]
    pub cluster_cidr: Option<String>,
    /// Serves /metrics and /proxyMode [default: 127.0.0.1:10249].
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_bind_address: Option<String>,
    /// Serves /healthz and /livez [default: 0.0.0.0:10256].
    #[arg(long, value_name = "IP:PORT")]
    pub healthz_bind_address: Option<String>,
    /// Read Services and EndpointSlices from a file or directory of manifests
    /// (YAML or JSON) instead of the apiserver. Edits are reconciled.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["kubeconfig", "master"])]
    pub from_file: Option<PathBuf>,
    /// The cgroup v2 directory to attach to [default: the cgroup2 mount root].
    #[arg(long, value_name = "DIR")]
    pub cgroup_path: Option<PathBuf>,
    /// The bpffs directory holding the pinned maps and links.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS_DIR)]
    pub bpffs_dir: PathBuf,
    /// How often the maps are read back and any drift from the desired
    /// state (an entry changed or deleted by hand, say) is repaired, like
    /// Cilium's periodic prune. `0s` disables it.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = parse_interval)]
    pub map_prune_interval: std::time::Duration,
    #[command(flatten)]
    pub maps: MapSizeArgs,
    #[command(flatten)]
    pub conntrack: ConntrackArgs,
    #[command(flatten)]
    pub algorithm: AlgorithmArgs,
    #[command(flatten)]
    pub forwarding: ForwardingArgs,
    /// A Service's `loadBalancerSourceRanges` also guard its NodePorts and
    /// external IPs against traffic from outside the node (Cilium's flag):
    /// a new flow from a source outside them is dropped. Without it, they
    /// guard its load-balancer IPs only, as kube-proxy's firewall.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub bpf_lb_source_range_all_types: bool,
    /// Socket load balancing for the node's own network namespace only
    /// (Cilium's flag): every pod's Service traffic is translated per
    /// packet at its host-side interface instead, as for a pod labelled
    /// or annotated `lb-agent.io/socket-lb: disabled`. The agent then
    /// watches every Pod of its node.
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub bpf_lb_sock_hostns_only: bool,
}

/// How flows from outside the node reach backends on other nodes
/// (Cilium's flags).
#[derive(Args, Debug, Default, Clone, Copy)]
pub struct ForwardingArgs {
    /// `snat`: the node SNATs such flows to its own address and the reply
    /// comes back through it; `dsr`: direct server return, the backend's
    /// node answers the client itself with the service address; `hybrid`:
    /// DSR for TCP, SNAT for UDP. A Service's
    /// `lb-agent.io/forwarding-mode` annotation (`snat` or `dsr`, or
    /// Cilium's `service.cilium.io/forwarding-mode`) overrides it.
    #[arg(long, value_name = "snat|dsr|hybrid", default_value = "snat")]
    pub bpf_lb_mode: LbMode,
    /// How DSR carries the service address to the backend's node: `opt`,
    /// an IPv4 option or IPv6 destination-options header (the only one for
    /// now).
    #[arg(long, value_name = "opt", default_value = "opt")]
    pub bpf_lb_dsr_dispatch: DsrDispatch,
}

/// How flows from outside the node pick a backend (Cilium's flags).
#[derive(Args, Debug, Default, Clone, Copy)]
pub struct AlgorithmArgs {
    /// `random`, or `maglev`: each external frontend (node port, external
    /// IP, load-balancer IP) gets a Maglev table, and a new flow takes the
    /// backend its hash (source address and port, destination port,
    /// protocol) names there, the same on every node. A Service's
    /// `lb-agent.io/lb-algorithm` annotation (or Cilium's
    /// `service.cilium.io/lb-algorithm`) overrides it.
    #[arg(long, value_name = "random|maglev", default_value = "random")]
    pub bpf_lb_algorithm: Algorithm,
    /// Entries of each Maglev table: a prime of 251, 509, 1021, 2039,
    /// 4093, 8191, 16381, 32749, 65521, 131071, above 100 times the
    /// largest number of backends for even shares.
    #[arg(long, value_name = "M", default_value = "16381")]
    pub bpf_lb_maglev_table_size: TableSize,
    /// The Maglev seed, 12 bytes in base64; the same on every node, so
    /// that all build the same tables and hash flows alike.
    #[arg(long, value_name = "BASE64", default_value = HashSeed::DEFAULT_TEXT)]
    pub bpf_lb_maglev_hash_seed: HashSeed,
}

/// A duration such as `30m`, `1h30m`, `10s` or ISO 8601 `PT30M`.
fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = text.parse().map_err(|e| format!("{e}"))?;
    std::time::Duration::try_from(d).map_err(|_| "must not be negative".to_owned())
}

/// A timeout of whole seconds, at least one, as [`parse_interval`] reads it.
fn parse_timeout(text: &str) -> Result<u32, String> {
    let d = parse_interval(text)?;
    match u32::try_from(d.as_secs()) {
        Ok(secs) if secs >= 1 && d.subsec_nanos() == 0 => Ok(secs),
        _ => Err("must be a whole number of seconds from 1s to 136 years".to_owned()),
    }
}

/// `MIN-MAX`, an inclusive port range with 1 <= MIN <= MAX.
fn parse_port_range(text: &str) -> Result<(u16, u16), String> {
    let (min, max) = text
        .split_once('-')
        .ok_or_else(|| "expected MIN-MAX".to_owned())?;
    let port = |p: &str| p.trim().parse::<u16>().map_err(|e| format!("{p:?}: {e}"));
    let (min, max) = (port(min)?, port(max)?);
    if min == 0 || min > max {
        return Err("expected 1 <= MIN <= MAX".to_owned());
    }
    Ok((min, max))
}

/// How the tc programs track flows from outside the node: Cilium's
/// conntrack timeout flags, and the SNAT ports.
#[derive(Args, Debug, Default, Clone, Copy)]
pub struct ConntrackArgs {
    /// How long an established TCP flow lives without traffic
    /// [default: 6h].
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub bpf_ct_timeout_regular_tcp: Option<u32>,
    /// How long a TCP flow lives before its handshake completes
    /// [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub bpf_ct_timeout_regular_tcp_syn: Option<u32>,
    /// How long a closed TCP flow (both FINs, or a RST) is kept, with its
    /// SNAT port; at least 60s (TIME_WAIT) when the backend closed first
    /// [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub bpf_ct_timeout_regular_tcp_fin: Option<u32>,
    /// How long a UDP flow lives without traffic either way [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub bpf_ct_timeout_regular_any: Option<u32>,
    /// The ports flows to backends on other nodes are SNATed to. Must not
    /// overlap the node's `net.ipv4.ip_local_port_range`, whose ports its
    /// own connections take [default: 1024-29999].
    #[arg(long, value_name = "MIN-MAX", value_parser = parse_port_range)]
    pub snat_port_range: Option<(u16, u16)>,
}

/// Map capacities, set when the maps are created (Cilium's flags where the
/// meaning is the same). Pinned maps of another capacity are replaced by a
/// live migration at start.
#[derive(Args, Debug, Default, Clone, Copy)]
pub struct MapSizeArgs {
    /// Capacity of each load-balancing map (frontends, backend slots,
    /// backends) not set by its own flag below.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_lb_map_max: Option<u32>,
    /// Frontends (ClusterIP:port/protocol) [default: 65536].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..(u32::MAX as i64)))]
    pub bpf_lb_service_map_max: Option<u32>,
    /// Backend slots: every frontend's backends, plus the previous
    /// revision of each frontend changing at the moment [default: 262144].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_lb_slot_map_max: Option<u32>,
    /// Distinct backend addresses [default: 131072].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_lb_service_backend_map_max: Option<u32>,
    /// Socket reverse-NAT entries (LRU) [default: 262144].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_sock_rev_map_max: Option<u32>,
    /// Session-affinity clients (LRU; a full map forgets the oldest)
    /// [default: 65536].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_lb_affinity_map_max: Option<u32>,
    /// Conntrack entries of flows from outside the node, two per flow (LRU;
    /// one map for TCP and UDP where Cilium has two) [default: 262144].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_ct_global_max: Option<u32>,
    /// SNAT entries of those flows (LRU) [default: 131072].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_nat_global_max: Option<u32>,
    /// Datagrams whose later fragments are awaited (LRU) [default: 8192].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_fragments_map_max: Option<u32>,
    /// Maglev table chunks of 256 entries (1 KiB, allocated when written):
    /// a table of M entries takes M/256 of them, twice while it changes
    /// [default: 131072].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub bpf_lb_maglev_map_max: Option<u32>,
}

#[derive(Args, Debug)]
pub struct CleanupArgs {
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS_DIR)]
    pub bpffs_dir: PathBuf,
    /// The cgroup `run` attached to. Accepted as `run` accepts it; cleanup
    /// needs no cgroup, since removing the pinned links under --bpffs-dir
    /// detaches the programs from whichever cgroup holds them.
    #[arg(long, value_name = "DIR")]
    pub cgroup_path: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    #[arg(long, value_name = "DIR", default_value = DEFAULT_BPFFS_DIR)]
    pub bpffs_dir: PathBuf,
    /// Print the datapath counters (translations, refusals by reason)
    /// instead of the frontends.
    #[arg(long)]
    pub stats: bool,
    /// Print the tc programs' conntrack and SNAT entries instead of the
    /// frontends.
    #[arg(long, conflicts_with = "stats")]
    pub conntrack: bool,
    /// Print the DSR tables instead of the frontends: which node each
    /// address is on (every Node's addresses and pod CIDRs, and the DSR
    /// frontends' endpoints, by node number) and the endpoints on this node
    /// of DSR frontends.
    #[arg(long, conflicts_with_all = ["stats", "conntrack"])]
    pub dsr: bool,
}
