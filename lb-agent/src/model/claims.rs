//! What one Service claims: for each of its ports at each of its cluster
//! IPs, the backends to balance over and how, following kube-proxy
//! (`pkg/proxy/endpointslicecache.go`, `topology.go`, `nftables/proxier.go`):
//!
//! * slices join their Service through the `kubernetes.io/service-name`
//!   label in the same namespace; a cluster IP takes endpoints from the
//!   slices of its own address family; Service ports match slice ports by
//!   name and protocol, and the slice gives the target port;
//! * an endpoint is its first address only; the same `IP:port` in two slices
//!   counts once, the non-terminating copy winning, then the local one;
//! * the endpoints used are [`categorize`]d as kube-proxy's
//!   `CategorizeEndpoints` does, with topology hints;
//! * each cluster IP also claims a wildcard frontend (every other port and
//!   protocol) that refuses, as kube-proxy's catch-all reject does, unless
//!   one of the IP's ports passes through to another CNI: such an address
//!   is shared with that CNI, so its other ports pass through too;
//! * in each family the Service has a cluster IP of, its external IPs, LB
//!   VIPs and (on the node's NodePort addresses) node ports are frontends
//!   too, with the *cluster* endpoint set whatever the external traffic
//!   policy: at the socket hooks every client is a pod or process on this
//!   node, which kube-proxy short-circuits to the cluster endpoints. An LB
//!   VIP guarded by source ranges of its family is left to the network
//!   (its firewall is not built at the socket hooks);
//! * each external frontend is claimed a second time in the external scope,
//!   for traffic from outside the node (the tc programs), with
//!   `externalTrafficPolicy` applied: `Local` takes this node's endpoints
//!   only (with the terminating fallback) and drops without one; there an
//!   LB VIP guarded by source ranges is claimed too, with its ranges;
//! * there, with `externalTrafficPolicy: Cluster` and Maglev, the topology
//!   hints are not applied (unlike kube-proxy): the Maglev table is built
//!   from every ready endpoint (or, if none, every serving and terminating
//!   one), the same on every node whatever its zone, so that a flow the
//!   router moves to another node keeps its endpoint.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnet::IpNet;

use super::{
    Backend, ExcludedCidrs, Frontend, IpFamily, NodeContext, Proto, Scope,
    maglev::Algorithm,
    no_local::NoLocalEndpoints,
    node_nets::EndpointNode,
    service::{Affinity, ServicePort, ServiceSpec, TrafficPolicy},
    slice::{SliceEndpoint, SliceSpec},
    weight::DEFAULT_WEIGHT,
};

/// How a programmed frontend treats a connect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The backends to balance over, sorted; empty means refuse.
    pub backends: Vec<Backend>,
    /// `sessionAffinity: ClientIP` timeout in seconds.
    pub affinity: Option<u32>,
    /// `internalTrafficPolicy: Local`: `backends` are this node's only.
    pub local: bool,
    /// `backends` is empty because none of the endpoints is on this node:
    /// refuse with EHOSTUNREACH rather than ECONNREFUSED.
    pub no_local_endpoints: bool,
    /// Which address of its Service the frontend is (for listings).
    pub kind: FrontendKind,
    /// An external frontend of a Service with `externalTrafficPolicy:
    /// Local` (for listings: from this node it serves the cluster set).
    pub external_local: bool,
    /// A load-balancer IP in the external scope guarded by
    /// `loadBalancerSourceRanges`: the ranges of its family, the only
    /// sources admitted. Empty: open.
    pub source_ranges: Vec<IpNet>,
    /// New flows from outside the node pick their backend from a Maglev
    /// table (the external scope only: the Service's algorithm, or
    /// `--bpf-lb-algorithm`).
    pub maglev: bool,
    /// New flows from outside the node to a backend on another node go by
    /// direct server return rather than SNAT (the external scope of an
    /// `externalTrafficPolicy: Cluster` Service only: the Service's
    /// forwarding mode, or `--bpf-lb-mode`).
    pub dsr: bool,
    /// With `dsr`: the frontend's serving endpoints on this node, sorted.
    /// Another node may send them this frontend's flows with the frontend
    /// in the packets, which is trusted only for them (`LB4_DSR_EPS`).
    pub dsr_endpoints: Vec<Backend>,
    /// With `dsr`: every endpoint that names its node, with its topology
    /// (which names it), by address: which node a backend is on
    /// (`LB4_NODE_NETS`), so that a client on the same node is SNATed.
    pub dsr_nodes: Vec<EndpointNode>,
    /// The weight of each of `backends` (parallel to it, each nonzero),
    /// from their EndpointSlices' weight annotation; empty when all are
    /// equal. Endpoints of weight 0 are not in `backends`: no new flow
    /// picks them, and their flows go on (they stay serving).
    pub weights: Vec<u16>,
}

/// Which address of its Service a frontend is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FrontendKind {
    #[default]
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl Target {
    /// A frontend with these backends and nothing else.
    pub fn plain(backends: Vec<Backend>) -> Self {
        Self {
            backends,
            ..Self::default()
        }
    }
}

/// What a Service asks for at one frontend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Program the frontend. `serving` lists every endpoint IP that is
    /// serving, for a UDP port (kube-proxy's conntrack cleanup keeps flows
    /// to these and flushes the rest) and for every frontend seen from
    /// outside the node (the tc programs' flows likewise, TCP too: a
    /// terminating endpoint keeps its connections); empty otherwise.
    Program {
        target: Target,
        serving: Vec<IpAddr>,
    },
    /// Every endpoint is excluded: leave the VIP to the CNI that owns it.
    PassThrough,
}

impl Claim {
    pub fn program(target: Target) -> Self {
        Claim::Program {
            target,
            serving: Vec::new(),
        }
    }

    /// This claim at an address of `kind`.
    fn of_kind(&self, kind: FrontendKind) -> Self {
        self.at(kind, &[])
    }

    /// This claim at an address of `kind` guarded by `ranges`.
    fn at(&self, kind: FrontendKind, ranges: &[IpNet]) -> Self {
        let mut claim = self.guarded(ranges);
        if let Claim::Program { target, .. } = &mut claim {
            target.kind = kind;
        }
        claim
    }

    /// This claim guarded by `ranges`.
    fn guarded(&self, ranges: &[IpNet]) -> Self {
        let mut claim = self.clone();
        if let Claim::Program { target, .. } = &mut claim {
            target.source_ranges = ranges.to_vec();
        }
        claim
    }
}

/// Each frontend of `spec` with its claim. SCTP ports claim nothing (the
/// socket hooks cannot balance them; the Service reports the feature).
/// Endpoints dropped as excluded are added to `dropped`; ports without a
/// local endpoint under a `Local` policy are counted in `no_local`.
pub(super) fn service_claims(
    spec: &ServiceSpec,
    slices: &[&SliceSpec],
    node: &NodeContext,
    excluded: &ExcludedCidrs,
    dropped: &mut BTreeSet<Backend>,
    no_local: &mut NoLocalEndpoints,
) -> Vec<(Frontend, Claim)> {
    let mut claims = Vec::with_capacity((spec.ports.len() + 1) * spec.cluster_ips.len());
    for &vip in &spec.cluster_ips {
        let family = IpFamily::of(vip);
        let external_ips = external_ips(spec, family);
        // From outside, guarded LB VIPs too: the tc programs check ranges.
        let outside_ips: BTreeSet<IpAddr> = spec
            .external_ips
            .iter()
            .chain(&spec.lb_vips)
            .copied()
            .filter(|ip| IpFamily::of(*ip) == family)
            .collect();
        let node_ips: Vec<IpAddr> = node
            .node_port_ips
            .iter()
            .copied()
            .filter(|ip| IpFamily::of(*ip) == family)
            .collect();
        let mut passes = false;
        for port in spec.ports.iter().filter(|p| p.proto != Proto::Sctp) {
            let candidates = candidates(port, family, slices, node, excluded, dropped);
            let (internal, external, outside) = match candidates {
                None => {
                    passes = true;
                    (Claim::PassThrough, Claim::PassThrough, Claim::PassThrough)
                }
                Some(c) => {
                    // Traffic from outside keeps per-flow state of every
                    // protocol (the tc programs' conntrack); sockets only
                    // UDP's.
                    let serving = serving_ips(&c);
                    let socket_serving = if port.proto == Proto::Udp {
                        serving.clone()
                    } else {
                        Vec::new()
                    };
                    let [internal, external, outside] = targets(spec, port.proto, &c, node);
                    no_local.count(
                        spec,
                        internal.no_local_endpoints,
                        outside.no_local_endpoints,
                    );
                    let claim = |target, serving| Claim::Program { target, serving };
                    (
                        claim(internal, socket_serving.clone()),
                        claim(external, socket_serving),
                        claim(outside, serving),
                    )
                }
            };
            let frontend = |vip, number| Frontend {
                vip,
                port: number,
                proto: port.proto,
                scope: Scope::Internal,
            };
            let kind = |ip| {
                if spec.lb_vips.contains(&ip) {
                    FrontendKind::LoadBalancer
                } else {
                    FrontendKind::ExternalIp
                }
            };
            for &ip in &external_ips {
                claims.push((frontend(ip, port.port), external.of_kind(kind(ip))));
            }
            for &ip in &outside_ips {
                let ranges = guarding(spec, ip, node);
                let at = frontend(ip, port.port).external();
                claims.push((at, outside.at(kind(ip), &ranges)));
            }
            if let Some(node_port) = port.node_port {
                for &ip in &node_ips {
                    let at = frontend(ip, node_port);
                    let ranges = guarding(spec, ip, node);
                    claims.push((at, external.of_kind(FrontendKind::NodePort)));
                    claims.push((at.external(), outside.at(FrontendKind::NodePort, &ranges)));
                }
            }
            // With --bpf-lb-source-range-all-types, the cluster IP is
            // guarded from pods and the node too.
            let ranges = guarding(spec, vip, node);
            claims.push((frontend(vip, port.port), internal.guarded(&ranges)));
        }
        if !passes {
            claims.push((Frontend::wildcard(vip), Claim::program(Target::default())));
        }
    }
    claims
}

/// The source ranges of `spec` that guard `ip` (of its family): from
/// outside, kube-proxy's firewall guards LB VIPs only; with
/// `--bpf-lb-source-range-all-types` (Cilium's), its node ports and
/// external IPs too, and its cluster IP from pods and the node.
fn guarding(spec: &ServiceSpec, ip: IpAddr, node: &NodeContext) -> Vec<IpNet> {
    if !spec.lb_vips.contains(&ip) && !node.source_range_all_types {
        return Vec::new();
    }
    spec.source_ranges
        .iter()
        .filter(|r| IpFamily::of(r.addr()) == IpFamily::of(ip))
        .copied()
        .collect()
}

/// The external IPs and unguarded LB VIPs of `spec` in `family`, each once.
fn external_ips(spec: &ServiceSpec, family: IpFamily) -> BTreeSet<IpAddr> {
    let vips = spec
        .lb_vips
        .iter()
        .filter(|vip| spec.source_ranges_of(**vip).is_none());
    spec.external_ips
        .iter()
        .chain(vips)
        .copied()
        .filter(|ip| IpFamily::of(*ip) == family)
        .collect()
}

/// One endpoint of a Service port, after deduplication: kube-proxy's
/// `Endpoint`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate<'a> {
    pub backend: Backend,
    pub endpoint: &'a SliceEndpoint,
    pub local: bool,
    /// Its slice's weight.
    pub weight: u16,
}

impl Candidate<'_> {
    fn ready(&self) -> bool {
        self.endpoint.is_ready()
    }

    fn serving_terminating(&self) -> bool {
        self.endpoint.is_serving() && self.endpoint.is_terminating()
    }
}

/// The endpoints of one Service port in one family, deduplicated, sorted by
/// address; `None` when there are some and every one is excluded (the
/// frontend belongs to another CNI and must pass through untouched).
fn candidates<'a>(
    port: &ServicePort,
    family: IpFamily,
    slices: &[&'a SliceSpec],
    node: &NodeContext,
    excluded: &ExcludedCidrs,
    dropped: &mut BTreeSet<Backend>,
) -> Option<Vec<Candidate<'a>>> {
    let (mut seen, mut dropped_here) = (0usize, 0usize);
    let mut by_backend: BTreeMap<Backend, Candidate<'a>> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.family == family) {
        let Some(sp) = s
            .ports
            .iter()
            .find(|p| p.name == port.name && p.proto == port.proto)
        else {
            continue;
        };
        for ep in &s.endpoints {
            let Some(ip) = ep.ip else { continue };
            seen += 1;
            let backend = Backend { ip, port: sp.port };
            if excluded.contains(ip) {
                dropped_here += 1;
                dropped.insert(backend);
                continue;
            }
            let new = Candidate {
                backend,
                endpoint: ep,
                local: node.is_local(ep),
                weight: s.weight,
            };
            by_backend
                .entry(backend)
                .and_modify(|old| {
                    if preferred(&new, old) {
                        *old = new;
                    }
                })
                .or_insert(new);
        }
    }
    if seen > 0 && dropped_here == seen {
        return None;
    }
    Some(by_backend.into_values().collect())
}

/// Whether a duplicate `new` replaces `old`: a non-terminating copy beats a
/// terminating one; otherwise a local copy wins (kube-proxy's `addEndpoints`).
fn preferred(new: &Candidate<'_>, old: &Candidate<'_>) -> bool {
    match (new.endpoint.is_terminating(), old.endpoint.is_terminating()) {
        (false, true) => true,
        (true, false) => false,
        _ => new.local,
    }
}

/// The endpoint sets of one Service port: kube-proxy's `CategorizeEndpoints`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Categories {
    /// Ready endpoints passing the topology filter; if none, every
    /// serving-and-terminating endpoint (topology ignored).
    pub cluster: Vec<Backend>,
    /// This node's ready endpoints; if none, its serving-and-terminating ones.
    pub local: Vec<Backend>,
    /// Whether any endpoint anywhere is usable (ready, or serving and
    /// terminating).
    pub any: bool,
}

pub(super) fn categorize(candidates: &[Candidate<'_>], node: &NodeContext) -> Categories {
    let mode = topology_mode(candidates, node);
    let cluster = cluster_set(candidates, |c| mode.admits(c.endpoint, node));
    let local_ready = candidates.iter().any(|c| c.local && c.ready());
    let local = candidates
        .iter()
        .filter(|c| {
            c.local
                && if local_ready {
                    c.ready()
                } else {
                    c.serving_terminating()
                }
        })
        .map(|c| c.backend)
        .collect();
    Categories {
        any: !cluster.is_empty(),
        cluster,
        local,
    }
}

/// The ready endpoints that `admits` lets through; if none, every
/// serving-and-terminating endpoint (topology ignored, as kube-proxy).
fn cluster_set(
    candidates: &[Candidate<'_>],
    admits: impl Fn(&Candidate<'_>) -> bool,
) -> Vec<Backend> {
    let ready: Vec<Backend> = candidates
        .iter()
        .filter(|c| c.ready() && admits(c))
        .map(|c| c.backend)
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    candidates
        .iter()
        .filter(|c| c.serving_terminating())
        .map(|c| c.backend)
        .collect()
}

/// The cluster endpoints without topology: what every node computes alike
/// from the same EndpointSlices, whatever its zone or name. A Maglev table
/// is built from these, so that every node's table names the same
/// endpoint for a flow.
fn cluster_wide(candidates: &[Candidate<'_>]) -> Vec<Backend> {
    cluster_set(candidates, |_| true)
}

/// kube-proxy's topology modes (`topologyModeFromHints`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TopologyMode {
    /// No filtering.
    None,
    /// Endpoints hinted for this node.
    SameNode,
    /// Endpoints hinted for this node's zone.
    SameZone,
}

impl TopologyMode {
    fn admits(self, ep: &SliceEndpoint, node: &NodeContext) -> bool {
        let topo = ep.topology.as_deref();
        match self {
            TopologyMode::None => true,
            TopologyMode::SameNode => topo.is_some_and(|t| t.for_nodes.contains(&node.name)),
            TopologyMode::SameZone => node
                .zone
                .as_ref()
                .is_some_and(|z| topo.is_some_and(|t| t.for_zones.contains(z))),
        }
    }
}

/// Ready endpoints only: same-node when every one has a node hint and one
/// names this node; else same-zone when every one has a zone hint and one
/// names this node's zone (a node without a zone label matches none); else
/// no filtering. `trafficDistribution` and the topology-mode annotation act
/// through the hints the EndpointSlice controller writes.
fn topology_mode(candidates: &[Candidate<'_>], node: &NodeContext) -> TopologyMode {
    let ready = || candidates.iter().filter(|c| c.ready());
    if ready().next().is_none() {
        return TopologyMode::None;
    }
    let all_node_hints = ready().all(|c| {
        c.endpoint
            .topology
            .as_deref()
            .is_some_and(|t| !t.for_nodes.is_empty())
    });
    if all_node_hints && ready().any(|c| TopologyMode::SameNode.admits(c.endpoint, node)) {
        return TopologyMode::SameNode;
    }
    let all_zone_hints = ready().all(|c| {
        c.endpoint
            .topology
            .as_deref()
            .is_some_and(|t| !t.for_zones.is_empty())
    });
    if all_zone_hints && ready().any(|c| TopologyMode::SameZone.admits(c.endpoint, node)) {
        return TopologyMode::SameZone;
    }
    TopologyMode::None
}

/// What the frontends of a Service port get: its cluster IP, its external
/// addresses as seen from this node (the cluster endpoint set), and as seen
/// from outside (`externalTrafficPolicy: Local`: this node's endpoints
/// only, and none of them means drop; with Maglev under `Cluster`, the
/// cluster endpoints without topology).
fn targets(
    spec: &ServiceSpec,
    proto: Proto,
    candidates: &[Candidate<'_>],
    node: &NodeContext,
) -> [Target; 3] {
    let sets = categorize(candidates, node);
    let affinity = match spec.affinity {
        Affinity::None => None,
        Affinity::ClientIp { timeout_secs } => Some(timeout_secs),
    };
    let external = Target {
        backends: sets.cluster.clone(),
        affinity,
        external_local: spec.external_policy == TrafficPolicy::Local,
        ..Target::default()
    };
    let maglev = spec.algorithm.unwrap_or(node.algorithm) == Algorithm::Maglev;
    let outside = if external.external_local {
        Target {
            backends: sets.local.clone(),
            no_local_endpoints: sets.local.is_empty() && sets.any,
            maglev,
            ..external.clone()
        }
    } else {
        // Under Local every backend from outside is on this node: nothing
        // to forward.
        let dsr = node.lb_mode.dsr(proto, spec.forwarding);
        // Whatever topology this node's view filters by: other nodes filter
        // by their own.
        let (dsr_endpoints, dsr_nodes) = if dsr {
            let on_node = candidates.iter().filter_map(|c| {
                let topology = c.endpoint.topology.as_ref()?;
                topology
                    .node_name
                    .is_some()
                    .then(|| (c.backend.ip, topology.clone()))
            });
            (
                candidates
                    .iter()
                    .filter(|c| c.local && c.endpoint.is_serving())
                    .map(|c| c.backend)
                    .collect(),
                on_node.collect(),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        Target {
            maglev,
            dsr,
            dsr_endpoints,
            dsr_nodes,
            // Maglev's promise (a flow maps to the same endpoint on every
            // node) holds only for the same table on every node: topology
            // hints, which differ by node and zone, are not applied.
            // (Under Local the table is this node's endpoints only, and
            // differs by node by definition.)
            backends: if maglev {
                cluster_wide(candidates)
            } else {
                external.backends.clone()
            },
            ..external.clone()
        }
    };
    let local = spec.internal_policy == TrafficPolicy::Local;
    let backends = if local { sets.local } else { sets.cluster };
    let internal = Target {
        no_local_endpoints: local && backends.is_empty() && sets.any,
        backends,
        affinity,
        local,
        ..Target::default()
    };
    [internal, external, outside].map(|t| weigh(t, candidates))
}

/// `target` without its backends of weight 0 (maintenance: no new flows;
/// their flows go on, as they stay serving), with the weights of the rest
/// when they differ.
fn weigh(mut target: Target, candidates: &[Candidate<'_>]) -> Target {
    let weight = |b: &Backend| {
        candidates
            .binary_search_by_key(b, |c| c.backend)
            .map_or(DEFAULT_WEIGHT, |i| candidates[i].weight)
    };
    if target.backends.iter().all(|b| weight(b) == DEFAULT_WEIGHT) {
        return target;
    }
    target.backends.retain(|b| weight(b) != 0);
    let weights: Vec<u16> = target.backends.iter().map(weight).collect();
    if weights.windows(2).any(|w| w[0] != w[1]) {
        target.weights = weights;
    }
    target
}

/// The IPs of every serving endpoint, sorted: a UDP socket sent to any
/// other endpoint of the port is stale (kube-proxy's `CleanStaleEntries`).
fn serving_ips(candidates: &[Candidate<'_>]) -> Vec<IpAddr> {
    let set: BTreeSet<IpAddr> = candidates
        .iter()
        .filter(|c| c.endpoint.is_serving())
        .map(|c| c.backend.ip)
        .collect();
    set.into_iter().collect()
}
