//! The golden scenarios (`lb_fixtures::golden`, `tests/scenarios/*.txtar`)
//! through the real agent: it runs with `--from-file` on a manifest
//! rewritten at every step; after each change the runner waits until the
//! agent has written it (`/metrics`) and its grace periods have passed,
//! then reads `lb-agent dump`. `lb-agent`'s tests run the same scenarios
//! through its pure pipeline in-process.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use lb_fixtures::golden::{self, Executor};

use crate::{agent::Agent, rig::Rig, unique};

/// Runs one scenario file; fails with every mismatch, each as a diff.
pub fn run(path: &Path) -> anyhow::Result<()> {
    golden::run(path, &mut Golden(Rig::new(&unique("g"))?))
}

/// The scenario's agent on a [`Rig`].
struct Golden(Rig);

/// How long the agent's grace periods may take to pass.
const SETTLE: Duration = Duration::from_secs(10);

impl Golden {
    fn agent(&mut self) -> anyhow::Result<&mut Agent> {
        self.0
            .agent
            .as_mut()
            .context("the agent is not started (`agent`)")
    }
}

impl Executor for Golden {
    fn start(&mut self, manifest: &str, flags: &[String]) -> anyhow::Result<()> {
        self.0.write_manifest(manifest)?;
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        self.0.spawn_agent(&flags)?.wait_written(2)
    }

    /// Writes the manifest and waits until the agent has written what it
    /// read.
    fn update(&mut self, manifest: &str) -> anyhow::Result<()> {
        self.agent()?;
        self.0.update(manifest)
    }

    /// The dump once no revision waits for its grace period (until then
    /// the slot and backend counts still include them).
    fn dump(&mut self) -> anyhow::Result<String> {
        self.agent()?;
        let deadline = Instant::now() + SETTLE;
        loop {
            let dump = self.0.pins.dump()?;
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
