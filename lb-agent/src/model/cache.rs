//! The incremental model: validated objects in, per-frontend desired
//! backends out, recomputing only the Services an event touched.
//!
//! Objects are validated once, when they arrive. Each Service claims its
//! frontends; when two claim one frontend, the first by namespace/name wins,
//! and the loser takes over if the winner goes away.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

// foldhash, seeded per map: SipHash over object names was 4% of the CPU of
// a cold start at 10,000 Services.
use foldhash::{HashMap, HashSet};
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use super::{
    Backend, ExcludedCidrs, Feature, Frontend, Invalid, NodeContext, ObjectRef, Proto, Scope,
    claims::{Claim, Target, service_claims},
    few::Few,
    health_check::{HealthCheck, health_check},
    no_local::NoLocalEndpoints,
    service::{self, ServiceSpec},
    slice::{self, SliceSpec},
    topologies::Topologies,
};

/// How an arriving object was taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    Accepted,
    /// Deliberately not programmed (headless, ExternalName, FQDN, ...).
    Ignored(&'static str),
    /// Malformed; skipped. The object's last valid version, if any, stays in
    /// force, so a bad update never takes a working Service down.
    Invalid(Invalid),
}

/// What a flush recomputed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flush {
    /// Frontends whose desired state may have changed.
    pub touched: BTreeSet<Frontend>,
    /// Every recomputed Service, with what the model noticed about it now
    /// (empty for one that was deleted or is no longer programmed).
    pub services: BTreeMap<ObjectRef, ServiceReport>,
    /// UDP frontends, and frontends seen from outside the node, that
    /// stopped sending to some endpoint IP (or are gone): connected sockets
    /// and tc flows sent through them to an IP they no longer
    /// [serve](Cache::serving) are stale (kube-proxy's `CleanStaleEntries`).
    pub stale: BTreeSet<Frontend>,
}

/// What the model noticed about one Service, besides its claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceReport {
    /// Endpoints dropped because they sit in an excluded CIDR.
    pub excluded: BTreeSet<Backend>,
    /// Frontends it owns that are left to their own CNI (every endpoint excluded).
    pub passthrough: BTreeSet<Frontend>,
    /// Features it uses that are not programmed yet.
    pub unsupported: BTreeSet<Feature>,
}

impl ServiceReport {
    pub fn is_empty(&self) -> bool {
        self.excluded.is_empty() && self.passthrough.is_empty() && self.unsupported.is_empty()
    }
}

/// All Services and slices, validated, and the claims they make.
#[derive(Debug, Default)]
pub struct Cache {
    excluded: ExcludedCidrs,
    node: NodeContext,
    services: HashMap<ObjectRef, ServiceSpec>,
    slices: HashMap<ObjectRef, SliceSpec>,
    /// Service -> names of its valid slices.
    slices_of: HashMap<ObjectRef, Few<ObjectRef, ()>>,
    /// Frontend -> every Service claiming it; the first key wins.
    claims: BTreeMap<Frontend, Few<ObjectRef, Claim>>,
    /// Service -> the frontends it claims now.
    claimed_by: HashMap<ObjectRef, Vec<Frontend>>,
    /// Services to recompute at the next flush.
    dirty: BTreeSet<ObjectRef>,
    /// The endpoints' topologies, one copy of each.
    topologies: Topologies,
    /// Services with ports lacking a local endpoint under a `Local`
    /// policy, and how many; `no_local_total` sums them.
    no_local: HashMap<ObjectRef, NoLocalEndpoints>,
    no_local_total: NoLocalEndpoints,
    /// While a (re)list of Services streams in: the ones it named so far.
    relisting_services: Option<HashSet<ObjectRef>>,
    /// The same for EndpointSlices.
    relisting_slices: Option<HashSet<ObjectRef>>,
}

/// The objects of `all` that a (re)list did not name. Without a beginning
/// (`None`) there is no list to judge by: none.
fn unlisted<V>(all: &HashMap<ObjectRef, V>, listed: Option<HashSet<ObjectRef>>) -> Vec<ObjectRef> {
    let Some(listed) = listed else {
        return Vec::new();
    };
    all.keys()
        .filter(|o| !listed.contains(*o))
        .cloned()
        .collect()
}

impl Cache {
    pub fn new(excluded: ExcludedCidrs, node: NodeContext) -> Self {
        Self {
            excluded,
            node,
            ..Self::default()
        }
    }

    /// Sets this node's zone label; a change recomputes every Service with
    /// endpoints (their topology may now select other ones).
    pub fn set_zone(&mut self, zone: Option<String>) {
        if self.node.zone == zone {
            return;
        }
        self.node.zone = zone;
        self.dirty.extend(self.slices_of.keys().cloned());
    }

    pub fn node(&self) -> &NodeContext {
        &self.node
    }

    /// Sets the node's addresses that serve NodePorts; a change recomputes
    /// every Service with a node port.
    pub fn set_node_port_ips(&mut self, mut ips: Vec<IpAddr>) {
        ips.sort_unstable();
        ips.dedup();
        if self.node.node_port_ips == ips {
            return;
        }
        self.node.node_port_ips = ips;
        let with_node_ports = self
            .services
            .iter()
            .filter(|(_, s)| s.ports.iter().any(|p| p.node_port.is_some()))
            .map(|(o, _)| o.clone());
        self.dirty.extend(with_node_ports);
    }

    /// Adds or replaces a Service.
    pub fn apply_service(&mut self, svc: &Service) -> Admission {
        let object = service::object_ref(svc);
        if let Some(listed) = &mut self.relisting_services {
            listed.insert(object.clone());
        }
        match service::validate(svc) {
            service::Verdict::Program(spec) => {
                self.services.insert(object.clone(), spec);
                self.dirty.insert(object);
                Admission::Accepted
            }
            service::Verdict::Ignore(why) => {
                self.services.remove(&object);
                self.dirty.insert(object);
                Admission::Ignored(why)
            }
            service::Verdict::Invalid(reason) => Admission::Invalid(Invalid { object, reason }),
        }
    }

    pub fn delete_service(&mut self, namespace: &str, name: &str) {
        let object = ObjectRef::service(namespace, name);
        self.services.remove(&object);
        self.dirty.insert(object);
    }

    /// Adds or replaces an EndpointSlice.
    pub fn apply_slice(&mut self, s: &EndpointSlice) -> Admission {
        let object = slice::object_ref(s);
        if let Some(listed) = &mut self.relisting_slices {
            listed.insert(object.clone());
        }
        match slice::validate(s, &mut self.topologies) {
            slice::Verdict::Use(spec) => {
                self.forget_slice(&object);
                let owner = ObjectRef::service(&object.namespace, &spec.service);
                self.slices_of
                    .entry(owner.clone())
                    .or_default()
                    .insert(object.clone(), ());
                self.dirty.insert(owner);
                self.slices.insert(object, spec);
                Admission::Accepted
            }
            slice::Verdict::Ignore(why) => {
                self.forget_slice(&object);
                Admission::Ignored(why)
            }
            slice::Verdict::Invalid(reason) => Admission::Invalid(Invalid { object, reason }),
        }
    }

    pub fn delete_slice(&mut self, namespace: &str, name: &str) {
        self.forget_slice(&ObjectRef::slice(namespace, name));
    }

    /// Drops a slice from its Service (whose label may since have changed).
    fn forget_slice(&mut self, object: &ObjectRef) {
        let Some(old) = self.slices.remove(object) else {
            return;
        };
        let owner = ObjectRef::service(&object.namespace, &old.service);
        if let Some(set) = self.slices_of.get_mut(&owner) {
            set.remove(object);
            if set.is_empty() {
                self.slices_of.remove(&owner);
            }
        }
        self.dirty.insert(owner);
    }

    /// Makes `all` the complete set of Services, as after a (re)list: each is
    /// applied, and those missing are deleted, whether or not a delete event
    /// was ever seen for them.
    pub fn replace_services<'a>(
        &mut self,
        all: impl IntoIterator<Item = &'a Service>,
    ) -> Vec<(ObjectRef, Admission)> {
        self.relist_services();
        let out = all
            .into_iter()
            .map(|svc| (service::object_ref(svc), self.apply_service(svc)))
            .collect();
        self.services_listed();
        out
    }

    /// A (re)list of Services begins; [`Self::apply_service`] takes its
    /// items as they arrive (the list is never held whole), and
    /// [`Self::services_listed`] ends it. A list begun again before it ended
    /// (the watch restarted it) starts over.
    pub fn relist_services(&mut self) {
        self.relisting_services = Some(HashSet::default());
    }

    /// The (re)list of Services is complete: those it did not name are
    /// deleted, whether or not a delete event was ever seen for them.
    pub fn services_listed(&mut self) {
        for o in unlisted(&self.services, self.relisting_services.take()) {
            self.delete_service(&o.namespace, &o.name);
        }
    }

    /// Makes `all` the complete set of EndpointSlices; see [`Self::replace_services`].
    pub fn replace_slices<'a>(
        &mut self,
        all: impl IntoIterator<Item = &'a EndpointSlice>,
    ) -> Vec<(ObjectRef, Admission)> {
        self.relist_slices();
        let out = all
            .into_iter()
            .map(|s| (slice::object_ref(s), self.apply_slice(s)))
            .collect();
        self.slices_listed();
        out
    }

    /// [`Self::relist_services`] for EndpointSlices.
    pub fn relist_slices(&mut self) {
        self.relisting_slices = Some(HashSet::default());
    }

    /// [`Self::services_listed`] for EndpointSlices.
    pub fn slices_listed(&mut self) {
        for o in unlisted(&self.slices, self.relisting_slices.take()) {
            self.forget_slice(&o);
        }
    }

    /// Recomputes the Services touched since the last flush.
    pub fn flush(&mut self) -> Flush {
        let mut out = Flush::default();
        let mut before: BTreeMap<Frontend, Vec<IpAddr>> = BTreeMap::new();
        for object in std::mem::take(&mut self.dirty) {
            for fe in self.claimed_by.remove(&object).unwrap_or_default() {
                if let Some(c) = self.claims.get_mut(&fe) {
                    if let Some(Claim::Program { serving, .. }) = c.remove(&object)
                        && (fe.proto == Proto::Udp || fe.scope == Scope::External)
                    {
                        before.entry(fe).or_default().extend(serving);
                    }
                    if c.is_empty() {
                        self.claims.remove(&fe);
                    }
                }
                out.touched.insert(fe);
            }
            if let Some(before) = self.no_local.remove(&object) {
                self.no_local_total.remove(before);
            }
            let report = out.services.entry(object.clone()).or_default();
            let Some(spec) = self.services.get(&object) else {
                continue;
            };
            report.unsupported = spec.unsupported();
            let slices = self.valid_slices(&object);
            if slices.iter().any(|s| s.invalid_weight.is_some()) {
                report.unsupported.insert(Feature::InvalidEndpointWeight);
            }
            let mut no_local = NoLocalEndpoints::default();
            let claims = service_claims(
                spec,
                &slices,
                &self.node,
                &self.excluded,
                &mut report.excluded,
                &mut no_local,
            );
            if !no_local.is_zero() {
                self.no_local_total.add(no_local);
                self.no_local.insert(object.clone(), no_local);
            }
            let mut frontends = Vec::with_capacity(claims.len());
            for (fe, claim) in claims {
                if claim == Claim::PassThrough {
                    report.passthrough.insert(fe);
                }
                self.claims
                    .entry(fe)
                    .or_default()
                    .insert(object.clone(), claim);
                frontends.push(fe);
                out.touched.insert(fe);
            }
            self.claimed_by.insert(object, frontends);
        }
        for (fe, before) in before {
            let now = self.serving(&fe);
            if before.iter().any(|ip| !now.contains(ip)) {
                out.stale.insert(fe);
            }
        }
        // A pass-through reported above may have lost to another Service.
        for (svc, report) in &mut out.services {
            report
                .passthrough
                .retain(|fe| self.winner(fe).is_some_and(|(w, _)| w == svc));
        }
        out
    }

    /// The valid slices of Service `svc`.
    fn valid_slices(&self, svc: &ObjectRef) -> Vec<&SliceSpec> {
        self.slices_of
            .get(svc)
            .into_iter()
            .flat_map(Few::keys)
            .filter_map(|s| self.slices.get(s))
            .collect()
    }

    /// The Service ports without a local endpoint under a `Local` traffic
    /// policy, as of the last flush (kube-proxy's
    /// `sync_proxy_rules_no_local_endpoints_total`).
    pub fn no_local_endpoints(&self) -> NoLocalEndpoints {
        self.no_local_total
    }

    /// The `healthCheckNodePort` server Service `svc` needs, if any.
    pub fn health_check(&self, svc: &ObjectRef) -> Option<HealthCheck> {
        let spec = self.services.get(svc)?;
        health_check(spec, &self.valid_slices(svc), &self.node)
    }

    /// The Service that owns `fe`, and what it asks for.
    pub fn winner(&self, fe: &Frontend) -> Option<(&ObjectRef, &Claim)> {
        self.claims.get(fe)?.first()
    }

    /// What `fe` should be programmed with; `None` when it must not be.
    pub fn desired(&self, fe: &Frontend) -> Option<&Target> {
        match self.winner(fe)?.1 {
            Claim::Program { target, .. } => Some(target),
            Claim::PassThrough => None,
        }
    }

    /// The serving endpoint IPs of UDP frontend `fe` (see [`Claim`]).
    pub fn serving(&self, fe: &Frontend) -> &[IpAddr] {
        match self.winner(fe) {
            Some((_, Claim::Program { serving, .. })) => serving,
            _ => &[],
        }
    }

    /// Every frontend to program, with its target and owner.
    pub fn programmed(&self) -> impl Iterator<Item = (&Frontend, &Target, &ObjectRef)> {
        self.claims.keys().filter_map(|fe| {
            let (owner, claim) = self.winner(fe)?;
            match claim {
                Claim::Program { target, .. } => Some((fe, target, owner)),
                Claim::PassThrough => None,
            }
        })
    }

    /// The Services that claim `fe` but lost it to the winner.
    pub fn losers(&self, fe: &Frontend) -> impl Iterator<Item = &ObjectRef> {
        self.claims
            .get(fe)
            .into_iter()
            .flat_map(|c| c.keys().skip(1))
    }

    /// Frontends claimed by more than one Service, with each loser.
    pub fn conflicts(&self) -> impl Iterator<Item = (&Frontend, &ObjectRef)> {
        self.claims
            .iter()
            .flat_map(|(fe, c)| c.keys().skip(1).map(move |o| (fe, o)))
    }
}
