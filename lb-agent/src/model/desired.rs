//! Merging Services and EndpointSlices into desired frontends.
//!
//! kube-proxy's rules: slices join their Service through the
//! `kubernetes.io/service-name` label in the same namespace; Service ports
//! match slice ports by name and protocol, and the slice gives the target
//! port; duplicate `IP:port` pairs are merged; `ready` nil counts as true;
//! when nothing is ready, serving-and-terminating endpoints are used.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::{
    Backend, ExcludedCidrs, Frontend, Invalid, ObjectRef,
    cache::{Admission, Cache, Claim},
    service::{ServicePort, ServiceSpec},
    slice::SliceSpec,
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

/// Computes the desired frontends from a full set of objects: the
/// incremental [`Cache`] fed everything at once.
pub fn compute(
    services: &[Service],
    slices: &[EndpointSlice],
    excluded: &ExcludedCidrs,
) -> (Desired, ModelReport) {
    let mut report = ModelReport::default();
    let mut cache = Cache::new(excluded.clone());
    let mut admissions = cache.replace_slices(slices);
    admissions.extend(cache.replace_services(services));
    for (object, admission) in admissions {
        match admission {
            Admission::Accepted => {}
            Admission::Ignored(why) => report.ignored.push((object, why)),
            Admission::Invalid(inv) => report.invalid.push(inv),
        }
    }
    let flush = cache.flush();
    report.excluded = flush.excluded;
    report.passthrough = flush.passthrough;
    report.conflicts = cache.conflicts().map(|(fe, o)| (*fe, o.clone())).collect();

    let mut desired = Desired::default();
    for (fe, backends, owner) in cache.programmed() {
        desired.frontends.insert(*fe, backends.to_vec());
        desired.owners.insert(*fe, owner.clone());
    }
    (desired, report)
}

/// What one Service claims: each of its ports at each of its VIPs.
pub(super) fn service_claims(
    spec: &ServiceSpec,
    slices: &[&SliceSpec],
    excluded: &ExcludedCidrs,
    dropped: &mut BTreeSet<(ObjectRef, Backend)>,
) -> Vec<(Frontend, Claim)> {
    let mut claims = Vec::with_capacity(spec.ports.len() * spec.vips.len());
    for port in &spec.ports {
        let claim = match port_backends(spec, port, slices, excluded, dropped) {
            Some(list) => Claim::Program(list),
            None => Claim::PassThrough,
        };
        for &vip in &spec.vips {
            let fe = Frontend {
                vip,
                port: port.port,
                proto: port.proto,
            };
            claims.push((fe, claim.clone()));
        }
    }
    claims
}

/// Backends of one Service port; `None` when every endpoint is excluded
/// (the frontend belongs to another CNI and must pass through untouched).
fn port_backends(
    spec: &ServiceSpec,
    port: &ServicePort,
    slices: &[&SliceSpec],
    excluded: &ExcludedCidrs,
    dropped: &mut BTreeSet<(ObjectRef, Backend)>,
) -> Option<Vec<Backend>> {
    let (mut seen, mut dropped_here) = (0usize, 0usize);
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
                    dropped_here += 1;
                    dropped.insert((spec.object.clone(), be));
                } else if ep.ready {
                    ready.insert(be);
                } else if ep.serving && ep.terminating {
                    fallback.insert(be);
                }
            }
        }
    }
    if seen > 0 && dropped_here == seen {
        return None;
    }
    let chosen = if ready.is_empty() { fallback } else { ready };
    Some(chosen.into_iter().collect())
}
