//! The real `lb-agent` binary as a child process, and its pin directory.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

pub fn agent_bin() -> PathBuf {
    crate::sibling_binary("lb-agent", "LB_AGENT_BIN")
}

/// A pin directory on bpffs; `lb-agent cleanup` runs on drop, which
/// detaches the programs and removes the maps.
pub struct PinDir {
    path: PathBuf,
}

impl PinDir {
    pub fn new(name: &str) -> Self {
        Self {
            path: Path::new("/sys/fs/bpf").join(name),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn dump(&self) -> anyhow::Result<String> {
        let out = Command::new(agent_bin())
            .args(["dump", "--bpffs-dir"])
            .arg(&self.path)
            .output()?;
        if !out.status.success() {
            bail!("lb-agent dump: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?)
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        if !self.path.exists() {
            return;
        }
        let ok = Command::new(agent_bin())
            .args(["cleanup", "--bpffs-dir"])
            .arg(&self.path)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "warning: lb-agent cleanup failed for {}",
                self.path.display()
            );
        }
    }
}

/// A running `lb-agent run`. Its stderr is collected for assertions.
pub struct Agent {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    pub fn start(
        manifest: &Path,
        cgroup: &Path,
        pins: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut child = Command::new(agent_bin())
            .arg("run")
            .arg("--from-file")
            .arg(manifest)
            .arg("--cgroup-path")
            .arg(cgroup)
            .arg("--bpffs-dir")
            .arg(pins)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning lb-agent")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("log lock").push(line);
            }
        });
        Ok(Self { child, log })
    }

    /// Number of completed syncs so far.
    pub fn syncs(&self) -> usize {
        self.log
            .lock()
            .expect("log lock")
            .iter()
            .filter(|l| l.contains("sync complete"))
            .count()
    }

    /// Waits until at least `n` syncs completed.
    pub fn wait_syncs(&mut self, n: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.syncs() < n {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "lb-agent exited ({status}) before sync {n}:\n{}",
                    self.log_text()
                );
            }
            if Instant::now() > deadline {
                bail!("lb-agent did not reach sync {n}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    pub fn log_text(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits; returns whether it exited successfully.
    pub fn terminate(&mut self) -> anyhow::Result<bool> {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        Ok(self.child.wait()?.success())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}
