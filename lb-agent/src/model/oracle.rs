//! A naive oracle for the incremental [`Cache`]: kube-proxy's rules
//! applied from scratch to the Kubernetes objects, sharing nothing with the
//! model but its output types. Built for the unit tests and, with the
//! `fuzzing` feature, for the `model_events` fuzz target; never part of the
//! agent.
//!
//! It knows the cluster traffic policy, port matching, conditions, the
//! de-duplication of endpoints, exclusion, external frontends (external
//! IPs, LB VIPs, node ports) and claims; not topology,
//! `internalTrafficPolicy` or affinity (the generators feeding it make
//! none of those).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::{Backend, Cache, ExcludedCidrs, Flush, Frontend, ObjectRef, Proto, Scope};

/// What a cache shows: frontend -> (backends, owner).
pub type Shown = BTreeMap<Frontend, (Vec<Backend>, ObjectRef)>;

/// Every programmed frontend of `c`, with its backends and owner.
pub fn shown(c: &Cache) -> Shown {
    c.programmed()
        .map(|(fe, t, o)| (*fe, (t.backends.clone(), o.clone())))
        .collect()
}

/// What the oracle computes from the objects in force.
#[derive(Debug, Default)]
pub struct Oracle {
    pub shown: Shown,
    pub conflicts: BTreeSet<(Frontend, ObjectRef)>,
    pub passthrough: BTreeMap<Frontend, ObjectRef>,
    pub excluded: BTreeSet<(ObjectRef, Backend)>,
}

/// The oracle's answer for the objects in force (a malformed update never
/// replaced its predecessor, so only objects the cache admitted may be
/// passed); headless, ExternalName and FQDN are skipped here.
pub fn naive<'a>(
    services: impl Iterator<Item = &'a Service>,
    slices: impl Iterator<Item = &'a EndpointSlice> + Clone,
    excluded: &ExcludedCidrs,
    node_port_ips: &[IpAddr],
) -> Oracle {
    let mut out = Oracle::default();
    // Frontend -> every claimant: (owner, Some(backends) or None for pass-through).
    let mut claims: BTreeMap<Frontend, BTreeMap<ObjectRef, Option<Vec<Backend>>>> = BTreeMap::new();
    let proto = |p: Option<&String>| match p.map(String::as_str) {
        None | Some("TCP") => Proto::Tcp,
        Some("UDP") => Proto::Udp,
        Some(_) => Proto::Sctp,
    };
    for svc in services {
        let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
        let name = svc.metadata.name.as_deref().unwrap();
        let owner = ObjectRef::service(ns, name);
        let spec = svc.spec.as_ref().unwrap();
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let ips: Vec<String> = match &spec.cluster_ips {
            Some(ips) if !ips.is_empty() => ips.clone(),
            _ => spec.cluster_ip.iter().cloned().collect(),
        };
        if ips.iter().any(|i| i == "None") {
            continue;
        }
        // VIPs with a pass-through port get no wildcard frontend.
        let mut passes: BTreeSet<IpAddr> = BTreeSet::new();
        let ranges: Vec<ipnet::IpNet> = spec
            .load_balancer_source_ranges
            .iter()
            .flatten()
            .map(|r| r.trim().parse().unwrap())
            .collect();
        let vips = svc
            .status
            .iter()
            .filter_map(|s| s.load_balancer.as_ref())
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter(|i| matches!(i.ip_mode.as_deref(), None | Some("VIP")))
            .filter_map(|i| i.ip.as_deref().filter(|ip| !ip.is_empty()))
            .map(|ip| ip.parse::<IpAddr>().unwrap());
        // Guarded VIPs (source ranges of their family) serve from outside
        // only.
        let guarded: BTreeSet<IpAddr> = vips
            .clone()
            .filter(|vip| ranges.iter().any(|r| r.addr().is_ipv4() == vip.is_ipv4()))
            .collect();
        let external: BTreeSet<IpAddr> = spec
            .external_ips
            .iter()
            .flatten()
            .map(|ip| ip.parse().unwrap())
            .chain(vips)
            .collect();
        for port in spec.ports.iter().flatten() {
            let pproto = proto(port.protocol.as_ref());
            if pproto == Proto::Sctp {
                continue;
            }
            let pname = port.name.clone().unwrap_or_default();
            for vip in &ips {
                let vip: IpAddr = vip.parse().unwrap();
                let family = if vip.is_ipv4() { "IPv4" } else { "IPv6" };
                let (mut seen, mut dropped) = (0, 0);
                // Backend -> (ready, serving and terminating, terminating,
                // weight 0).
                let mut endpoints: BTreeMap<Backend, (bool, bool, bool, bool)> = BTreeMap::new();
                for sl in slices.clone() {
                    if sl.metadata.namespace.as_deref().unwrap_or("default") != ns
                        || label_of(sl).as_deref() != Some(name)
                        || sl.address_type != family
                    {
                        continue;
                    }
                    let Some(target) = sl.ports.iter().flatten().find(|p| {
                        p.name.clone().unwrap_or_default() == pname
                            && proto(p.protocol.as_ref()) == pproto
                    }) else {
                        continue;
                    };
                    let Some(tport) = target.port else { continue };
                    // Ours, else Cilium's; a value that is no weight is
                    // ignored.
                    let annotations = sl.metadata.annotations.clone().unwrap_or_default();
                    let drained = annotations
                        .get("lb-agent.io/weight")
                        .or_else(|| annotations.get("service.cilium.io/weight"))
                        .is_some_and(|w| w.trim().parse::<u16>() == Ok(0));
                    for ep in sl.endpoints.iter().flatten() {
                        let c = ep.conditions.clone().unwrap_or_default();
                        let Some(a) = ep.addresses.first() else {
                            continue;
                        };
                        seen += 1;
                        let be = Backend {
                            ip: a.parse().unwrap(),
                            port: tport as u16,
                        };
                        if excluded.contains(be.ip) {
                            dropped += 1;
                            out.excluded.insert((owner.clone(), be));
                            continue;
                        }
                        let terminating = c.terminating.unwrap_or(false);
                        let new = (
                            c.ready.unwrap_or(true),
                            c.serving.unwrap_or(true) && terminating,
                            terminating,
                            drained,
                        );
                        // A non-terminating copy wins over a terminating one.
                        let old = endpoints.entry(be).or_insert(new);
                        if old.2 && !terminating {
                            *old = new;
                        }
                    }
                }
                let pick = |f: fn(&(bool, bool, bool, bool)) -> bool| -> Vec<Backend> {
                    endpoints
                        .iter()
                        .filter(|(_, c)| f(c))
                        .map(|(b, _)| *b)
                        .collect()
                };
                let (ready, fallback) = (pick(|c| c.0), pick(|c| c.1));
                // Drained endpoints take no new connection, after the sets
                // are chosen.
                let undrained = |set: Vec<Backend>| -> Vec<Backend> {
                    set.into_iter().filter(|b| !endpoints[b].3).collect()
                };
                let fe = Frontend {
                    vip,
                    port: port.port as u16,
                    proto: pproto,
                    scope: Scope::Internal,
                };
                let claim = if seen > 0 && dropped == seen {
                    passes.insert(vip);
                    None
                } else if ready.is_empty() {
                    Some(undrained(fallback))
                } else {
                    Some(undrained(ready))
                };
                // External frontends of the cluster IP's family, with the
                // same claim (no topology or traffic policy here).
                let same_family = |ip: &&IpAddr| ip.is_ipv4() == vip.is_ipv4();
                let node_port = port.node_port.filter(|n| *n != 0).map(|n| n as u16);
                let externals = external
                    .iter()
                    .filter(same_family)
                    .map(|ip| (*ip, fe.port))
                    .chain(node_port.into_iter().flat_map(|n| {
                        node_port_ips
                            .iter()
                            .filter(same_family)
                            .map(move |ip| (*ip, n))
                    }));
                for (ip, number) in externals {
                    let at = Frontend {
                        vip: ip,
                        port: number,
                        proto: pproto,
                        scope: Scope::Internal,
                    };
                    // Seen from outside too; the generators make no
                    // externalTrafficPolicy: Local, so with the same claim.
                    let inside = (!guarded.contains(&ip)).then_some(at);
                    for at in inside.into_iter().chain([at.external()]) {
                        claims
                            .entry(at)
                            .or_default()
                            .insert(owner.clone(), claim.clone());
                    }
                }
                claims.entry(fe).or_default().insert(owner.clone(), claim);
            }
        }
        for vip in &ips {
            let vip: IpAddr = vip.parse().unwrap();
            if !passes.contains(&vip) {
                let fe = Frontend::wildcard(vip);
                claims
                    .entry(fe)
                    .or_default()
                    .insert(owner.clone(), Some(Vec::new()));
            }
        }
    }
    for (fe, by) in claims {
        let mut by = by.into_iter();
        let (winner, claim) = by.next().unwrap();
        out.conflicts.extend(by.map(|(o, _)| (fe, o)));
        match claim {
            Some(b) => {
                out.shown.insert(fe, (b, winner));
            }
            None => {
                out.passthrough.insert(fe, winner);
            }
        }
    }
    out
}

/// The Service a slice is labelled for.
pub fn label_of(s: &EndpointSlice) -> Option<String> {
    s.metadata
        .labels
        .as_ref()?
        .get("kubernetes.io/service-name")
        .cloned()
}

/// Checks the cache after `flush` against `oracle`, computed from the
/// objects in force; `before` is what it showed after the previous flush.
/// Panics naming the first difference, prefixed with `context`; returns
/// what the cache shows now.
pub fn check(
    cache: &Cache,
    flush: &Flush,
    before: &Shown,
    oracle: &Oracle,
    context: &str,
) -> Shown {
    let after = shown(cache);
    assert_eq!(
        after, oracle.shown,
        "{context}: incremental and oracle disagree"
    );
    // Every change since the last flush was reported.
    let keys: BTreeSet<&Frontend> = before.keys().chain(after.keys()).collect();
    for fe in keys {
        if before.get(fe) != after.get(fe) {
            assert!(
                flush.touched.contains(fe),
                "{context}: {fe} changed ({:?} -> {:?}) but was not touched",
                before.get(fe),
                after.get(fe)
            );
        }
    }
    let conflicts: BTreeSet<(Frontend, ObjectRef)> =
        cache.conflicts().map(|(f, o)| (*f, o.clone())).collect();
    assert_eq!(conflicts, oracle.conflicts, "{context}: conflicts");
    for (svc, r) in &flush.services {
        for fe in &r.passthrough {
            assert_eq!(
                oracle.passthrough.get(fe),
                Some(svc),
                "{context}: pass-through {fe}"
            );
        }
        for be in &r.excluded {
            assert!(
                oracle.excluded.contains(&(svc.clone(), *be)),
                "{context}: {svc} excluded {be}"
            );
        }
    }
    after
}
