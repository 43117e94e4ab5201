//! Validation of a discovery.k8s.io/v1 EndpointSlice.

use std::net::Ipv4Addr;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{ObjectRef, Proto};

/// Links a slice to its Service (same namespace).
pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The API limit on endpoints per slice; more means the object is not genuine.
const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SliceSpec {
    pub object: ObjectRef,
    pub service: String,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SlicePort {
    /// "" when unnamed; matches the Service port of the same name.
    pub name: String,
    pub port: u16,
    pub proto: Proto,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SliceEndpoint {
    pub ips: Vec<Ipv4Addr>,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

#[derive(Debug)]
pub(super) enum Verdict {
    Use(SliceSpec),
    Ignore(&'static str),
    Invalid(String),
}

pub fn object_ref(slice: &EndpointSlice) -> ObjectRef {
    ObjectRef {
        kind: super::ObjectKind::EndpointSlice,
        namespace: slice
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: slice.metadata.name.clone().unwrap_or_default(),
    }
}

pub(super) fn validate(slice: &EndpointSlice) -> Verdict {
    let object = object_ref(slice);
    match slice.address_type.as_str() {
        "IPv4" => {}
        "IPv6" => return Verdict::Ignore("IPv6 (not yet programmed)"),
        "FQDN" => return Verdict::Ignore("FQDN"),
        other => return Verdict::Invalid(format!("unknown addressType {other:?}")),
    }
    let Some(service) = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .filter(|s| !s.is_empty())
    else {
        return Verdict::Invalid(format!("label {SERVICE_NAME_LABEL} is missing"));
    };
    let all_endpoints = slice.endpoints.as_deref().unwrap_or_default();
    if all_endpoints.len() > MAX_ENDPOINTS_PER_SLICE {
        return Verdict::Invalid(format!(
            "{} endpoints exceed the limit of {MAX_ENDPOINTS_PER_SLICE} per slice",
            all_endpoints.len()
        ));
    }
    let mut ports = Vec::new();
    for p in slice.ports.iter().flatten() {
        // A port without a number means "all ports"; kube-proxy skips it.
        let Some(number) = p.port else { continue };
        let port = match u16::try_from(number) {
            Ok(0) | Err(_) => return Verdict::Invalid(format!("port {number} is out of range")),
            Ok(port) => port,
        };
        let proto = match p.protocol.as_deref() {
            None | Some("TCP") => Proto::Tcp,
            Some("UDP") => Proto::Udp,
            Some("SCTP") => continue,
            Some(other) => return Verdict::Invalid(format!("unknown protocol {other:?}")),
        };
        ports.push(SlicePort {
            name: p.name.clone().unwrap_or_default(),
            port,
            proto,
        });
    }
    let mut endpoints = Vec::with_capacity(all_endpoints.len());
    for ep in all_endpoints {
        let mut ips = Vec::with_capacity(ep.addresses.len());
        for addr in &ep.addresses {
            match addr.parse::<Ipv4Addr>() {
                Ok(ip) => ips.push(ip),
                Err(_) => return Verdict::Invalid(format!("address {addr:?} is not IPv4")),
            }
        }
        let cond = ep.conditions.as_ref();
        // Absent conditions are read the way the API documents them.
        let ready = cond.and_then(|c| c.ready).unwrap_or(true);
        endpoints.push(SliceEndpoint {
            ips,
            ready,
            serving: cond.and_then(|c| c.serving).unwrap_or(ready),
            terminating: cond.and_then(|c| c.terminating).unwrap_or(false),
        });
    }
    Verdict::Use(SliceSpec {
        object,
        service: service.clone(),
        ports,
        endpoints,
    })
}
