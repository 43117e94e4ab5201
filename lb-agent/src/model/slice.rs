//! Validation of a discovery.k8s.io/v1 EndpointSlice.

use std::{net::IpAddr, sync::Arc};

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{
    IpFamily, ObjectKind, ObjectRef, Proto,
    topologies::{EndpointTopology, Topologies},
    weight::{DEFAULT_WEIGHT, slice_weight},
};

/// Links a slice to its Service (same namespace).
pub(super) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The API limit on endpoints per slice; more means the object is not genuine.
const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceSpec {
    pub object: ObjectRef,
    pub service: String,
    /// `addressType`; every address has this family.
    pub family: IpFamily,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
    /// Every endpoint's weight, from the slice's weight annotation
    /// (`weight.rs`): [`DEFAULT_WEIGHT`] when it sets none.
    pub weight: u16,
    /// The weight annotation's value when it is no weight (the endpoints
    /// keep the default, and the Service reports it).
    pub invalid_weight: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    /// "" when unnamed; matches the Service port of the same name.
    pub name: String,
    pub port: u16,
    pub proto: Proto,
}

/// One endpoint. Conditions are kept as written (`None`: unset); the
/// methods read them the way the API documents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceEndpoint {
    /// The first address, the only one kube-proxy reads (the API allows
    /// one); `None` when there is none, and the endpoint is skipped.
    pub ip: Option<IpAddr>,
    pub ready: Option<bool>,
    pub serving: Option<bool>,
    pub terminating: Option<bool>,
    /// `None` when the endpoint names no node, zone or hint; shared by
    /// every endpoint with the same (see `topologies.rs`).
    pub topology: Option<Arc<EndpointTopology>>,
}

impl SliceEndpoint {
    /// `ready` unset counts as true.
    pub fn is_ready(&self) -> bool {
        self.ready.unwrap_or(true)
    }

    /// `serving` unset counts as true.
    pub fn is_serving(&self) -> bool {
        self.serving.unwrap_or(true)
    }

    /// `terminating` unset counts as false.
    pub fn is_terminating(&self) -> bool {
        self.terminating.unwrap_or(false)
    }
}

#[derive(Debug)]
pub(super) enum Verdict {
    Use(SliceSpec),
    Ignore(&'static str),
    Invalid(String),
}

pub fn object_ref(slice: &EndpointSlice) -> ObjectRef {
    ObjectRef {
        kind: ObjectKind::EndpointSlice,
        namespace: slice
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .into(),
        name: slice.metadata.name.as_deref().unwrap_or_default().into(),
    }
}

pub(super) fn validate(slice: &EndpointSlice, topologies: &mut Topologies) -> Verdict {
    let object = object_ref(slice);
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => return Verdict::Ignore("FQDN"),
        other => return Verdict::Invalid(format!("unknown addressType {other:?}")),
    };
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
    let mut names = Vec::new();
    for p in slice.ports.iter().flatten() {
        // The API's validation: names are unique whatever the protocol, so
        // a Service port matches at most one slice port (with two, which
        // one gave the target port would depend on the order).
        let name = p.name.as_deref().unwrap_or_default();
        if names.contains(&name) {
            return Verdict::Invalid(format!("duplicate port name {name:?}"));
        }
        names.push(name);
        // A port without a number means "all ports"; kube-proxy skips it.
        let Some(number) = p.port else { continue };
        let port = match u16::try_from(number) {
            Ok(0) | Err(_) => return Verdict::Invalid(format!("port {number} is out of range")),
            Ok(port) => port,
        };
        let proto = match p.protocol.as_deref() {
            None | Some("TCP") => Proto::Tcp,
            Some("UDP") => Proto::Udp,
            Some("SCTP") => Proto::Sctp,
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
        let mut first = None;
        for addr in &ep.addresses {
            match addr.parse::<IpAddr>() {
                Ok(ip) if IpFamily::of(ip) == family => {
                    first.get_or_insert(ip);
                }
                _ => {
                    return Verdict::Invalid(format!(
                        "address {addr:?} is not of addressType {}",
                        slice.address_type
                    ));
                }
            }
        }
        let cond = ep.conditions.as_ref();
        let hints = ep.hints.as_ref();
        let topology = EndpointTopology {
            node_name: ep.node_name.clone(),
            zone: ep.zone.clone(),
            for_zones: hints
                .and_then(|h| h.for_zones.as_ref())
                .into_iter()
                .flatten()
                .map(|z| z.name.clone())
                .collect(),
            for_nodes: hints
                .and_then(|h| h.for_nodes.as_ref())
                .into_iter()
                .flatten()
                .map(|n| n.name.clone())
                .collect(),
        };
        endpoints.push(SliceEndpoint {
            ip: first,
            ready: cond.and_then(|c| c.ready),
            serving: cond.and_then(|c| c.serving),
            terminating: cond.and_then(|c| c.terminating),
            topology: (topology != EndpointTopology::default())
                .then(|| topologies.intern(topology)),
        });
    }
    let (weight, invalid_weight) = match slice_weight(slice.metadata.annotations.as_ref()) {
        Ok(weight) => (weight, None),
        Err(value) => (DEFAULT_WEIGHT, Some(value)),
    };
    Verdict::Use(SliceSpec {
        object,
        service: service.clone(),
        family,
        ports,
        endpoints,
        weight,
        invalid_weight,
    })
}
