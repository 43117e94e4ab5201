//! The agent rig: one real `lb-agent` and what it runs on (its pin
//! directory, its test cgroup, a directory for its manifest and
//! kubeconfig), with the ways tests start it and follow it.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let mut rig = lb_tests::rig::Rig::new(&lb_tests::unique("x"))?;
//! rig.write_manifest("---\n")?;
//! rig.start_agent(&["--map-prune-interval", "1s"])?; // and its first sync awaited
//! let syncs = rig.agent().metric(lb_tests::agent::SYNCS)?;
//! let dump = rig.pins.dump()?;
//! rig.agent().kill();
//! # Ok(()) }
//! ```
//!
//! Fields drop in declaration order: the agent stops before its pins are
//! cleaned up (`lb-agent cleanup`) and before its cgroup goes.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::{
    agent::{Agent, KUBE_NODE, PinDir},
    apiserver::ApiServer,
    cgroup::TestCgroup,
    require_root,
    scenario::apply_yaml,
};

/// One agent and what it runs on; see the module docs.
pub struct Rig {
    /// The running agent, once started.
    pub agent: Option<Agent>,
    pub pins: PinDir,
    pub cgroup: TestCgroup,
    /// Holds the manifest and the kubeconfig; removed on drop.
    dir: PathBuf,
    /// The network namespace (under /run/netns) the agent runs in; `None`:
    /// the test's own.
    netns: Option<String>,
}

impl Rig {
    /// Pins `/sys/fs/bpf/<name>`, cgroup `<name>`, and a temporary
    /// directory `<name>`; `name` should come from [`crate::unique`]. Fails
    /// loudly without root.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        require_root();
        let dir = std::env::temp_dir().join(name);
        fs::create_dir_all(&dir)?;
        Ok(Self {
            agent: None,
            pins: PinDir::new(name),
            cgroup: TestCgroup::new(name)?,
            dir,
            netns: None,
        })
    }

    /// A rig whose agents run inside network namespace `netns`, as a
    /// node's agent runs in its host's (see [`Agent::start_in`]).
    pub fn in_netns(name: &str, netns: &str) -> anyhow::Result<Self> {
        let mut rig = Self::new(name)?;
        rig.netns = Some(netns.to_owned());
        Ok(rig)
    }

    /// The file the agent reads with `--from-file`.
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

    /// Starts the agent on the current manifest and waits for its first sync.
    pub fn start_agent(&mut self, extra: &[&str]) -> anyhow::Result<&mut Agent> {
        let agent = self.spawn_agent(extra)?;
        agent.wait_syncs(1)?;
        Ok(agent)
    }

    /// Starts the agent on the current manifest without waiting for it.
    pub fn spawn_agent(&mut self, extra: &[&str]) -> anyhow::Result<&mut Agent> {
        let agent = self.launch(extra)?;
        Ok(self.agent.insert(agent))
    }

    /// Starts an agent on the current manifest without waiting for it or
    /// keeping it, for a test that holds its agents itself (several at once,
    /// or across a restart).
    pub fn launch(&self, extra: &[&str]) -> anyhow::Result<Agent> {
        let (manifest, cgroup, pins) = (&self.manifest(), self.cgroup.path(), self.pins.path());
        match &self.netns {
            Some(ns) => Agent::start_in(ns, manifest, cgroup, pins, extra),
            None => Agent::start(manifest, cgroup, pins, extra),
        }
    }

    /// The running agent; panics if it was never started.
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

    /// Starts the agent against a (stand-in) apiserver without waiting for
    /// it. Its Node ([`KUBE_NODE`]) is registered first, bare, unless the
    /// apiserver has it: a DaemonSet's pod runs on a registered Node, and
    /// without one the agent's first sync waits for it (30 s).
    pub fn spawn_agent_kube(
        &mut self,
        api: &ApiServer,
        extra: &[&str],
    ) -> anyhow::Result<&mut Agent> {
        if api.get("Node", None, KUBE_NODE).is_none() {
            api.apply(lb_fixtures::json(lb_fixtures::Node::new(KUBE_NODE)))?;
        }
        self.spawn_agent_kube_unregistered(api, extra)
    }

    /// [`Self::spawn_agent_kube`] without registering its Node, for what the
    /// agent does without it.
    pub fn spawn_agent_kube_unregistered(
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

    pub fn pins_path(&self) -> &Path {
        self.pins.path()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}
