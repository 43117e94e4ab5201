//! The golden scenarios (`lb_fixtures::golden`, `tests/scenarios/*.txtar`)
//! through the real agent: it runs with `--from-file` on a manifest
//! rewritten at every step; after each change the runner waits until the
//! agent has written it (`/metrics`) and its grace periods have passed,
//! then reads `lb-agent dump`. `lb-agent`'s tests run the same scenarios
//! through its pure pipeline in-process.

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use lb_fixtures::golden::{self, Executor};

use crate::{
    agent::{Agent, PinDir},
    cgroup::TestCgroup,
    require_root, unique,
};

/// Runs one scenario file; fails with every mismatch, each as a diff.
pub fn run(path: &Path) -> anyhow::Result<()> {
    require_root();
    golden::run(path, &mut Rig::new()?)
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The agent and what it runs on. Fields drop in order: the agent stops
/// before its pins are cleaned up and its cgroup goes.
struct Rig {
    agent: Option<Agent>,
    pins: PinDir,
    cgroup: TestCgroup,
    dir: TempDir,
}

/// How long the agent's grace periods may take to pass.
const SETTLE: Duration = Duration::from_secs(10);

impl Rig {
    fn new() -> anyhow::Result<Self> {
        let name = unique("g");
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir)?;
        Ok(Self {
            agent: None,
            pins: PinDir::new(&name),
            cgroup: TestCgroup::new(&name)?,
            dir: TempDir(dir),
        })
    }

    fn manifest(&self) -> PathBuf {
        self.dir.0.join("objects.yaml")
    }

    /// Writes the manifest atomically.
    fn write(&self, text: &str) -> anyhow::Result<()> {
        let tmp = self.dir.0.join("objects.yaml.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, self.manifest())?;
        Ok(())
    }

    fn agent(&mut self) -> anyhow::Result<&mut Agent> {
        self.agent
            .as_mut()
            .context("the agent is not started (`agent`)")
    }
}

impl Executor for Rig {
    fn start(&mut self, manifest: &str, flags: &[String]) -> anyhow::Result<()> {
        self.write(manifest)?;
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut agent = Agent::start(
            &self.manifest(),
            self.cgroup.path(),
            self.pins.path(),
            &flags,
        )?;
        agent.wait_written(2)?;
        self.agent = Some(agent);
        Ok(())
    }

    /// Writes the manifest and waits until the agent has written what it
    /// read.
    fn update(&mut self, manifest: &str) -> anyhow::Result<()> {
        let before = self.agent()?.written()?;
        self.write(manifest)?;
        // The file source sends three changes per read: Services, slices,
        // this node's zone.
        self.agent()?.wait_written(before + 3)
    }

    /// The dump once no revision waits for its grace period (until then
    /// the slot and backend counts still include them).
    fn dump(&mut self) -> anyhow::Result<String> {
        self.agent()?;
        let deadline = Instant::now() + SETTLE;
        loop {
            let dump = self.pins.dump()?;
            if dump.contains("; 0 revisions retired") {
                return Ok(dump);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "retired revisions never reaped:\n{dump}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn metric(&mut self, sample: &str) -> anyhow::Result<f64> {
        self.agent()?.metric(sample)
    }
}
