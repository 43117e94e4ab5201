//! What one Service claims: for each of its ports at each of its cluster
//! IPs, the backends to balance over.
//!
//! kube-proxy's rules: slices join their Service through the
//! `kubernetes.io/service-name` label in the same namespace; a cluster IP
//! takes endpoints from the slices of its own address family; Service ports
//! match slice ports by name and protocol, and the slice gives the target
//! port; duplicate `IP:port` pairs are merged; `ready` unset counts as true;
//! when nothing is ready, serving-and-terminating endpoints are used.

use std::collections::BTreeSet;

use super::{
    Backend, ExcludedCidrs, Frontend, IpFamily, Proto,
    service::{ServicePort, ServiceSpec},
    slice::SliceSpec,
};

/// What a Service asks for at one frontend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Balance over these backends; empty means reject.
    Program(Vec<Backend>),
    /// Every endpoint is excluded: leave the VIP to the CNI that owns it.
    PassThrough,
}

/// Each frontend of `spec` with its claim. SCTP ports claim nothing (the
/// socket hooks cannot balance them; the Service reports the feature).
/// Endpoints dropped as excluded are added to `dropped`.
pub(super) fn service_claims(
    spec: &ServiceSpec,
    slices: &[&SliceSpec],
    excluded: &ExcludedCidrs,
    dropped: &mut BTreeSet<Backend>,
) -> Vec<(Frontend, Claim)> {
    let mut claims = Vec::with_capacity(spec.ports.len() * spec.cluster_ips.len());
    for port in spec.ports.iter().filter(|p| p.proto != Proto::Sctp) {
        for &vip in &spec.cluster_ips {
            let family = IpFamily::of(vip);
            let claim = match port_backends(port, family, slices, excluded, dropped) {
                Some(list) => Claim::Program(list),
                None => Claim::PassThrough,
            };
            let fe = Frontend {
                vip,
                port: port.port,
                proto: port.proto,
            };
            claims.push((fe, claim));
        }
    }
    claims
}

/// Backends of one Service port in one family; `None` when every endpoint
/// is excluded (the frontend belongs to another CNI and must pass through
/// untouched).
fn port_backends(
    port: &ServicePort,
    family: IpFamily,
    slices: &[&SliceSpec],
    excluded: &ExcludedCidrs,
    dropped: &mut BTreeSet<Backend>,
) -> Option<Vec<Backend>> {
    let (mut seen, mut dropped_here) = (0usize, 0usize);
    let mut ready = BTreeSet::new();
    let mut fallback = BTreeSet::new();
    for s in slices.iter().filter(|s| s.family == family) {
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
                    dropped.insert(be);
                } else if ep.is_ready() {
                    ready.insert(be);
                } else if ep.is_serving() && ep.is_terminating() {
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
