//! A ready-made test bed: namespaces, a cgroup, a pin directory, backends,
//! a manifest file, and the agent. Fields drop in declaration order, so the
//! agent stops first and the namespaces go last.

use std::{
    collections::BTreeSet,
    fs,
    net::Ipv4Addr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::Deserialize as _;

use crate::{
    agent::{Agent, PinDir},
    apiserver::ApiServer,
    cgroup::TestCgroup,
    netns::Topology,
    probe::{self, Churn, Held, HeldUdp, Report, Server},
    require_root, unique,
};

/// The client pod's address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

pub struct Bed {
    pub agent: Option<Agent>,
    pub pins: PinDir,
    pub cgroup: TestCgroup,
    servers: Vec<Server>,
    pub topo: Topology,
    pub client_ns: String,
    dir: PathBuf,
}

impl Bed {
    pub fn new() -> anyhow::Result<Self> {
        require_root();
        let name = unique("b");
        let mut topo = Topology::new(&name)?;
        let client_ns = topo.add_host("cl", CLIENT_IP)?;
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir)?;
        Ok(Self {
            agent: None,
            pins: PinDir::new(&name),
            cgroup: TestCgroup::new(&name)?,
            servers: Vec::new(),
            topo,
            client_ns,
            dir,
        })
    }

    pub fn manifest(&self) -> PathBuf {
        self.dir.join("services.yaml")
    }

    /// Replaces the manifest atomically (write + rename), so the agent never
    /// reads half a file.
    pub fn write_manifest(&self, yaml: &str) -> anyhow::Result<()> {
        let tmp = self.dir.join("services.yaml.tmp");
        fs::write(&tmp, yaml)?;
        fs::rename(&tmp, self.manifest())?;
        Ok(())
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
        Ok(())
    }

    /// Starts the agent on the current manifest and waits for its first sync.
    pub fn start_agent(&mut self, extra: &[&str]) -> anyhow::Result<&mut Agent> {
        let agent = self.spawn_agent(extra)?;
        agent.wait_syncs(1)?;
        Ok(agent)
    }

    /// Starts the agent on the current manifest without waiting for it.
    pub fn spawn_agent(&mut self, extra: &[&str]) -> anyhow::Result<&mut Agent> {
        let agent = Agent::start(
            &self.manifest(),
            self.cgroup.path(),
            self.pins.path(),
            extra,
        )?;
        Ok(self.agent.insert(agent))
    }

    pub fn agent(&mut self) -> &mut Agent {
        self.agent.as_mut().expect("agent started")
    }

    /// Starts the agent against a (stand-in) apiserver and waits for its
    /// first sync.
    pub fn start_agent_kube(
        &mut self,
        api: &ApiServer,
        extra: &[&str],
    ) -> anyhow::Result<&mut Agent> {
        let agent = self.spawn_agent_kube(api, extra)?;
        agent.wait_syncs(1)?;
        Ok(agent)
    }

    /// Starts the agent against a (stand-in) apiserver without waiting for it.
    pub fn spawn_agent_kube(
        &mut self,
        api: &ApiServer,
        extra: &[&str],
    ) -> anyhow::Result<&mut Agent> {
        let kubeconfig = self.dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig)?;
        let agent = Agent::start_kube(&kubeconfig, self.cgroup.path(), self.pins.path(), extra)?;
        Ok(self.agent.insert(agent))
    }

    /// Applies every document of `yaml` to the apiserver, then waits until
    /// the agent has written the change each Service and EndpointSlice
    /// among them causes. Each must pass the agent's watch filter, or no
    /// change ever comes: apply filtered objects with [`apply_yaml`].
    pub fn kube_apply(&mut self, api: &ApiServer, yaml: &str) -> anyhow::Result<()> {
        let before = self.agent().written()?;
        let watched = apply_yaml(api, yaml)?;
        self.agent().wait_written(before + watched)
    }

    /// Deletes an object from the apiserver and waits until the agent has
    /// written the change.
    pub fn kube_delete(
        &mut self,
        api: &ApiServer,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<()> {
        let before = self.agent().written()?;
        api.delete(kind, Some(namespace), name)?;
        self.agent().wait_written(before + 1)
    }

    /// Rewrites the manifest and waits until the running agent has
    /// written what it read (the file source sends three changes per
    /// read: all Services, all slices, this node's zone).
    pub fn update(&mut self, yaml: &str) -> anyhow::Result<()> {
        let before = self.agent().written()?;
        self.write_manifest(yaml)?;
        self.agent().wait_written(before + 3)
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

    pub fn pins_path(&self) -> &Path {
        self.pins.path()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
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
