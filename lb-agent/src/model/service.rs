//! Validation of a v1 Service into the parts the load balancer uses now or
//! will use (traffic policies, affinity, external addresses).

use std::{collections::BTreeSet, net::IpAddr};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;

use super::{
    Feature, IpFamily, ObjectKind, ObjectRef, Proto, forwarding::ForwardingMode, maglev::Algorithm,
};

/// Labels that hand a Service to another proxy, or mark it headless; kube-proxy
/// ignores such Services and so do we. The apiserver source filters them on
/// the server already; this check covers the file source.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// How a Service's external frontends pick backends for flows from
/// outside (`random` or `maglev`), over `--bpf-lb-algorithm`; and Cilium's
/// annotation of the same meaning, read when ours is absent, so that
/// Services annotated for Cilium keep their meaning.
pub const LB_ALGORITHM_ANNOTATION: &str = "lb-agent.io/lb-algorithm";
pub const CILIUM_LB_ALGORITHM_ANNOTATION: &str = "service.cilium.io/lb-algorithm";

/// Whether a Service's flows from outside reach backends on other nodes by
/// SNAT or DSR (`snat` or `dsr`), over `--bpf-lb-mode`; and Cilium's
/// annotation of the same meaning, read when ours is absent.
pub const FORWARDING_MODE_ANNOTATION: &str = "lb-agent.io/forwarding-mode";
pub const CILIUM_FORWARDING_MODE_ANNOTATION: &str = "service.cilium.io/forwarding-mode";

/// kube-proxy's default and maximum `sessionAffinityConfig.clientIP.timeoutSeconds`.
const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;
const MAX_AFFINITY_TIMEOUT: u32 = 86_400;

/// The validated, load-balancer-relevant part of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    pub object: ObjectRef,
    pub type_: ServiceType,
    /// `clusterIPs` (primary first), both families.
    pub cluster_ips: Vec<IpAddr>,
    pub ports: Vec<ServicePort>,
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` whose `ipMode` is `VIP` (or
    /// unset): kube-proxy's `LoadBalancerVIPs`. A `Proxy` IP is not
    /// intercepted, its traffic goes to the load balancer.
    pub lb_vips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`: who may reach the LB VIPs.
    pub source_ranges: Vec<IpNet>,
    pub affinity: Affinity,
    pub internal_policy: TrafficPolicy,
    pub external_policy: TrafficPolicy,
    pub health_check_node_port: Option<u16>,
    /// `spec.trafficDistribution`, as written.
    pub traffic_distribution: Option<String>,
    /// The algorithm its annotation chooses; `None`: the node's default.
    pub algorithm: Option<Algorithm>,
    /// The annotation names no algorithm we know: the default applies and
    /// the Service reports [`Feature::UnknownLbAlgorithm`].
    pub unknown_algorithm: bool,
    /// The forwarding mode its annotation chooses; `None`: the node's
    /// `--bpf-lb-mode`.
    pub forwarding: Option<ForwardingMode>,
    /// The annotation names no forwarding mode we know: the default
    /// applies and the Service reports [`Feature::UnknownForwardingMode`].
    pub unknown_forwarding: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficPolicy {
    Cluster,
    Local,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Affinity {
    None,
    /// `ClientIP`, with its timeout in seconds.
    ClientIp {
        timeout_secs: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    /// The port name; "" when unnamed. Matched against slice port names.
    pub name: String,
    pub port: u16,
    pub proto: Proto,
    pub node_port: Option<u16>,
}

impl ServiceSpec {
    /// The features this Service uses that are kept but not programmed yet.
    pub fn unsupported(&self) -> BTreeSet<Feature> {
        let mut out = BTreeSet::new();
        let mut add = |cond: bool, f: Feature| {
            if cond {
                out.insert(f);
            }
        };
        add(
            self.ports.iter().any(|p| p.proto == Proto::Sctp),
            Feature::Sctp,
        );
        add(
            self.lb_vips
                .iter()
                .any(|vip| self.source_ranges_of(*vip).is_some()),
            Feature::LoadBalancerSourceRanges,
        );
        add(self.unknown_algorithm, Feature::UnknownLbAlgorithm);
        add(self.unknown_forwarding, Feature::UnknownForwardingMode);
        out
    }

    /// The source ranges that guard `vip`, if any: kube-proxy's firewall
    /// only uses the ranges of the VIP's family, and none means open.
    pub fn source_ranges_of(&self, vip: IpAddr) -> Option<&[IpNet]> {
        let family = IpFamily::of(vip);
        self.source_ranges
            .iter()
            .any(|r| IpFamily::of(r.addr()) == family)
            .then_some(&self.source_ranges[..])
    }
}

/// What to do with a Service.
#[derive(Debug)]
pub(super) enum Verdict {
    Program(ServiceSpec),
    /// Not ours to program (headless, ExternalName, another proxy's).
    Ignore(&'static str),
    Invalid(String),
}

pub fn object_ref(svc: &Service) -> ObjectRef {
    ObjectRef {
        kind: ObjectKind::Service,
        namespace: svc
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .into(),
        name: svc.metadata.name.as_deref().unwrap_or_default().into(),
    }
}

pub(super) fn validate(svc: &Service) -> Verdict {
    let object = object_ref(svc);
    if object.name.is_empty() {
        return Verdict::Invalid("metadata.name is missing".into());
    }
    let labels = svc.metadata.labels.as_ref();
    if labels.is_some_and(|l| l.contains_key(SERVICE_PROXY_NAME_LABEL)) {
        return Verdict::Ignore("labelled for another proxy");
    }
    if labels.is_some_and(|l| l.contains_key(HEADLESS_LABEL)) {
        return Verdict::Ignore("labelled headless");
    }
    let Some(spec) = &svc.spec else {
        return Verdict::Invalid("spec is missing".into());
    };
    let type_ = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIp,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => return Verdict::Ignore("ExternalName"),
        Some(other) => return Verdict::Invalid(format!("unknown type {other:?}")),
    };
    // clusterIPs, when set, lists clusterIP first; fall back to clusterIP alone.
    let ips: Vec<&str> = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(ips), _) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
        (_, Some(ip)) => vec![ip.as_str()],
        _ => Vec::new(),
    };
    if ips.contains(&"None") {
        return Verdict::Ignore("headless (clusterIP None)");
    }
    if ips.is_empty() || ips.iter().all(|ip| ip.is_empty()) {
        return Verdict::Invalid("spec.clusterIP is missing".into());
    }
    let mut cluster_ips = Vec::with_capacity(ips.len());
    for ip in ips {
        match ip.parse::<IpAddr>() {
            Ok(a) if a.is_unspecified() => {
                return Verdict::Invalid(format!("clusterIP {ip:?} is unspecified"));
            }
            Ok(a) => cluster_ips.push(a),
            Err(_) => return Verdict::Invalid(format!("clusterIP {ip:?} is not an IP address")),
        }
    }
    let mut ports = Vec::new();
    for p in spec.ports.iter().flatten() {
        let Ok(port) = u16::try_from(p.port) else {
            return Verdict::Invalid(format!("port {} is out of range", p.port));
        };
        if port == 0 {
            return Verdict::Invalid("port 0 is not a valid service port".into());
        }
        let proto = match p.protocol.as_deref() {
            None | Some("TCP") => Proto::Tcp,
            Some("UDP") => Proto::Udp,
            Some("SCTP") => Proto::Sctp,
            Some(other) => return Verdict::Invalid(format!("unknown protocol {other:?}")),
        };
        let node_port = match p.node_port {
            None | Some(0) => None,
            Some(n) => match u16::try_from(n) {
                Ok(n) => Some(n),
                Err(_) => return Verdict::Invalid(format!("nodePort {n} is out of range")),
            },
        };
        let name = p.name.clone().unwrap_or_default();
        if ports
            .iter()
            .any(|q: &ServicePort| q.name == name || (q.port == port && q.proto == proto))
        {
            return Verdict::Invalid(format!("duplicate port {name:?} {port}/{proto}"));
        }
        ports.push(ServicePort {
            name,
            port,
            proto,
            node_port,
        });
    }
    let external_ips = match parse_ips(spec.external_ips.iter().flatten(), "externalIP") {
        Ok(v) => v,
        Err(e) => return Verdict::Invalid(e),
    };
    // kube-proxy's IsVIPMode: an unset ipMode is VIP.
    let vips = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter(|i| i.ip_mode.as_deref().is_none_or(|m| m == "VIP"))
        .filter_map(|i| i.ip.as_ref().filter(|ip| !ip.is_empty()));
    let lb_vips = match parse_ips(vips, "load-balancer ingress IP") {
        Ok(v) => v,
        Err(e) => return Verdict::Invalid(e),
    };
    let mut source_ranges = Vec::new();
    for r in spec.load_balancer_source_ranges.iter().flatten() {
        // The apiserver validates these; kube-proxy trims them first.
        match r.trim().parse::<IpNet>() {
            Ok(net) => source_ranges.push(net.trunc()),
            Err(_) => {
                return Verdict::Invalid(format!("loadBalancerSourceRange {r:?} is not a CIDR"));
            }
        }
    }
    let affinity = match spec.session_affinity.as_deref() {
        None | Some("None") => Affinity::None,
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            let timeout_secs = match timeout {
                None => DEFAULT_AFFINITY_TIMEOUT,
                Some(t) => match u32::try_from(t) {
                    Ok(t) if (1..=MAX_AFFINITY_TIMEOUT).contains(&t) => t,
                    _ => {
                        return Verdict::Invalid(format!(
                            "sessionAffinity timeoutSeconds {t} is outside 1..={MAX_AFFINITY_TIMEOUT}"
                        ));
                    }
                },
            };
            Affinity::ClientIp { timeout_secs }
        }
        Some(other) => return Verdict::Invalid(format!("unknown sessionAffinity {other:?}")),
    };
    let policy = |v: Option<&str>, field: &str| match v {
        None | Some("Cluster") => Ok(TrafficPolicy::Cluster),
        Some("Local") => Ok(TrafficPolicy::Local),
        Some(other) => Err(format!("unknown {field} {other:?}")),
    };
    let internal_policy = match policy(
        spec.internal_traffic_policy.as_deref(),
        "internalTrafficPolicy",
    ) {
        Ok(p) => p,
        Err(e) => return Verdict::Invalid(e),
    };
    let external_policy = match policy(
        spec.external_traffic_policy.as_deref(),
        "externalTrafficPolicy",
    ) {
        Ok(p) => p,
        Err(e) => return Verdict::Invalid(e),
    };
    let annotations = svc.metadata.annotations.as_ref();
    let chosen = [LB_ALGORITHM_ANNOTATION, CILIUM_LB_ALGORITHM_ANNOTATION]
        .into_iter()
        .find_map(|key| annotations?.get(key));
    let algorithm = chosen.map(|v| v.trim().to_lowercase().parse::<Algorithm>());
    let chosen = [
        FORWARDING_MODE_ANNOTATION,
        CILIUM_FORWARDING_MODE_ANNOTATION,
    ]
    .into_iter()
    .find_map(|key| annotations?.get(key));
    let forwarding = chosen.map(|v| v.trim().to_lowercase().parse::<ForwardingMode>());
    Verdict::Program(ServiceSpec {
        object,
        type_,
        cluster_ips,
        ports,
        external_ips,
        lb_vips,
        source_ranges,
        affinity,
        internal_policy,
        external_policy,
        health_check_node_port: spec
            .health_check_node_port
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0),
        traffic_distribution: spec.traffic_distribution.clone(),
        algorithm: algorithm.as_ref().and_then(|a| a.as_ref().ok()).copied(),
        unknown_algorithm: algorithm.is_some_and(|a| a.is_err()),
        forwarding: forwarding.as_ref().and_then(|f| f.as_ref().ok()).copied(),
        unknown_forwarding: forwarding.is_some_and(|f| f.is_err()),
    })
}

fn parse_ips<'a>(ips: impl Iterator<Item = &'a String>, what: &str) -> Result<Vec<IpAddr>, String> {
    ips.map(|ip| {
        ip.parse::<IpAddr>()
            .map_err(|_| format!("{what} {ip:?} is not an IP address"))
    })
    .collect()
}
