//! Validation of a v1 Service into the parts the load balancer uses.

use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Service;

use super::{ObjectRef, Proto};

/// Labels that hand a Service to another proxy, or mark it headless; kube-proxy
/// ignores such Services and so do we.
const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// The validated, load-balancer-relevant part of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ServiceSpec {
    pub object: ObjectRef,
    /// IPv4 cluster IPs (IPv6 ones wait for the IPv6 datapath).
    pub vips: Vec<Ipv4Addr>,
    pub ports: Vec<ServicePort>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ServicePort {
    /// The port name; "" when unnamed. Matched against slice port names.
    pub name: String,
    pub port: u16,
    pub proto: Proto,
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
        kind: super::ObjectKind::Service,
        namespace: svc
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: svc.metadata.name.clone().unwrap_or_default(),
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
    if spec.type_.as_deref() == Some("ExternalName") {
        return Verdict::Ignore("ExternalName");
    }
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
    let mut vips = Vec::new();
    for ip in ips {
        match ip.parse::<IpAddr>() {
            Ok(IpAddr::V4(v4)) if v4.is_unspecified() => {
                return Verdict::Invalid(format!("clusterIP {ip:?} is unspecified"));
            }
            Ok(IpAddr::V4(v4)) => vips.push(v4),
            Ok(IpAddr::V6(_)) => {}
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
            // SCTP is valid Kubernetes but not balanced by the socket hooks.
            Some("SCTP") => continue,
            Some(other) => return Verdict::Invalid(format!("unknown protocol {other:?}")),
        };
        let name = p.name.clone().unwrap_or_default();
        if ports
            .iter()
            .any(|q: &ServicePort| q.name == name || (q.port == port && q.proto == proto))
        {
            return Verdict::Invalid(format!("duplicate port {name:?} {port}/{proto}"));
        }
        ports.push(ServicePort { name, port, proto });
    }
    Verdict::Program(ServiceSpec {
        object,
        vips,
        ports,
    })
}
