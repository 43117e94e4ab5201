//! The soak's shared state while it runs: the test bed, the stand-in
//! apiserver, the clients, the world and its pods, and the record of what
//! was done when. The tasks (`tracks.rs`, `changes.rs`) act through it.

use std::{collections::BTreeMap, time::Duration};

use super::{
    clients::Clients,
    converge::{Kind, Want},
    observe::Observer,
    plan::Plan,
    pods::Pods,
    tasks::Task,
    wire::now_ns,
    world::{NAMESPACE, World},
};
use crate::{apiserver::ApiServer, scenario::Bed};

/// A pod's time in its Service: from its endpoint's first appearance in
/// the apiserver until the maps stopped sending new requests to it.
#[derive(Clone, Debug)]
pub struct Life {
    pub added_ns: u64,
    pub gone_ns: Option<u64>,
}

/// What a Service is busy with; it takes one change at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Busy {
    Rolling,
    Creating,
    Deleting,
}

/// One agent process's life.
#[derive(Clone, Debug, Default)]
pub struct AgentLife {
    pub pid: u32,
    pub started_ns: u64,
    /// Its first sync, as its `/metrics` showed it.
    pub first_sync_ns: Option<u64>,
    pub killed_ns: Option<u64>,
    /// Sampled from `/proc` just before the SIGKILL (or at the end).
    pub rss_kib: Option<u64>,
    pub fds: Option<usize>,
    /// Its syncs and destroyed stale UDP sockets (`/metrics`), last read.
    pub syncs: Option<f64>,
    pub udp_destroyed: Option<f64>,
    /// Its log (stderr), for looking into what the report shows.
    pub log: String,
}

/// What was done, counted.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub rollouts: u64,
    pub pods_replaced: u64,
    pub created: u64,
    pub deleted: u64,
    /// Apiserver outages: how long each lasted.
    pub outages: Vec<Duration>,
    pub relists: u64,
    /// Changes the maps could not show (an endpoint removed after it
    /// stopped serving): applied, not timed.
    pub invisible_changes: u64,
    /// After each disturbance (agent restart, apiserver back, forced
    /// relist): when the agent could see changes again, and when the
    /// apiserver saw it watching both Services and EndpointSlices again.
    pub back: Vec<(Kind, u64, Option<u64>)>,
    /// How long each pod took to start (namespace, process, listening).
    pub pod_starts: Vec<Duration>,
    /// How late each task step ran after its time (one thread runs them
    /// all, and starting a pod takes a while).
    pub late_ns: Vec<u64>,
}

pub(super) struct Cx<'a> {
    pub plan: &'a Plan,
    pub bed: &'a mut Bed,
    pub api: &'a ApiServer,
    pub observer: &'a Observer,
    pub clients: &'a mut Clients,
    pub world: World,
    pub pods: Pods,
    pub lives: BTreeMap<String, Life>,
    pub busy: BTreeMap<String, Busy>,
    pub agents: Vec<AgentLife>,
    pub counts: Counts,
    /// What happened when, for the report: (time, what).
    pub events: Vec<(u64, String)>,
    /// Tasks started by other tasks, for the loop to pick up.
    pub spawned: Vec<Task>,
    /// Past the end of the run: the tracks wind down.
    pub ending: bool,
}

impl Cx<'_> {
    pub(super) fn event(&mut self, now: u64, what: String) {
        self.events.push((now, what));
    }

    /// Records the change of `svc` the world now holds as an expectation
    /// (if the maps must change at all), then applies its EndpointSlice.
    /// Returns the expectation. The change is timed from now, whatever the
    /// caller was doing before.
    pub(super) fn publish_slice(&mut self, svc: &str, kind: Kind) -> anyhow::Result<Option<u64>> {
        let s = self.world.service(svc);
        let want = Want::Serving(s.frontends());
        let id = {
            let mut t = self.observer.tracker();
            if t.wants().get(&s.vip) == Some(&want) {
                None
            } else {
                Some(t.expect(kind, svc, s.vip, want, now_ns()))
            }
        };
        if id.is_none() {
            self.counts.invisible_changes += 1;
        }
        self.api.apply(s.slice_object())?;
        Ok(id)
    }

    /// Deletes `svc`'s Service and slice from the apiserver; returns the
    /// expectation that its cluster IP goes.
    pub(super) fn delete_service(&mut self, svc: &str) -> anyhow::Result<u64> {
        let now = now_ns();
        let s = self.world.service(svc);
        let id =
            self.observer
                .tracker()
                .expect(Kind::ServiceDeleted, svc, s.vip, Want::Absent, now);
        // As in a cluster: the Service goes, its slice follows.
        self.api.delete("Service", Some(NAMESPACE), svc)?;
        self.api
            .delete("EndpointSlice", Some(NAMESPACE), &s.slice_name())?;
        Ok(id)
    }

    /// Services free for a new change.
    pub(super) fn idle_services(&self) -> Vec<String> {
        self.world
            .services
            .keys()
            .filter(|s| !self.busy.contains_key(*s))
            .cloned()
            .collect()
    }
}

/// `now` plus `d`, in nanoseconds.
pub(super) fn after(now: u64, d: Duration) -> u64 {
    now + d.as_nanos() as u64
}
