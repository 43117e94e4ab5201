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

impl PinDir {
    /// `lb-agent dump --stats`: each datapath counter by name.
    pub fn stats(&self) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
        let out = Command::new(agent_bin())
            .args(["dump", "--stats", "--bpffs-dir"])
            .arg(&self.path)
            .output()?;
        if !out.status.success() {
            bail!(
                "lb-agent dump --stats: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        String::from_utf8(out.stdout)?
            .lines()
            .map(|l| {
                let (name, n) = l.split_once(' ').context("a counter line")?;
                Ok((name.to_owned(), n.trim().parse()?))
            })
            .collect()
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
    /// `lb-agent run --from-file manifest`.
    pub fn start(
        manifest: &Path,
        cgroup: &Path,
        pins: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut args = vec![std::ffi::OsStr::new("--from-file"), manifest.as_os_str()];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        Self::spawn(&args, cgroup, pins)
    }

    /// `lb-agent run --kubeconfig kubeconfig`, as node `node-1`.
    pub fn start_kube(
        kubeconfig: &Path,
        cgroup: &Path,
        pins: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut args = vec![
            std::ffi::OsStr::new("--kubeconfig"),
            kubeconfig.as_os_str(),
            std::ffi::OsStr::new("--hostname-override=node-1"),
        ];
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        Self::spawn(&args, cgroup, pins)
    }

    fn spawn(args: &[&std::ffi::OsStr], cgroup: &Path, pins: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(agent_bin())
            .arg("run")
            .args(args)
            // Ephemeral loopback ports, so agents of parallel tests never clash.
            .args([
                "--metrics-bind-address=127.0.0.1:0",
                "--healthz-bind-address=127.0.0.1:0",
            ])
            .arg("--cgroup-path")
            .arg(cgroup)
            .arg("--bpffs-dir")
            .arg(pins)
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

    /// Waits until a log line contains `needle`.
    pub fn wait_log(&mut self, needle: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self
            .log
            .lock()
            .expect("log lock")
            .iter()
            .any(|l| l.contains(needle))
        {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "lb-agent exited ({status}) before logging {needle:?}:\n{}",
                    self.log_text()
                );
            }
            if Instant::now() > deadline {
                bail!("lb-agent did not log {needle:?}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The address `field` (`metrics` or `healthz`) was bound to, from the log.
    pub fn bound(&mut self, field: &str) -> anyhow::Result<std::net::SocketAddr> {
        self.wait_log("serving /metrics", Duration::from_secs(20))?;
        let log = self.log_text();
        let key = format!("{field}=");
        let line = log
            .lines()
            .find(|l| l.contains("serving /metrics"))
            .unwrap_or_default();
        let value = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&key))
            .with_context(|| format!("no {key} in {line:?}"))?;
        Ok(value.parse()?)
    }

    /// GET `path` from the agent's `field` listener: (status, body).
    pub fn http_get(&mut self, field: &str, path: &str) -> anyhow::Result<(u16, String)> {
        crate::http::get(self.bound(field)?, path)
    }

    /// The value of one sample (`name` with its labels, as printed) on /metrics.
    pub fn metric(&mut self, sample: &str) -> anyhow::Result<f64> {
        let (status, body) = self.http_get("metrics", "/metrics")?;
        anyhow::ensure!(status == 200, "/metrics answered {status}");
        crate::http::sample(&body, sample)
            .with_context(|| format!("no sample {sample:?} in /metrics:\n{body}"))
    }

    pub fn log_text(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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
