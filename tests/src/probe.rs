//! Running `lbt` inside namespaces: backends and clients.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
};

use anyhow::{Context as _, bail};
use serde::Deserialize;

pub fn lbt_bin() -> PathBuf {
    crate::sibling_binary("lbt", "LBT_BIN")
}

/// A client's JSON report (see `lbt`).
#[derive(Debug, Default, Deserialize)]
pub struct Report {
    pub replies: BTreeMap<String, u32>,
    pub errors: BTreeMap<String, u32>,
    pub peers: BTreeMap<String, u32>,
    pub elapsed_ms: u128,
    /// `lbt udp-push`: the `push` datagrams sent (send() succeeded).
    #[serde(default)]
    pub sent: Option<u32>,
}

impl Report {
    pub fn ok(&self) -> u32 {
        self.replies.values().sum()
    }

    pub fn failed(&self) -> u32 {
        self.errors.values().sum()
    }
}

pub(crate) fn lbt(netns: &str, cgroup: Option<&Path>) -> Command {
    let mut cmd = Command::new(lbt_bin());
    if let Some(cg) = cgroup {
        cmd.arg("--cgroup").arg(cg);
    }
    cmd.args(["--netns", netns]);
    cmd
}

/// Runs a client command to completion and parses its report.
pub fn client(netns: &str, cgroup: &Path, args: &[&str]) -> anyhow::Result<Report> {
    run_report(netns, Some(cgroup), args)
}

/// [`client`] outside every test cgroup: no socket hook translates its
/// connections, as for a client on another host.
pub fn outside_client(netns: &str, args: &[&str]) -> anyhow::Result<Report> {
    run_report(netns, None, args)
}

fn run_report<T: serde::de::DeserializeOwned>(
    netns: &str,
    cgroup: Option<&Path>,
    args: &[&str],
) -> anyhow::Result<T> {
    let out = lbt(netns, cgroup).args(args).output()?;
    if !out.status.success() {
        bail!(
            "lbt {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("parsing the report of lbt {}", args.join(" ")))
}

/// A benchmark's JSON report (`lbt bench-tcp` / `lbt bench-udp`).
/// Latencies are in µs; `None` when nothing succeeded.
#[derive(Debug, Default, Deserialize)]
pub struct BenchReport {
    pub ok: u64,
    pub failed: u64,
    /// Error kind -> count.
    #[serde(default)]
    pub errors: BTreeMap<String, u64>,
    /// Wall time actually spent (the last request may overrun `--seconds`).
    pub seconds: f64,
    /// `ok / seconds`.
    pub rate: f64,
    /// TCP: connect() latency.
    #[serde(default)]
    pub connect_p50_us: Option<f64>,
    #[serde(default)]
    pub connect_p99_us: Option<f64>,
    /// UDP: request/reply round trip.
    #[serde(default)]
    pub rtt_p50_us: Option<f64>,
    #[serde(default)]
    pub rtt_p99_us: Option<f64>,
    /// Backend id -> replies.
    pub replies: BTreeMap<String, u64>,
    /// Not from the client: the kernel's drop counters (`snmp::DROPS`)
    /// that rose during the run, per group of namespaces (`client`,
    /// `pods`), where the harness read them.
    #[serde(default)]
    pub kernel_drops: BTreeMap<String, BTreeMap<String, u64>>,
}

impl BenchReport {
    /// The median latency: connect() for TCP, round trip for UDP.
    pub fn p50_us(&self) -> Option<f64> {
        self.connect_p50_us.or(self.rtt_p50_us)
    }

    /// The 99th percentile latency: connect() for TCP, round trip for UDP.
    pub fn p99_us(&self) -> Option<f64> {
        self.connect_p99_us.or(self.rtt_p99_us)
    }
}

/// Runs `lbt bench-tcp` / `lbt bench-udp` (args include the subcommand) in
/// `netns` and `cgroup`, and parses its report.
pub fn bench(netns: &str, cgroup: &Path, args: &[&str]) -> anyhow::Result<BenchReport> {
    run_report(netns, Some(cgroup), args)
}

/// [`bench`] outside every test cgroup, as a client on another host.
pub fn outside_bench(netns: &str, args: &[&str]) -> anyhow::Result<BenchReport> {
    run_report(netns, None, args)
}

/// A backend that answers with its id; killed on drop.
pub struct Server(Child);

impl Server {
    pub fn start(netns: &str, id: &str, tcp: &[u16], udp: &[u16]) -> anyhow::Result<Self> {
        let mut cmd = lbt(netns, None);
        cmd.args(["serve", "--id", id]);
        for p in tcp {
            cmd.args(["--tcp", &p.to_string()]);
        }
        for p in udp {
            cmd.args(["--udp", &p.to_string()]);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("piped")).read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            bail!("backend {id} did not start");
        }
        Ok(Self(child))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A long-lived TCP connection driven line by line.
pub struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The peer the client saw at connect time (getpeername).
    pub peer: String,
}

impl Held {
    pub fn open(netns: &str, cgroup: &Path, to: &str) -> anyhow::Result<Self> {
        Self::open_in(netns, Some(cgroup), to)
    }

    /// [`Self::open`] in `cgroup`, or outside every test cgroup.
    pub fn open_in(netns: &str, cgroup: Option<&Path>, to: &str) -> anyhow::Result<Self> {
        let mut child = lbt(netns, cgroup)
            .args(["hold", "--to", to])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let peer = line
            .strip_prefix("connected ")
            .with_context(|| format!("hold did not connect: {line:?}"))?
            .trim()
            .to_owned();
        Ok(Self {
            child,
            stdin,
            stdout,
            peer,
        })
    }

    /// getpeername() on the open connection, now.
    pub fn peer_now(&mut self) -> anyhow::Result<String> {
        writeln!(self.stdin.as_mut().expect("open"), "peer")?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        line.strip_prefix("peer ")
            .map(|s| s.trim().to_owned())
            .with_context(|| format!("getpeername failed: {line:?}"))
    }

    /// Sends one request on the open connection; returns the backend's id.
    pub fn request(&mut self) -> anyhow::Result<String> {
        writeln!(self.stdin.as_mut().expect("open"), "?")?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        line.strip_prefix("reply ")
            .map(|s| s.trim().to_owned())
            .with_context(|| format!("held connection failed: {line:?}"))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one request on a [`HeldUdp`] socket got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UdpAnswer {
    /// The backend's id.
    Reply(String),
    /// The errno of the send() or recv() that failed, and the socket error
    /// that was pending after it (`SO_ERROR`, 0 if none).
    Error { errno: i32, pending: i32 },
}

impl UdpAnswer {
    /// Whether the call or the socket's pending error is `errno`.
    pub fn is_error(&self, errno: i32) -> bool {
        matches!(self, UdpAnswer::Error { errno: e, pending: p } if *e == errno || *p == errno)
    }
}

/// A long-lived connected UDP socket driven line by line (`lbt hold-udp`).
pub struct HeldUdp {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// getpeername() after the last connect.
    pub peer: String,
}

impl HeldUdp {
    pub fn open(netns: &str, cgroup: &Path, to: &str) -> anyhow::Result<Self> {
        Self::open_in(netns, Some(cgroup), to)
    }

    /// [`Self::open`] in `cgroup`, or outside every test cgroup.
    pub fn open_in(netns: &str, cgroup: Option<&Path>, to: &str) -> anyhow::Result<Self> {
        let mut child = lbt(netns, cgroup)
            .args(["hold-udp", "--to", to])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut held = Self {
            child,
            stdin,
            stdout,
            peer: String::new(),
        };
        held.peer = held.connected()?;
        Ok(held)
    }

    fn line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("lbt hold-udp exited");
        }
        Ok(line.trim().to_owned())
    }

    fn connected(&mut self) -> anyhow::Result<String> {
        let line = self.line()?;
        line.strip_prefix("connected ")
            .map(str::to_owned)
            .with_context(|| format!("hold-udp did not connect: {line:?}"))
    }

    /// send() then recv() on the socket.
    pub fn request(&mut self) -> anyhow::Result<UdpAnswer> {
        writeln!(self.stdin.as_mut().expect("open"), "?")?;
        let line = self.line()?;
        if let Some(id) = line.strip_prefix("reply ") {
            return Ok(UdpAnswer::Reply(id.to_owned()));
        }
        let parsed = line.strip_prefix("error ").and_then(|e| {
            let (errno, pending) = e.split_once(' ')?;
            Some(UdpAnswer::Error {
                errno: errno.parse().ok()?,
                pending: pending.parse().ok()?,
            })
        });
        parsed.with_context(|| format!("hold-udp answered {line:?}"))
    }

    /// Connects the same socket to `to`: getpeername() after it.
    pub fn connect_same(&mut self, to: &str) -> anyhow::Result<()> {
        writeln!(self.stdin.as_mut().expect("open"), "connect {to}")?;
        self.peer = self.connected()?;
        Ok(())
    }

    /// Replaces the socket with a new one connected to the same address.
    pub fn reconnect(&mut self) -> anyhow::Result<()> {
        writeln!(self.stdin.as_mut().expect("open"), "reconnect")?;
        self.peer = self.connected()?;
        Ok(())
    }
}

impl Drop for HeldUdp {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Back-to-back TCP connections until [`Churn::finish`].
pub struct Churn(Child);

impl Churn {
    pub fn start(netns: &str, cgroup: &Path, to: &str) -> anyhow::Result<Self> {
        Ok(Self(
            lbt(netns, Some(cgroup))
                .args(["churn", "--to", to])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?,
        ))
    }

    pub fn finish(mut self) -> anyhow::Result<Report> {
        drop(self.0.stdin.take());
        let mut out = String::new();
        std::io::Read::read_to_string(self.0.stdout.as_mut().expect("piped"), &mut out)?;
        self.0.wait()?;
        serde_json::from_str(&out).context("parsing churn report")
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
