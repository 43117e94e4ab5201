//! A ready-made test bed: an agent [`Rig`] (pins, cgroup, manifest, the
//! agent), a star [`Topology`] of namespaces with a client pod, and
//! backends. Fields drop in declaration order, so the agent stops first and
//! the namespaces go last.

use std::{
    collections::BTreeSet,
    net::Ipv4Addr,
    ops::{Deref, DerefMut},
    time::{Duration, Instant},
};

use serde::Deserialize as _;

use crate::{
    apiserver::ApiServer,
    netns::Topology,
    probe::{self, Churn, Held, HeldUdp, Report, Server},
    rig::Rig,
    unique,
};

/// The client pod's address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

pub struct Bed {
    rig: Rig,
    servers: Vec<Server>,
    pub topo: Topology,
    pub client_ns: String,
    /// The namespaces of the backends added with [`Self::backend`].
    pub backend_nss: Vec<String>,
}

/// A bed is its agent's rig with namespaces and backends around it: the
/// rig's fields and methods (`bed.agent`, `bed.pins`, `bed.start_agent`,
/// ...) are the bed's.
impl Deref for Bed {
    type Target = Rig;

    fn deref(&self) -> &Rig {
        &self.rig
    }
}

impl DerefMut for Bed {
    fn deref_mut(&mut self) -> &mut Rig {
        &mut self.rig
    }
}

impl Bed {
    pub fn new() -> anyhow::Result<Self> {
        let name = unique("b");
        let rig = Rig::new(&name)?;
        let mut topo = Topology::new(&name)?;
        let client_ns = topo.add_host("cl", CLIENT_IP)?;
        Ok(Self {
            rig,
            servers: Vec::new(),
            topo,
            client_ns,
            backend_nss: Vec::new(),
        })
    }

    /// Adds a pod `id` at `ip` answering on the given ports.
    pub fn backend(
        &mut self,
        id: &str,
        ip: Ipv4Addr,
        tcp: &[u16],
        udp: &[u16],
    ) -> anyhow::Result<()> {
        let ns = self.topo.add_host(id, ip)?;
        self.servers.push(Server::start(&ns, id, tcp, udp)?);
        self.backend_nss.push(ns);
        Ok(())
    }

    /// Adds another client pod `id` at `ip` (its own network namespace, in
    /// the test cgroup); returns its namespace, for [`Self::tcp_from`].
    pub fn client_pod(&mut self, id: &str, ip: Ipv4Addr) -> anyhow::Result<String> {
        self.topo.add_host(id, ip)
    }

    pub fn tcp(&self, to: &str, n: u32) -> anyhow::Result<Report> {
        self.tcp_from(&self.client_ns, to, n)
    }

    /// `n` short TCP connections from the pod whose namespace is `ns`.
    pub fn tcp_from(&self, ns: &str, to: &str, n: u32) -> anyhow::Result<Report> {
        probe::client(
            ns,
            self.cgroup.path(),
            &["tcp", "--to", to, "-n", &n.to_string()],
        )
    }

    pub fn udp(&self, to: &str, n: u32, connected: bool) -> anyhow::Result<Report> {
        self.udp_from(&self.client_ns, to, n, connected)
    }

    /// `n` UDP requests from the pod whose namespace is `ns`.
    pub fn udp_from(&self, ns: &str, to: &str, n: u32, connected: bool) -> anyhow::Result<Report> {
        let n = n.to_string();
        let mut args = vec!["udp", "--to", to, "-n", &n];
        if connected {
            args.push("--connected");
        }
        probe::client(ns, self.cgroup.path(), &args)
    }

    /// A long-lived connected UDP socket in the client pod.
    pub fn hold_udp(&self, to: &str) -> anyhow::Result<HeldUdp> {
        HeldUdp::open(&self.client_ns, self.cgroup.path(), to)
    }

    pub fn hold(&self, to: &str) -> anyhow::Result<Held> {
        Held::open(&self.client_ns, self.cgroup.path(), to)
    }

    pub fn churn(&self, to: &str) -> anyhow::Result<Churn> {
        Churn::start(&self.client_ns, self.cgroup.path(), to)
    }

    /// Waits (up to 5 s) until 40 connections to `to` reach exactly the
    /// backends `expected`, every one succeeding.
    pub fn until_reached(&self, to: &str, expected: &[&str]) -> anyhow::Result<()> {
        let expected: BTreeSet<&str> = expected.iter().copied().collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let r = self.tcp(to, 40)?;
            anyhow::ensure!(r.failed() == 0, "{to}: {r:?}");
            let now: BTreeSet<&str> = r.replies.keys().map(String::as_str).collect();
            if now == expected {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{to} reaches {now:?}, not {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Applies every document of a multi-document YAML string to `api`;
/// returns how many were Services or EndpointSlices (what the agent
/// watches).
pub fn apply_yaml(api: &ApiServer, yaml: &str) -> anyhow::Result<u64> {
    let mut watched = 0;
    for doc in yaml_serde::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        watched += u64::from(matches!(
            value["kind"].as_str(),
            Some("Service" | "EndpointSlice")
        ));
        api.apply(value)?;
    }
    Ok(watched)
}
