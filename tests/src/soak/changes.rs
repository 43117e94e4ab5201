//! The workload's changes, as a cluster makes them: a Deployment's rolling
//! update, a Service created, a Service deleted, and a pod's process
//! stopping after its grace period.

use std::collections::VecDeque;

use super::{
    converge::{Kind, Want},
    cx::{Busy, Cx, Life, after},
    plan::draw,
    tasks::{Next, POLL_NS, Task},
    wire::{Phase, now_ns},
    world::{Cond, Endpoint},
};

/// A Deployment's rolling update (maxSurge 1, maxUnavailable 0), one pod
/// at a time: a new pod starts and its endpoint is added, ready; then an
/// old pod is deleted: its endpoint turns `ready: false, serving: true,
/// terminating: true`, and after a while leaves the slice; its process
/// stops after a grace period ([`StopPod`]).
pub(super) struct Rollout {
    svc: String,
    rng: fastrand::Rng,
    old: VecDeque<String>,
    step: RolloutStep,
}

enum RolloutStep {
    StartNew,
    Terminate,
    /// Remove the terminating endpoint of `pod`; `expect` is the change
    /// that took new requests away from it.
    Remove {
        pod: String,
        expect: Option<u64>,
    },
}

impl Rollout {
    /// Starts a rolling update of `svc`, which must be idle.
    pub(super) fn start(cx: &mut Cx<'_>, svc: &str, rng: fastrand::Rng, now: u64) -> Task {
        cx.busy.insert(svc.to_owned(), Busy::Rolling);
        cx.counts.rollouts += 1;
        cx.event(now, format!("rolling update of {svc}"));
        let old = cx
            .world
            .service(svc)
            .endpoints
            .iter()
            .map(|e| e.pod.clone())
            .collect();
        Task::Rollout(Rollout {
            svc: svc.to_owned(),
            rng,
            old,
            step: RolloutStep::StartNew,
        })
    }

    pub(super) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        let svc = self.svc.as_str();
        match std::mem::replace(&mut self.step, RolloutStep::StartNew) {
            RolloutStep::StartNew => {
                let (pod, ip) = cx.world.new_pod(svc);
                let shape = cx.world.service(svc).shape;
                let took = cx.pods.start(&mut cx.bed.topo, &pod, ip, shape)?;
                cx.counts.pod_starts.push(took);
                let now = now_ns();
                cx.lives.insert(
                    pod.clone(),
                    Life {
                        added_ns: now,
                        gone_ns: None,
                    },
                );
                cx.world.service_mut(svc).endpoints.push(Endpoint {
                    pod,
                    ip,
                    cond: Cond::Ready,
                });
                cx.publish_slice(svc, Kind::EndpointReady)?;
                self.step = RolloutStep::Terminate;
                Ok(Next::At(after(now, draw(&mut self.rng, cx.plan.surge))))
            }
            RolloutStep::Terminate => {
                let pod = self.old.pop_front().expect("an old pod left to replace");
                let ep = cx
                    .world
                    .service_mut(svc)
                    .endpoint_mut(&pod)
                    .expect("the old pod's endpoint");
                ep.cond = Cond::Terminating;
                let expect = cx.publish_slice(svc, Kind::EndpointTerminating)?;
                self.step = RolloutStep::Remove { pod, expect };
                Ok(Next::At(after(
                    now,
                    draw(&mut self.rng, cx.plan.terminating),
                )))
            }
            RolloutStep::Remove { pod, expect } => {
                cx.world.service_mut(svc).endpoints.retain(|e| e.pod != pod);
                // Its endpoint no longer served new requests: no change
                // the maps can show (unless that was the last serving one).
                cx.publish_slice(svc, Kind::EndpointTerminating)?;
                cx.counts.pods_replaced += 1;
                let grace = draw(&mut self.rng, cx.plan.grace);
                cx.spawned
                    .push(Task::StopPod(StopPod::new(pod, expect, after(now, grace))));
                if self.old.is_empty() {
                    cx.busy.remove(svc);
                    cx.event(now, format!("rolling update of {svc} done"));
                    return Ok(Next::Done);
                }
                Ok(Next::At(now))
            }
        }
    }
}

/// A pod's process stops once the agent has stopped sending it new
/// requests (the change `gate` is programmed) and its grace period is
/// over; then its namespace goes.
pub(super) struct StopPod {
    pod: String,
    gate: Option<u64>,
    not_before: u64,
}

impl StopPod {
    pub(super) fn new(pod: String, gate: Option<u64>, not_before: u64) -> Self {
        Self {
            pod,
            gate,
            not_before,
        }
    }

    pub(super) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        let gone = match self.gate {
            Some(id) => cx.observer.tracker().resolved(id),
            None => Some(now),
        };
        let Some(gone) = gone else {
            return Ok(Next::At(now + POLL_NS));
        };
        if now < self.not_before {
            return Ok(Next::At(self.not_before));
        }
        if let Some(life) = cx.lives.get_mut(&self.pod) {
            life.gone_ns.get_or_insert(gone);
        }
        cx.pods.stop(&mut cx.bed.topo, &self.pod)?;
        Ok(Next::Done)
    }
}

/// A Service created with its pods: the pods start, the clients start
/// sending to it (counted as "creating"), the Service and its slice are
/// applied; once the maps show it, it is stable.
pub(super) struct Create {
    svc: String,
    expect: Option<u64>,
}

impl Create {
    pub(super) fn start(cx: &mut Cx<'_>, now: u64) -> Task {
        let svc = cx.world.add_service();
        cx.busy.insert(svc.clone(), Busy::Creating);
        cx.counts.created += 1;
        cx.event(now, format!("creating Service {svc}"));
        Task::Create(Create { svc, expect: None })
    }

    pub(super) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        let svc = self.svc.as_str();
        if let Some(id) = self.expect {
            if cx.observer.tracker().resolved(id).is_none() {
                return Ok(Next::At(now + POLL_NS));
            }
            cx.clients.phase(svc, Phase::Stable)?;
            cx.busy.remove(svc);
            cx.event(now, format!("Service {svc} programmed"));
            return Ok(Next::Done);
        }
        for _ in 0..cx.plan.replicas {
            let (pod, ip) = cx.world.new_pod(svc);
            let shape = cx.world.service(svc).shape;
            let took = cx.pods.start(&mut cx.bed.topo, &pod, ip, shape)?;
            cx.counts.pod_starts.push(took);
            cx.world.service_mut(svc).endpoints.push(Endpoint {
                pod,
                ip,
                cond: Cond::Ready,
            });
        }
        let now = now_ns();
        let s = cx.world.service(svc);
        for e in &s.endpoints {
            cx.lives.insert(
                e.pod.clone(),
                Life {
                    added_ns: now,
                    gone_ns: None,
                },
            );
        }
        cx.clients.add(s, Phase::Creating)?;
        let want = Want::Serving(s.frontends());
        self.expect =
            Some(
                cx.observer
                    .tracker()
                    .expect(Kind::ServiceCreated, svc, s.vip, want, now),
            );
        // As in a cluster: the Service, then (the endpoint slice controller)
        // its slice, back to back.
        cx.api.apply(s.service_object())?;
        cx.api.apply(s.slice_object())?;
        Ok(Next::At(now + POLL_NS))
    }
}

/// A Service deleted: the clients count its requests as "deleting" from
/// now; the Service and its slice go; once the maps no longer have it, the
/// clients stop sending to it and its pods stop after their grace period.
pub(super) struct Delete {
    svc: String,
    rng: fastrand::Rng,
    step: DeleteStep,
}

enum DeleteStep {
    Start,
    Ack(u64),
    Gone(u64),
}

impl Delete {
    pub(super) fn start(cx: &mut Cx<'_>, svc: &str, rng: fastrand::Rng, now: u64) -> Task {
        cx.busy.insert(svc.to_owned(), Busy::Deleting);
        cx.counts.deleted += 1;
        cx.event(now, format!("deleting Service {svc}"));
        Task::Delete(Delete {
            svc: svc.to_owned(),
            rng,
            step: DeleteStep::Start,
        })
    }

    pub(super) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        let svc = self.svc.as_str();
        match self.step {
            DeleteStep::Start => {
                self.step = DeleteStep::Ack(cx.clients.phase(svc, Phase::Deleting)?);
                Ok(Next::At(now + POLL_NS / 10))
            }
            DeleteStep::Ack(seq) => {
                if !cx.clients.acked(seq) {
                    return Ok(Next::At(now + POLL_NS / 10));
                }
                self.step = DeleteStep::Gone(cx.delete_service(svc)?);
                Ok(Next::At(now + POLL_NS))
            }
            DeleteStep::Gone(id) => {
                if cx.observer.tracker().resolved(id).is_none() {
                    return Ok(Next::At(now + POLL_NS));
                }
                cx.clients.remove(svc)?;
                let s = cx.world.services.remove(svc).expect("the Service deleted");
                for e in s.endpoints {
                    let grace = draw(&mut self.rng, cx.plan.grace);
                    cx.spawned.push(Task::StopPod(StopPod::new(
                        e.pod,
                        Some(id),
                        after(now, grace),
                    )));
                }
                cx.busy.remove(svc);
                cx.event(now, format!("Service {svc} gone from the maps"));
                Ok(Next::Done)
            }
        }
    }
}
