//! The sync loop's state: object changes in, map writes out.
//!
//! Changes only mark Services dirty. [`Syncer::sync`] then recomputes those
//! Services and writes the frontends they touch. The first sync waits until
//! both initial lists are complete and this node's Node is in (at most
//! [`NODE_WAIT`] longer: `node_wait.rs`), and is a full reconcile against
//! what the pinned maps hold; so is the sync after any relist, and after a
//! prune.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use ipnet::IpNet;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tracing::{debug, error, info, warn};

use crate::{
    model::{
        Admission, Backend, Cache, ExcludedCidrs, Frontend, FrontendKind, HealthCheck, NodeContext,
        NodePortAddresses, ObjectRef, Proto, Scope, node_nets::NodeNets, service_ref, slice_ref,
        sock_lb::OptOuts,
    },
    reconcile::{
        DualReconciler, GracePeriods, LbView, Outcome, Settings, SettingsStore, StoreError, Tables,
    },
    shared::Shared,
    sockets::{Serving, UdpServing},
    source::{Change, ListKind, TRIGGER_TIME_ANNOTATION},
    syncer::{
        node_wait::{Gate, GaveUp},
        owners::Owners,
        reports::Reports,
        retries::Retries,
        tick::Prunes,
    },
};

pub use node_wait::{NODE_WAIT, NodeWait};
pub use tick::Tick;

/// `--nodeport-addresses`, and what it selects from.
#[derive(Debug)]
struct Addresses {
    node_ports: NodePortAddresses,
    /// The Node's primary addresses.
    primary: Vec<IpAddr>,
    /// The addresses on this node's interfaces.
    local: Vec<IpAddr>,
}

/// Changes taken in but not written yet, for the latency metrics.
#[derive(Debug, Default)]
struct Unwritten {
    /// When each arrived.
    received: Vec<Instant>,
    /// Trigger times of slice changes.
    triggers: Vec<SystemTime>,
}

/// What one sync did.
#[derive(Debug)]
pub struct SyncStats {
    pub full: bool,
    /// Frontends recomputed (all of them in a full sync).
    pub frontends: usize,
    pub outcome: Outcome,
    pub took: Duration,
    /// From the oldest change written to the end of its write.
    pub latency: Duration,
}

/// Cache, reconciler and the bookkeeping between syncs.
pub struct Syncer<T: Tables, G: GracePeriods, S> {
    cache: Cache,
    addresses: Addresses,
    reconciler: DualReconciler<T, G>,
    shared: Arc<Shared>,
    /// Which initial lists are in: services, slices.
    listed: (bool, bool),
    /// The first sync's wait for this node's Node.
    node_wait: NodeWait,
    /// The next sync reconciles everything.
    full_pending: bool,
    /// What is not written yet.
    unwritten: Unwritten,
    /// Frontends whose last write failed, retried with backoff.
    retries: Retries,
    reports: Reports,
    owners: Owners,
    /// UDP frontends whose sockets, and external frontends whose flows,
    /// to gone endpoints are to be destroyed; taken after each sync.
    stale: BTreeSet<Frontend>,
    /// Frontends guarded by `loadBalancerSourceRanges` -> their ranges, as
    /// of the last sync: external-scope ones, and with
    /// `--bpf-lb-source-range-all-types` cluster IPs.
    guarded: BTreeMap<Frontend, Vec<IpNet>>,
    /// External-scope DSR frontends with endpoints on this node -> their
    /// kind and those endpoints, as of the last sync.
    dsr: BTreeMap<Frontend, (FrontendKind, Vec<Backend>)>,
    /// Every Node's networks and the DSR frontends' endpoints, for
    /// `LB4_NODE_NETS` (its DSR frontends as of the last sync).
    node_nets: NodeNets,
    /// The tc programs' settings and `guarded`'s ranges, as written.
    settings: Settings<S>,
    /// Every UDP frontend's serving IPs, kept for the socket reaper.
    udp_serving: Arc<UdpServing>,
    /// Every external frontend's serving IPs, kept for the conntrack
    /// collector.
    external_serving: Arc<Serving<Frontend>>,
    /// Every Service's `healthCheckNodePort`, published after each sync.
    health_checks: BTreeMap<ObjectRef, HealthCheck>,
    prunes: Prunes,
    /// Which pods opted out of socket load balancing.
    opt_outs: OptOuts,
}

impl<T: Tables, G: GracePeriods, S: SettingsStore> Syncer<T, G, S> {
    pub fn new(
        reconciler: DualReconciler<T, G>,
        settings: S,
        excluded: ExcludedCidrs,
        node: NodeContext,
        node_wait: NodeWait,
        node_ports: NodePortAddresses,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            cache: Cache::new(excluded, node),
            addresses: Addresses {
                node_ports,
                primary: Vec::new(),
                local: Vec::new(),
            },
            stale: BTreeSet::new(),
            guarded: BTreeMap::new(),
            dsr: BTreeMap::new(),
            node_nets: NodeNets::default(),
            settings: Settings::new(settings),
            udp_serving: Arc::default(),
            external_serving: Arc::default(),
            health_checks: BTreeMap::new(),
            reconciler,
            shared,
            listed: (false, false),
            node_wait,
            full_pending: true,
            unwritten: Unwritten::default(),
            retries: Retries::default(),
            reports: Reports::default(),
            owners: Owners::default(),
            prunes: Prunes::default(),
            opt_outs: OptOuts::default(),
        }
    }

    /// Which pods opted out of socket load balancing, as reported so far.
    pub fn opt_outs(&self) -> &OptOuts {
        &self.opt_outs
    }

    /// This node's name.
    pub fn node_name(&self) -> &str {
        &self.cache.node().name
    }

    /// Both initial lists are in; syncing can start.
    pub fn ready(&self) -> bool {
        self.listed == (true, true)
    }

    /// Something is waiting to be written, or a retry is due at `now`.
    pub fn pending(&self, now: Instant) -> bool {
        !self.unwritten.received.is_empty()
            || self.full_pending
            || self.retries.due(now).next().is_some()
    }

    /// When the earliest failed frontend is due for a retry.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.next()
    }

    /// When the first sync stops waiting for this node's Node, while it
    /// waits.
    pub fn node_wait_until(&self) -> Option<Instant> {
        self.node_wait.until()
    }

    /// Frontends whose last write failed.
    pub fn failing(&self) -> usize {
        self.retries.len()
    }

    /// The UDP frontends whose connected sockets, and the external
    /// frontends whose flows, may point at endpoints that stopped serving
    /// (see [`Self::udp_serving`] and [`Self::external_serving`]), since
    /// the last call. Call after [`Self::sync`], once the maps send new
    /// connects elsewhere.
    pub fn take_stale(&mut self) -> BTreeSet<Frontend> {
        std::mem::take(&mut self.stale)
    }

    /// Every UDP frontend's serving endpoint IPs, widened before and
    /// narrowed after each map write (see [`UdpServing`]).
    pub fn udp_serving(&self) -> Arc<UdpServing> {
        self.udp_serving.clone()
    }

    /// Every external frontend's serving endpoint IPs, kept as
    /// [`Self::udp_serving`].
    pub fn external_serving(&self) -> Arc<Serving<Frontend>> {
        self.external_serving.clone()
    }

    /// Takes a change into the model; nothing is written until [`Self::sync`].
    pub fn apply(&mut self, change: Change, received: Instant) {
        let shared = self.shared.clone();
        let m = &shared.metrics;
        let admissions = match change {
            Change::Service(svc) => {
                m.service_changes.inc();
                vec![(service_ref(&svc), self.cache.apply_service(&svc))]
            }
            Change::ServiceDeleted { namespace, name } => {
                m.service_changes.inc();
                self.cache.delete_service(&namespace, &name);
                Vec::new()
            }
            Change::Slice(slice) => {
                m.endpoint_changes.inc();
                if let Some(t) = trigger_time(&slice) {
                    self.unwritten.triggers.push(t);
                }
                vec![(slice_ref(&slice), self.cache.apply_slice(&slice))]
            }
            Change::SliceDeleted { namespace, name } => {
                m.endpoint_changes.inc();
                self.cache.delete_slice(&namespace, &name);
                Vec::new()
            }
            Change::Relist(ListKind::Services) => {
                self.cache.relist_services();
                return;
            }
            Change::Relist(ListKind::Slices) => {
                self.cache.relist_slices();
                return;
            }
            Change::Relist(ListKind::Nodes) => {
                self.node_nets.relist();
                return;
            }
            // Pods and Namespaces change no frontend: a change only wakes a
            // sync, after which the agent finds and programs the pods.
            Change::Relist(ListKind::Pods) => {
                self.opt_outs.relist_pods();
                return;
            }
            Change::Relist(ListKind::Namespaces) => {
                self.opt_outs.relist_namespaces();
                return;
            }
            Change::Listed(ListKind::Pods) => {
                let changed = self.opt_outs.pods_listed();
                self.opt_outs_changed(changed, received);
                return;
            }
            Change::Listed(ListKind::Namespaces) => {
                let changed = self.opt_outs.namespaces_listed();
                self.opt_outs_changed(changed, received);
                return;
            }
            Change::Pod(facts) => {
                let changed = self.opt_outs.apply_pod(facts);
                self.opt_outs_changed(changed, received);
                return;
            }
            Change::PodDeleted(pod) => {
                let changed = self.opt_outs.delete_pod(&pod);
                self.opt_outs_changed(changed, received);
                return;
            }
            Change::Namespace { name, setting } => {
                let changed = self.opt_outs.apply_namespace(name, setting);
                self.opt_outs_changed(changed, received);
                return;
            }
            Change::NamespaceDeleted(name) => {
                let changed = self.opt_outs.delete_namespace(&name);
                self.opt_outs_changed(changed, received);
                return;
            }
            // Every Node's networks: nothing waits for them, and a Node
            // that changes at its heartbeat only is no change.
            Change::Listed(ListKind::Nodes) => {
                let changed = self.node_nets.listed();
                self.node_nets_changed(changed, received);
                return;
            }
            Change::NodeNetworks(networks) => {
                let changed = self.node_nets.apply(networks);
                self.node_nets_changed(changed, received);
                return;
            }
            Change::NodeNetworksDeleted(name) => {
                let changed = self.node_nets.delete(&name);
                self.node_nets_changed(changed, received);
                return;
            }
            Change::Listed(ListKind::Services) => {
                self.listed.0 = true;
                self.cache.services_listed();
                self.full_pending = true;
                Vec::new()
            }
            Change::Listed(ListKind::Slices) => {
                self.listed.1 = true;
                self.cache.slices_listed();
                self.full_pending = true;
                Vec::new()
            }
            Change::NodeRefused(why) => {
                // Nothing for the model: only the first sync's wait ends.
                self.node_wait.refused(why);
                return;
            }
            Change::Node(facts) => {
                if self.node_wait.seen() {
                    info!(node = %self.cache.node().name, "this node's Node arrived after the first sync; its zone and addresses apply now");
                    m.node_missing.set(0.0);
                }
                if facts.zone != self.cache.node().zone {
                    info!(
                        zone = facts.zone.as_deref().unwrap_or("<none>"),
                        "this node's zone"
                    );
                }
                self.cache.set_zone(facts.zone);
                self.addresses.primary = facts.primary_ips;
                self.select_node_port_ips();
                Vec::new()
            }
            Change::LocalAddresses(ips) => {
                self.addresses.local = ips;
                self.select_node_port_ips();
                Vec::new()
            }
        };
        for (object, admission) in admissions {
            match admission {
                Admission::Accepted => {}
                Admission::Ignored(why) => {
                    debug!(%object, "not programmed: {why}");
                    m.ignored(object.kind).inc();
                }
                Admission::Invalid(inv) => {
                    warn!(object = %inv.object, "skipping malformed object: {}", inv.reason);
                    m.invalid(inv.object.kind).inc();
                }
            }
        }
        self.unwritten.received.push(received);
    }

    /// After a change of the Nodes' networks: if it `changed` them, they
    /// are to be written, and the change is pending from `received` (a
    /// sync follows, after which they are written).
    fn node_nets_changed(&mut self, changed: bool, received: Instant) {
        if changed {
            self.settings.node_nets_changed();
            self.shared.health.queued();
            self.unwritten.received.push(received);
        }
    }

    /// After a change of the Pods or Namespaces: if it `changed` them, a
    /// sync follows, after which the agent programs the pods.
    fn opt_outs_changed(&mut self, changed: bool, received: Instant) {
        if changed {
            self.shared.health.queued();
            self.unwritten.received.push(received);
        }
    }

    /// Recomputes the addresses that serve NodePorts (logged when they change).
    fn select_node_port_ips(&mut self) {
        let ips = self
            .addresses
            .node_ports
            .select_all(&self.addresses.primary, &self.addresses.local);
        if ips != self.cache.node().node_port_ips {
            info!(addresses = ?ips, "NodePorts are served on these addresses");
            self.cache.set_node_port_ips(ips);
        }
    }

    /// Writes the source ranges of every guarded external frontend if they
    /// changed since they were last written; says whether it wrote. After
    /// a failure the next call tries again.
    pub fn write_source_ranges(&mut self) -> Result<bool, StoreError> {
        self.settings.write_source_ranges(&self.guarded)
    }

    /// Writes the endpoints on this node of every DSR frontend if they
    /// changed since they were last written; says whether it wrote. After
    /// a failure the next call tries again.
    pub fn write_dsr_endpoints(&mut self) -> Result<bool, StoreError> {
        self.settings.write_dsr_endpoints(&self.dsr)
    }

    /// Writes which node each address is on (every Node's addresses and
    /// pod CIDRs, the DSR frontends' endpoints) if that changed since it
    /// was last written; says whether it wrote. A prefix claimed for two
    /// nodes is logged when the conflict begins. After a failure the next
    /// call tries again.
    pub fn write_node_nets(&mut self) -> Result<bool, StoreError> {
        if !self.settings.node_nets_stale() {
            return Ok(false);
        }
        let table = self.node_nets.table(self.settings.written_node_nets()?);
        for c in &table.new_conflicts {
            warn!(
                prefix = %c.net,
                kept = %c.kept,
                other = %c.other,
                "two nodes claim the same address or pod CIDR; it is placed on the first"
            );
        }
        let wrote = self.settings.write_node_nets(&table.entries)?;
        self.shared
            .metrics
            .node_networks
            .set(table.entries.len() as f64);
        Ok(wrote)
    }

    /// The settings as written, to look at in tests.
    #[cfg(test)]
    pub fn settings(&self) -> &Settings<S> {
        &self.settings
    }

    /// Brings `guarded`, `dsr` and the DSR frontends' endpoints in
    /// `node_nets` up to date for the frontends a sync wrote (`None`: every
    /// frontend).
    fn track_external(&mut self, touched: Option<&BTreeSet<Frontend>>) {
        let all: Vec<Frontend>;
        let frontends: Box<dyn Iterator<Item = &Frontend>> = match touched {
            Some(t) => Box::new(t.iter()),
            None => {
                all = self
                    .cache
                    .programmed()
                    .map(|(fe, _, _)| *fe)
                    .chain(self.guarded.keys().copied())
                    .chain(self.dsr.keys().copied())
                    .chain(self.node_nets.frontends().copied())
                    .collect();
                Box::new(all.iter())
            }
        };
        for fe in frontends {
            // Any scope: a cluster IP is guarded from inside with
            // --bpf-lb-source-range-all-types.
            let want = self
                .cache
                .desired(fe)
                .map(|t| t.source_ranges.clone())
                .unwrap_or_default();
            let changed = if want.is_empty() {
                self.guarded.remove(fe).is_some()
            } else {
                self.guarded.insert(*fe, want.clone()) != Some(want)
            };
            if changed {
                self.settings.source_ranges_changed();
            }
            if fe.scope != Scope::External {
                continue;
            }
            let want = self
                .cache
                .desired(fe)
                .filter(|t| t.dsr && !t.dsr_endpoints.is_empty())
                .map(|t| (t.kind, t.dsr_endpoints.clone()));
            let changed = match want {
                None => self.dsr.remove(fe).is_some(),
                Some(want) => self.dsr.insert(*fe, want.clone()) != Some(want),
            };
            if changed {
                self.settings.dsr_endpoints_changed();
            }
            let nodes = self
                .cache
                .desired(fe)
                .filter(|t| t.dsr)
                .map(|t| t.dsr_nodes.clone())
                .unwrap_or_default();
            if self.node_nets.set_endpoints(*fe, nodes) {
                self.settings.node_nets_changed();
            }
        }
    }

    /// The frontends programmed for traffic from outside the node.
    pub fn external_frontends(&self) -> impl Iterator<Item = &Frontend> + '_ {
        self.cache
            .programmed()
            .map(|(fe, ..)| fe)
            .filter(|fe| fe.scope == Scope::External)
    }

    /// Both families' maps as the datapath sees them, as `lb-agent dump`
    /// lists them.
    pub fn view(&self) -> LbView {
        self.reconciler.view()
    }

    /// The addresses that serve NodePorts now.
    pub fn node_port_ips(&self) -> &[IpAddr] {
        &self.cache.node().node_port_ips
    }

    /// The Node's primary addresses (none until its Node object is read).
    pub fn primary_ips(&self) -> &[IpAddr] {
        &self.addresses.primary
    }

    /// Whether the first sync's wait for this node's Node is over (it is
    /// asked with both lists in). Says so in the log and
    /// `lbagent_node_missing` when it ends without the Node.
    fn node_in(&mut self, now: Instant) -> bool {
        let node = &self.cache.node().name;
        match self.node_wait.gate(now) {
            Gate::Open => return true,
            Gate::Wait { began, .. } => {
                if began {
                    info!(%node, "both lists are in; waiting up to {} s for this node's Node before the first sync", NODE_WAIT.as_secs());
                }
                return false;
            }
            Gate::GaveUp(GaveUp::TimedOut(after)) => warn!(
                %node,
                "this node's Node was not seen {} s after the lists; programming without it (no zone for topology hints, no primary addresses for NodePorts) until it arrives",
                after.as_secs()
            ),
            Gate::GaveUp(GaveUp::Refused(why)) => warn!(
                %node,
                "this node's Node cannot be read ({why}); programming without it (no zone for topology hints, no primary addresses for NodePorts) until it can be"
            ),
        }
        self.shared.metrics.node_missing.set(1.0);
        true
    }

    /// Writes what changed since the last sync, and retries the failed
    /// frontends that are due. `None` until both initial lists are in and
    /// the wait for this node's Node is over, or when nothing is pending.
    pub fn sync(&mut self, now: Instant) -> Option<SyncStats> {
        if !self.ready() || !self.pending(now) || !self.node_in(now) {
            return None;
        }
        let start = Instant::now();
        let mut flush = self.cache.flush();
        self.reports
            .report(&flush, &self.cache, &self.shared.metrics);
        self.stale.append(&mut flush.stale);
        // Connects reach new endpoints as soon as the maps are written, and
        // stop reaching old ones only then.
        let udp: Vec<Frontend> = flush
            .touched
            .iter()
            .filter(|fe| fe.proto == Proto::Udp)
            .copied()
            .collect();
        let external: Vec<Frontend> = flush
            .touched
            .iter()
            .filter(|fe| fe.scope == Scope::External)
            .copied()
            .collect();
        self.udp_serving.widen(serving_now(&self.cache, &udp));
        self.external_serving
            .widen(external.iter().map(|fe| (*fe, self.cache.serving(fe))));

        let full = std::mem::take(&mut self.full_pending);
        let (touched, frontends, outcome) = if full {
            let desired = self
                .cache
                .programmed()
                .map(|(fe, t, _)| (*fe, t.clone()))
                .collect::<BTreeMap<_, _>>();
            // What the maps hold too: an earlier agent's bits are not known.
            let in_maps: Vec<IpAddr> = self.reconciler.frontends().map(|fe| fe.vip).collect();
            if !self.add_addresses(desired.keys().map(|fe| fe.vip).chain(in_maps)) {
                self.full_pending = true;
                return None;
            }
            let outcome = self.reconciler.reconcile(&desired);
            (None, desired.len(), outcome)
        } else {
            let mut touched = flush.touched;
            touched.extend(self.retries.due(now));
            if !self.add_addresses(touched.iter().map(|fe| fe.vip)) {
                self.full_pending = true;
                return None;
            }
            let changes = touched.iter().map(|fe| (fe, self.cache.desired(fe)));
            let outcome = self.reconciler.reconcile_some(&changes.collect::<Vec<_>>());
            let frontends = touched.len();
            (Some(touched), frontends, outcome)
        };
        // A full map is no failure of the sync: its frontends wait for room.
        let mut failed = !outcome.delete_errors.is_empty()
            || outcome
                .failed
                .iter()
                .any(|(_, e)| !matches!(e.as_ref(), StoreError::Full { .. }));
        let removed = touched
            .as_ref()
            .is_none_or(|t| t.iter().any(|fe| self.cache.desired(fe).is_none()));
        if removed {
            let left = self.reconciler.frontends().map(|fe| fe.vip);
            if let Err(e) = self.settings.set_addresses(left.collect::<Vec<_>>()) {
                failed = true;
                // The bits stay set: a connect to those addresses only
                // looks them up.
                self.shared.metrics.map_write_errors.inc();
                error!(
                    error = &e as &dyn std::error::Error,
                    "clearing the bits of removed frontend addresses failed; retrying later"
                );
            }
        }
        if failed {
            self.shared.metrics.sync_failures.inc();
        }
        self.retries
            .track(touched.as_ref(), &outcome.failed, now, &self.shared.metrics);
        if outcome.deleted > 0 {
            self.retries.room_freed(now);
        }
        self.track_owners(touched.as_ref());
        self.track_external(touched.as_ref());
        self.udp_serving.narrow(serving_now(&self.cache, &udp));
        self.external_serving
            .narrow(external.iter().map(|fe| (*fe, self.cache.serving(fe))));
        self.publish_health_checks(flush.services.keys());
        let took = start.elapsed();
        let latency = self
            .unwritten
            .received
            .iter()
            .min()
            .map_or(took, Instant::elapsed);
        self.record(full, &outcome, took);
        Some(SyncStats {
            full,
            frontends,
            outcome,
            took,
            latency,
        })
    }

    /// Re-reads the maps and reconciles everything, repairing whatever
    /// changed behind the agent's back. `None` when it cannot run now
    /// (before the first sync, or while revisions wait for their grace
    /// period: the caller tries again shortly).
    pub fn prune(&mut self, now: Instant) -> Option<SyncStats> {
        if !self.ready() {
            return None;
        }
        match self.reconciler.reload() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                self.shared.metrics.map_write_errors.inc();
                error!(
                    error = &e as &dyn std::error::Error,
                    "re-reading the maps for the prune failed; trying again later"
                );
                return None;
            }
        }
        self.full_pending = true;
        // The node networks too are read back and repaired.
        self.settings.reload_node_nets();
        self.sync(now)
    }

    /// Sets the `LB_ADDRS` bits of `addrs` before their frontends are
    /// written; on failure (then nothing is written) says so.
    fn add_addresses(&mut self, addrs: impl IntoIterator<Item = IpAddr>) -> bool {
        match self.settings.add_addresses(addrs) {
            Ok(()) => true,
            Err(e) => {
                self.shared.metrics.map_write_errors.inc();
                self.shared.metrics.sync_failures.inc();
                error!(
                    error = &e as &dyn std::error::Error,
                    "setting the bits of frontend addresses failed; writing nothing until it works"
                );
                false
            }
        }
    }

    /// Deletes what waited for a grace period that has now passed.
    pub fn reap(&mut self) {
        let outcome = self.reconciler.reap();
        self.record_delete_errors(&outcome);
        if outcome.deleted > 0 {
            self.retries.room_freed(Instant::now());
            self.shared.metrics.map_entries(&self.reconciler.entries());
        }
    }

    /// Whether old revisions wait for a grace period (then [`Self::reap`]
    /// is worth calling soon).
    pub fn retiring(&self) -> bool {
        self.reconciler.retiring() > 0
    }

    fn record_delete_errors(&self, outcome: &Outcome) {
        for e in &outcome.delete_errors {
            self.shared.metrics.map_write_errors.inc();
            warn!(
                error = e as &dyn std::error::Error,
                "stale entry left for the next sync"
            );
        }
    }

    /// Recomputes the health checks of the Services in `recomputed` and
    /// publishes them all, after the maps are written (kube-proxy updates
    /// its health-check servers after each successful sync).
    fn publish_health_checks<'a>(&mut self, recomputed: impl Iterator<Item = &'a ObjectRef>) {
        let mut changed = false;
        for svc in recomputed {
            let now = self.cache.health_check(svc);
            let before = match now {
                Some(hc) => self.health_checks.insert(svc.clone(), hc),
                None => self.health_checks.remove(svc),
            };
            changed |= before != now;
        }
        if changed {
            self.shared.service_health.publish(&self.health_checks);
        }
    }

    /// Keeps the owner of every frontend in the maps, for the
    /// programmed-Services gauge.
    fn track_owners(&mut self, touched: Option<&BTreeSet<Frontend>>) {
        match touched {
            None => {
                self.owners.clear();
                for fe in self.reconciler.frontends() {
                    let owner = self.cache.winner(&fe).map(|(o, _)| o.clone());
                    self.owners.set(&fe, owner);
                }
            }
            Some(touched) => {
                for fe in touched {
                    let owner = self
                        .reconciler
                        .has(fe)
                        .then(|| self.cache.winner(fe).map(|(o, _)| o.clone()))
                        .flatten();
                    self.owners.set(fe, owner);
                }
            }
        }
    }

    fn record(&mut self, full: bool, outcome: &Outcome, took: Duration) {
        self.record_delete_errors(outcome);
        let m = &self.shared.metrics;
        let now = Instant::now();
        for r in self.unwritten.received.drain(..) {
            m.event_to_write.observe(now - r);
        }
        let wall = SystemTime::now();
        for t in self.unwritten.triggers.drain(..) {
            m.network_programming
                .observe(wall.duration_since(t).unwrap_or_default());
        }
        m.sync_duration.observe(took);
        if full {
            m.sync_full_duration.observe(took);
        } else {
            m.sync_partial_duration.observe(took);
        }
        m.sync_last_timestamp.set(
            wall.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
        );
        m.map_entries(&self.reconciler.entries());
        m.services_programmed.set(self.owners.len() as f64);
        let no_local = self.cache.no_local_endpoints();
        m.set_no_local_endpoints(no_local.internal, no_local.external);
        self.shared.health.updated();
    }
}

/// The slice's `last-change-trigger-time`, if present and well formed.
fn trigger_time(slice: &EndpointSlice) -> Option<SystemTime> {
    let text = slice
        .metadata
        .annotations
        .as_ref()?
        .get(TRIGGER_TIME_ANNOTATION)?;
    let ts: jiff::Timestamp = text.parse().ok()?;
    Some(SystemTime::from(ts))
}

/// Each of the UDP frontends `udp` with its serving endpoint IPs now.
fn serving_now<'a>(
    cache: &'a Cache,
    udp: &'a [Frontend],
) -> impl Iterator<Item = (SocketAddr, &'a [IpAddr])> {
    udp.iter()
        .map(|fe| (SocketAddr::new(fe.vip, fe.port), cache.serving(fe)))
}

mod node_wait;
mod owners;
mod reports;
mod retries;
#[cfg(test)]
mod tests;
mod tick;
