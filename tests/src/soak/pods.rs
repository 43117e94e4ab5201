//! The soak's backend pods: a network namespace and an `lbt serve` process
//! each, answering with the pod's name, started and stopped as the
//! Deployments roll.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use crate::{netns::Topology, probe::Server, snmp::Counters};

use super::world::Shape;

struct Pod {
    ns: String,
    server: Server,
}

/// The pods running now, by name.
#[derive(Default)]
pub(super) struct Pods {
    live: BTreeMap<String, Pod>,
    /// The kernel's counters of the pods stopped so far, read just before
    /// their namespace went (a namespace starts with every counter at 0).
    gone: BTreeMap<String, Counters>,
}

impl Pods {
    /// Starts pod `name` at `ip`; returns once it listens, with how long
    /// that took.
    pub(super) fn start(
        &mut self,
        topo: &mut Topology,
        name: &str,
        ip: Ipv4Addr,
        shape: Shape,
    ) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let ns = topo.add_host(name, ip)?;
        let (tcp, udp) = shape.listens();
        let server = Server::start(&ns, name, &tcp, &udp)?;
        self.live.insert(name.to_owned(), Pod { ns, server });
        Ok(t.elapsed())
    }

    /// Stops pod `name`'s process, then removes its namespace.
    pub(super) fn stop(&mut self, topo: &mut Topology, name: &str) -> anyhow::Result<()> {
        let Some(pod) = self.live.remove(name) else {
            anyhow::bail!("no pod {name} is running");
        };
        drop(pod.server);
        // A pod whose counters cannot be read loses only its line in the
        // report.
        if let Ok(c) = Counters::of(&pod.ns) {
            self.gone.insert(name.to_owned(), c);
        }
        topo.remove_host(&pod.ns)
    }

    /// The kernel's counters of every pod that ran: the stopped ones' as
    /// they were when they stopped, the running ones' now.
    pub(super) fn counters(&self) -> anyhow::Result<BTreeMap<String, Counters>> {
        let mut all = self.gone.clone();
        for (name, pod) in &self.live {
            all.insert(name.clone(), Counters::of(&pod.ns)?);
        }
        Ok(all)
    }

    pub(super) fn count(&self) -> usize {
        self.live.len()
    }
}
