//! The soak's backend pods: a network namespace and an `lbt serve` process
//! each, answering with the pod's name, started and stopped as the
//! Deployments roll.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use crate::{netns::Topology, probe::Server};

use super::world::Shape;

struct Pod {
    ns: String,
    server: Server,
}

/// The pods running now, by name.
#[derive(Default)]
pub(super) struct Pods {
    live: BTreeMap<String, Pod>,
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
        topo.remove_host(&pod.ns)
    }

    pub(super) fn count(&self) -> usize {
        self.live.len()
    }
}
