//! The sync loop's state: object changes in, map writes out.
//!
//! Changes only mark Services dirty. [`Syncer::sync`] then recomputes those
//! Services and writes the frontends they touch. The first sync waits until
//! both initial lists are complete and is a full reconcile against what the
//! pinned maps hold; so is the sync after any relist.

use std::{
    collections::{BTreeSet, HashSet},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};
use tracing::{debug, error, info, warn};

use crate::{
    http::Endpoints,
    model::{
        Admission, Backend, Cache, ExcludedCidrs, Frontend, ObjectRef, service_ref, slice_ref,
    },
    reconcile::{GracePeriods, Outcome, Reconciler, StoreError, Tables, V4},
};

/// The EndpointSlice annotation kube-proxy measures programming latency from.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// One change from a source.
#[derive(Clone, Debug)]
pub enum Change {
    Service(Box<Service>),
    ServiceDeleted {
        namespace: String,
        name: String,
    },
    Slice(Box<EndpointSlice>),
    SliceDeleted {
        namespace: String,
        name: String,
    },
    /// The complete set of Services: a first list, a relist, a file re-read.
    AllServices(Vec<Service>),
    /// The complete set of EndpointSlices.
    AllSlices(Vec<EndpointSlice>),
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
pub struct Syncer<T: Tables, G: GracePeriods> {
    cache: Cache,
    reconciler: Reconciler<V4, T, G>,
    endpoints: Arc<Endpoints>,
    listed_services: bool,
    listed_slices: bool,
    /// The next sync reconciles everything.
    full_pending: bool,
    /// When each not-yet-written event arrived.
    received: Vec<Instant>,
    /// Trigger times of not-yet-written slice changes.
    triggers: Vec<SystemTime>,
    /// Frontends whose last write failed; retried on every sync.
    failed: BTreeSet<Frontend>,
    /// Exclusions and pass-throughs are logged (and counted) once each.
    logged_exclusions: HashSet<(ObjectRef, Backend)>,
    logged_passthrough: HashSet<Frontend>,
    logged_conflicts: HashSet<(Frontend, ObjectRef)>,
}

impl<T: Tables, G: GracePeriods> Syncer<T, G> {
    pub fn new(
        reconciler: Reconciler<V4, T, G>,
        excluded: ExcludedCidrs,
        endpoints: Arc<Endpoints>,
    ) -> Self {
        Self {
            cache: Cache::new(excluded),
            reconciler,
            endpoints,
            listed_services: false,
            listed_slices: false,
            full_pending: true,
            received: Vec::new(),
            triggers: Vec::new(),
            failed: BTreeSet::new(),
            logged_exclusions: HashSet::new(),
            logged_passthrough: HashSet::new(),
            logged_conflicts: HashSet::new(),
        }
    }

    /// Both initial lists are in; syncing can start.
    pub fn ready(&self) -> bool {
        self.listed_services && self.listed_slices
    }

    /// Something is waiting to be written (or retried).
    pub fn pending(&self) -> bool {
        !self.received.is_empty() || self.full_pending || !self.failed.is_empty()
    }

    /// Takes a change into the model; nothing is written until [`Self::sync`].
    pub fn apply(&mut self, change: Change, received: Instant) {
        let m = &self.endpoints.metrics;
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
                    self.triggers.push(t);
                }
                vec![(slice_ref(&slice), self.cache.apply_slice(&slice))]
            }
            Change::SliceDeleted { namespace, name } => {
                m.endpoint_changes.inc();
                self.cache.delete_slice(&namespace, &name);
                Vec::new()
            }
            Change::AllServices(all) => {
                self.listed_services = true;
                self.full_pending = true;
                self.cache.replace_services(all.iter())
            }
            Change::AllSlices(all) => {
                self.listed_slices = true;
                self.full_pending = true;
                self.cache.replace_slices(all.iter())
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
        self.received.push(received);
        self.endpoints.health.queued();
    }

    /// Writes what changed since the last sync. `None` until both initial
    /// lists are in, or when nothing is pending.
    pub fn sync(&mut self) -> Option<SyncStats> {
        if !self.ready() || !self.pending() {
            return None;
        }
        let start = Instant::now();
        let flush = self.cache.flush();
        self.log_model(&flush);

        let full = std::mem::take(&mut self.full_pending);
        let frontends;
        let outcome = if full {
            let desired = self
                .cache
                .programmed()
                .map(|(fe, b, _)| (*fe, b.to_vec()))
                .collect::<std::collections::BTreeMap<_, _>>();
            frontends = desired.len();
            self.reconciler.reconcile(&desired)
        } else {
            let mut touched = flush.touched;
            touched.extend(std::mem::take(&mut self.failed));
            frontends = touched.len();
            let changes = touched.iter().map(|fe| (fe, self.cache.desired(fe)));
            self.reconciler.reconcile_some(changes.collect::<Vec<_>>())
        };
        self.failed = outcome.failed.iter().map(|(fe, _)| *fe).collect();
        let took = start.elapsed();
        let latency = self.received.iter().min().map_or(took, Instant::elapsed);
        self.record(full, &outcome, took);
        Some(SyncStats {
            full,
            frontends,
            outcome,
            took,
            latency,
        })
    }

    /// Deletes what waited for a grace period that has now passed.
    pub fn reap(&mut self) {
        let outcome = self.reconciler.reap();
        self.record_delete_errors(&outcome);
        if outcome.deleted > 0 {
            let m = &self.endpoints.metrics;
            m.backends_programmed
                .set(self.reconciler.maps().backends().len() as f64);
        }
    }

    /// Whether old revisions wait for a grace period (then [`Self::reap`]
    /// is worth calling soon).
    pub fn retiring(&self) -> bool {
        self.reconciler.retiring() > 0
    }

    fn record_delete_errors(&self, outcome: &Outcome) {
        for e in &outcome.delete_errors {
            self.endpoints.metrics.map_write_errors.inc();
            warn!(
                error = e as &dyn std::error::Error,
                "stale entry left for the next sync"
            );
        }
    }

    fn log_model(&mut self, flush: &crate::model::Flush) {
        for (svc, be) in &flush.excluded {
            if self.logged_exclusions.insert((svc.clone(), *be)) {
                self.endpoints.metrics.excluded_endpoints.inc();
                info!(service = %svc, endpoint = %be, "endpoint in excluded CIDR; not programmed");
            }
        }
        for (fe, svc) in &flush.passthrough {
            if self.logged_passthrough.insert(*fe) {
                info!(service = %svc, frontend = %fe, "all endpoints excluded; frontend left to its own CNI");
            }
        }
        for fe in &flush.touched {
            let Some((winner, _)) = self.cache.winner(fe) else {
                continue;
            };
            for loser in self.cache.losers(fe) {
                if self.logged_conflicts.insert((*fe, loser.clone())) {
                    warn!(frontend = %fe, owner = %winner, object = %loser, "frontend claimed by two Services; the first by name wins");
                }
            }
        }
    }

    fn record(&mut self, full: bool, outcome: &Outcome, took: Duration) {
        let m = &self.endpoints.metrics;
        for (fe, e) in &outcome.failed {
            match e.as_ref() {
                StoreError::Full { .. } => &m.map_full_errors,
                _ => &m.map_write_errors,
            }
            .inc();
            error!(frontend = %fe, error = e.as_ref() as &dyn std::error::Error, "not updated, keeps its previous state");
        }
        self.record_delete_errors(outcome);
        let now = Instant::now();
        for r in self.received.drain(..) {
            m.event_to_write.observe(now - r);
        }
        let wall = SystemTime::now();
        for t in self.triggers.drain(..) {
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
        let maps = self.reconciler.maps();
        m.frontends_programmed.set(maps.frontends().len() as f64);
        m.backends_programmed.set(maps.backends().len() as f64);
        m.services_programmed.set(self.cache.service_count() as f64);
        self.endpoints.health.updated();
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
