//! The real `lb-agent` binary as a child process, and its pin directory.

use std::{
    collections::BTreeMap,
    ffi::OsStr,
    io::{BufRead, BufReader},
    net::SocketAddr,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::metrics::Metrics;

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

    /// Takes over a pin directory left by another process, to clean it up.
    pub(crate) fn adopt(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn dump(&self) -> anyhow::Result<String> {
        self.dump_with(&[])
    }

    /// `lb-agent dump` with `flags`: its output.
    fn dump_with(&self, flags: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(agent_bin())
            .arg("dump")
            .args(flags)
            .arg("--bpffs-dir")
            .arg(&self.path)
            .output()?;
        if !out.status.success() {
            bail!(
                "lb-agent dump {}: {}",
                flags.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8(out.stdout)?)
    }

    /// `lb-agent dump --conntrack`.
    pub fn conntrack(&self) -> anyhow::Result<String> {
        self.dump_with(&["--conntrack"])
    }

    /// `lb-agent dump --dsr`: which node each address is on, and the DSR
    /// frontends' endpoints on this node.
    pub fn dsr(&self) -> anyhow::Result<String> {
        self.dump_with(&["--dsr"])
    }

    /// `lb-agent dump --stats`: the datapath counters.
    pub fn stats(&self) -> anyhow::Result<Stats> {
        Stats::parse(&self.dump_with(&["--stats"])?)
    }

    /// `lb-agent cleanup`: detaches the programs and removes the maps, as
    /// a node's reboot leaves its bpffs empty. The directory can be used
    /// again. Nothing to do if it does not exist.
    pub fn clean_up(&self) -> anyhow::Result<()> {
        if !self.path.exists() {
            return Ok(());
        }
        let status = Command::new(agent_bin())
            .args(["cleanup", "--bpffs-dir"])
            .arg(&self.path)
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("lb-agent cleanup {}: {status}", self.path.display());
        }
        Ok(())
    }
}

/// The datapath counters `lb-agent dump --stats` printed, each by its
/// labels (hook, direction, family, reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats(BTreeMap<[String; 4], u64>);

impl Stats {
    fn parse(dump: &str) -> anyhow::Result<Self> {
        let mut out = BTreeMap::new();
        for line in dump.lines().filter(|l| !l.starts_with('#')) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [hook, dir, family, reason, n] = fields[..] else {
                bail!("a counter line of five fields: {line:?}");
            };
            let labels = [hook, dir, family, reason].map(str::to_owned);
            out.insert(labels, n.parse().with_context(|| format!("{line:?}"))?);
        }
        Ok(Self(out))
    }

    /// The sum of the counters that have every label of `labels`, a
    /// space-separated list of label values: `"tc ipv4 new_flow"` is tc's
    /// IPv4 new flows in both directions, `"refused_unknown_port"` the
    /// refusals at every hook.
    pub fn of(&self, labels: &str) -> u64 {
        let want: Vec<&str> = labels.split_whitespace().collect();
        self.0
            .iter()
            .filter(|(have, _)| want.iter().all(|w| have.iter().any(|h| h == w)))
            .map(|(_, n)| n)
            .sum()
    }

    /// Each counter, as `hook direction family reason`.
    pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.0.iter().map(|(labels, n)| (labels.join(" "), *n))
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        if let Err(e) = self.clean_up() {
            eprintln!("warning: {e:#}");
        }
    }
}

/// A running `lb-agent run`. Its stderr is kept for failure messages only:
/// the tests learn what the agent did from `/metrics`, `/healthz` and
/// `lb-agent dump`, never from its log.
pub struct Agent {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    listeners: Option<Listeners>,
    /// The network namespace (under /run/netns) it runs in; `None`: ours.
    netns: Option<String>,
}

/// Where the agent's two HTTP listeners are.
#[derive(Clone, Copy, Debug)]
struct Listeners {
    metrics: SocketAddr,
    healthz: SocketAddr,
}

/// How long the agent gets to start, or to catch up with a change.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The node an agent against an apiserver runs as (`--hostname-override`).
pub const KUBE_NODE: &str = "node-1";

/// Histogram count: every change the agent received and wrote (one per
/// watch event, two per re-read of the source file).
const WRITTEN: &str = "lbagent_watch_event_to_map_write_seconds_count";
/// Histogram count: every sync, full or partial.
pub const SYNCS: &str = "kubeproxy_sync_proxy_rules_duration_seconds_count";

impl Agent {
    /// `lb-agent run --from-file manifest`.
    pub fn start(
        manifest: &Path,
        cgroup: &Path,
        pins: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::spawn(&from_file(manifest, extra), cgroup, pins, None)
    }

    /// `lb-agent run --from-file manifest` inside network namespace
    /// `netns` (entered with setns(2) alone, so /sys, bpffs and the cgroup
    /// mount stay as they are), as a node's agent runs in its host's.
    pub fn start_in(
        netns: &str,
        manifest: &Path,
        cgroup: &Path,
        pins: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        Self::spawn(&from_file(manifest, extra), cgroup, pins, Some(netns))
    }

    /// `lb-agent run --kubeconfig kubeconfig`, as node [`KUBE_NODE`].
    pub fn start_kube(
        kubeconfig: &Path,
        cgroup: &Path,
        pins: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let node = format!("--hostname-override={KUBE_NODE}");
        let mut args = vec![
            OsStr::new("--kubeconfig"),
            kubeconfig.as_os_str(),
            OsStr::new(&node),
        ];
        args.extend(extra.iter().map(OsStr::new));
        Self::spawn(&args, cgroup, pins, None)
    }

    fn spawn(
        args: &[&OsStr],
        cgroup: &Path,
        pins: &Path,
        netns: Option<&str>,
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(agent_bin());
        let ns_file = netns.map(open_netns).transpose()?;
        if let Some(f) = &ns_file {
            let fd = f.as_raw_fd();
            // SAFETY: between fork and exec the child only calls setns(2),
            // a plain system call, on an fd the parent keeps open until
            // spawn returns.
            unsafe {
                cmd.pre_exec(move || match libc::setns(fd, libc::CLONE_NEWNET) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                });
            }
        }
        let mut child = cmd
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
        Ok(Self {
            child,
            log,
            listeners: None,
            netns: netns.map(str::to_owned),
        })
    }

    /// Fails, with the agent's log, if the agent has exited.
    pub fn alive(&mut self, doing: &str) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "lb-agent exited ({status}) while {doing}:\n{}",
                self.log_text()
            );
        }
        Ok(())
    }

    /// Polls `check` until it holds, the agent exits, or [`PATIENCE`] runs out.
    fn wait_until(
        &mut self,
        what: &str,
        check: impl FnMut(&mut Self) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        self.wait_until_within(what, PATIENCE, check)
    }

    /// [`Self::wait_until`] with `patience` instead of [`PATIENCE`].
    fn wait_until_within(
        &mut self,
        what: &str,
        patience: Duration,
        mut check: impl FnMut(&mut Self) -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + patience;
        loop {
            self.alive(&format!("waiting for {what}"))?;
            if check(self)? {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Finds the two listeners among the agent's own loopback listening
    /// sockets (they are on ephemeral ports): the one that serves `/metrics` is
    /// the metrics listener, the other the healthz one.
    fn listeners(&mut self) -> anyhow::Result<Listeners> {
        if let Some(l) = self.listeners {
            return Ok(l);
        }
        let pid = self.child.id();
        let netns = self.netns.clone();
        let mut found = None;
        self.wait_until("its HTTP listeners", |_| {
            // Service health checks listen on the wildcard address.
            let addrs: Vec<SocketAddr> = crate::procnet::listening_tcp(pid)?
                .into_iter()
                .filter(|a| a.ip().is_loopback())
                .collect();
            if addrs.len() < 2 {
                return Ok(false);
            }
            anyhow::ensure!(addrs.len() == 2, "lb-agent listens on {addrs:?}");
            let (a, b) = (addrs[0], addrs[1]);
            found = Some(match get_in(netns.as_deref(), a, "/metrics")?.0 {
                200 => Listeners {
                    metrics: a,
                    healthz: b,
                },
                _ => Listeners {
                    metrics: b,
                    healthz: a,
                },
            });
            Ok(true)
        })?;
        let l = found.expect("set when the wait succeeds");
        self.listeners = Some(l);
        Ok(l)
    }

    /// The address `field` (`metrics` or `healthz`) is bound to.
    pub fn bound(&mut self, field: &str) -> anyhow::Result<SocketAddr> {
        let l = self.listeners()?;
        match field {
            "metrics" => Ok(l.metrics),
            "healthz" => Ok(l.healthz),
            _ => bail!("no listener {field:?}; metrics or healthz"),
        }
    }

    /// GET `path` from the agent's `field` listener: (status, body).
    pub fn http_get(&mut self, field: &str, path: &str) -> anyhow::Result<(u16, String)> {
        let at = self.bound(field)?;
        get_in(self.netns.as_deref(), at, path)
    }

    /// One scrape of `/metrics`.
    pub fn metrics(&mut self) -> anyhow::Result<Metrics> {
        let (status, body) = self.http_get("metrics", "/metrics")?;
        anyhow::ensure!(status == 200, "/metrics answered {status}: {body}");
        Metrics::parse(&body)
    }

    /// The value of one sample (`name` or `name{label="value"}`) on /metrics.
    pub fn metric(&mut self, sample: &str) -> anyhow::Result<f64> {
        self.metrics()?.value(sample)
    }

    /// Waits until `sample` on /metrics has `value`.
    pub fn wait_metric(&mut self, sample: &str, value: f64) -> anyhow::Result<()> {
        self.wait_until(&format!("{sample} = {value}"), |a| {
            Ok(a.metric(sample)? == value)
        })
    }

    /// Number of completed syncs so far (full and partial).
    pub fn syncs(&mut self) -> usize {
        match self.metric(SYNCS) {
            Ok(n) => n as usize,
            Err(e) => panic!("reading the sync count: {e:#}\n{}", self.log_text()),
        }
    }

    /// Waits until at least `n` syncs completed.
    pub fn wait_syncs(&mut self, n: usize) -> anyhow::Result<()> {
        self.wait_syncs_within(n, PATIENCE)
    }

    /// [`Self::wait_syncs`], giving the agent `patience` (a first sync
    /// that waits for a Node that never comes takes longer).
    pub fn wait_syncs_within(&mut self, n: usize, patience: Duration) -> anyhow::Result<()> {
        self.wait_until_within(&format!("sync {n}"), patience, |a| {
            Ok(a.metric(SYNCS)? >= n as f64)
        })
    }

    /// Changes received and written so far: one per watch event, three
    /// per re-read of the source file (its Services, its slices, this
    /// node's Node). An interface-address change is one more.
    pub fn written(&mut self) -> anyhow::Result<u64> {
        Ok(self.metric(WRITTEN)? as u64)
    }

    /// Waits until at least `n` changes are written: every change sent
    /// before is then in the maps.
    pub fn wait_written(&mut self, n: u64) -> anyhow::Result<()> {
        self.wait_until(&format!("{n} changes written"), |a| Ok(a.written()? >= n))
    }

    /// The agent's log so far, for failure messages.
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

    /// Waits up to `patience` for the agent to exit on its own: its exit
    /// status.
    pub fn exited_within(
        &mut self,
        patience: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "lb-agent still running after {patience:?}:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// `--from-file manifest` followed by `extra`.
fn from_file<'a>(manifest: &'a Path, extra: &'a [&'a str]) -> Vec<&'a OsStr> {
    let mut args = vec![OsStr::new("--from-file"), manifest.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    args
}

fn open_netns(name: &str) -> anyhow::Result<std::fs::File> {
    std::fs::File::open(format!("/run/netns/{name}")).with_context(|| format!("netns {name}"))
}

/// An HTTP GET from inside network namespace `netns`, or from ours.
fn get_in(netns: Option<&str>, addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let a = match netns {
        Some(ns) => crate::http::request_in(ns, addr, "GET", path)?,
        None => crate::http::request(addr, "GET", path)?,
    };
    Ok((a.status, a.body))
}
