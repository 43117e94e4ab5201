//! Merging Services and EndpointSlices into desired frontends.
//!
//! kube-proxy's rules: slices join their Service through the
//! `kubernetes.io/service-name` label in the same namespace; Service ports
//! match slice ports by name and protocol, and the slice gives the target
//! port; duplicate `IP:port` pairs are merged; `ready` nil counts as true;
//! when nothing is ready, serving-and-terminating endpoints are used.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::{
    Backend, ExcludedCidrs, Frontend, Invalid, ObjectRef,
    service::{self, ServicePort, ServiceSpec},
    slice::{self, SliceSpec},
};

/// The desired frontend table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Desired {
    /// Frontend -> its backends, sorted. An empty list means "reject".
    pub frontends: BTreeMap<Frontend, Vec<Backend>>,
    /// Which Service owns each frontend, for logs.
    pub owners: BTreeMap<Frontend, ObjectRef>,
}

/// What the model noticed besides the desired table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelReport {
    /// Malformed objects that were skipped.
    pub invalid: Vec<Invalid>,
    /// Endpoints dropped because they sit in an excluded CIDR: (Service, endpoint).
    pub excluded: BTreeSet<(ObjectRef, Backend)>,
    /// Frontends left unprogrammed because every endpoint is excluded.
    pub passthrough: BTreeMap<Frontend, ObjectRef>,
    /// Objects deliberately not programmed (headless, ExternalName, FQDN, ...), and why.
    pub ignored: Vec<(ObjectRef, &'static str)>,
    /// Frontends claimed by more than one Service; the first by name wins.
    pub conflicts: Vec<(Frontend, ObjectRef)>,
}

/// Computes the desired frontends from a full set of objects.
pub fn compute(
    services: &[Service],
    slices: &[EndpointSlice],
    excluded: &ExcludedCidrs,
) -> (Desired, ModelReport) {
    let mut report = ModelReport::default();

    // (namespace, service name) -> its valid slices.
    let mut by_service: HashMap<(String, String), Vec<SliceSpec>> = HashMap::new();
    for s in slices {
        match slice::validate(s) {
            slice::Verdict::Use(spec) => by_service
                .entry((spec.object.namespace.clone(), spec.service.clone()))
                .or_default()
                .push(spec),
            slice::Verdict::Ignore(why) => report.ignored.push((slice::object_ref(s), why)),
            slice::Verdict::Invalid(reason) => report.invalid.push(Invalid {
                object: slice::object_ref(s),
                reason,
            }),
        }
    }

    let mut specs = Vec::new();
    for svc in services {
        match service::validate(svc) {
            service::Verdict::Program(spec) => specs.push(spec),
            service::Verdict::Ignore(why) => report.ignored.push((service::object_ref(svc), why)),
            service::Verdict::Invalid(reason) => report.invalid.push(Invalid {
                object: service::object_ref(svc),
                reason,
            }),
        }
    }
    // Deterministic winner when two Services claim one frontend.
    specs.sort_by(|a, b| a.object.cmp(&b.object));

    let mut desired = Desired::default();
    let no_slices = Vec::new();
    for spec in &specs {
        let key = (spec.object.namespace.clone(), spec.object.name.clone());
        let slices = by_service.get(&key).unwrap_or(&no_slices);
        for port in &spec.ports {
            let backends = port_backends(spec, port, slices, excluded, &mut report);
            for &vip in &spec.vips {
                let fe = Frontend {
                    vip,
                    port: port.port,
                    proto: port.proto,
                };
                if desired.owners.contains_key(&fe) || report.passthrough.contains_key(&fe) {
                    report.conflicts.push((fe, spec.object.clone()));
                    continue;
                }
                match &backends {
                    Some(list) => {
                        desired.frontends.insert(fe, list.clone());
                        desired.owners.insert(fe, spec.object.clone());
                    }
                    None => {
                        report.passthrough.insert(fe, spec.object.clone());
                    }
                }
            }
        }
    }
    (desired, report)
}

/// Backends of one Service port; `None` when every endpoint is excluded
/// (the frontend belongs to another CNI and must pass through untouched).
fn port_backends(
    spec: &ServiceSpec,
    port: &ServicePort,
    slices: &[SliceSpec],
    excluded: &ExcludedCidrs,
    report: &mut ModelReport,
) -> Option<Vec<Backend>> {
    let (mut seen, mut dropped) = (0usize, 0usize);
    let mut ready = BTreeSet::new();
    let mut fallback = BTreeSet::new();
    for s in slices {
        let Some(sp) = s
            .ports
            .iter()
            .find(|p| p.name == port.name && p.proto == port.proto)
        else {
            continue;
        };
        for ep in &s.endpoints {
            for &ip in &ep.ips {
                seen += 1;
                let be = Backend { ip, port: sp.port };
                if excluded.contains(ip) {
                    dropped += 1;
                    report.excluded.insert((spec.object.clone(), be));
                } else if ep.ready {
                    ready.insert(be);
                } else if ep.serving && ep.terminating {
                    fallback.insert(be);
                }
            }
        }
    }
    if seen > 0 && dropped == seen {
        return None;
    }
    let chosen = if ready.is_empty() { fallback } else { ready };
    Some(chosen.into_iter().collect())
}
