//! NodePort figures: a client outside the node making short TCP connections
//! and UDP request/response to a NodePort (`externalTrafficPolicy:
//! Cluster`), through a node running our tc programs, one running kube-proxy
//! v1.31's iptables layout, one running its nftables layout, and a plain
//! router straight to the pods (direct); at each N. Each node reaches the
//! same pods over one shared bridge, and each has a client of its own:
//!
//! ```text
//! client-k 172.16.k.2 -- eth0 172.16.k.1  node-k  eth1 10.42.0.(101+k) -- bridge -- pods 10.42.0.1..
//! ```
//!
//! The pods are on other nodes as far as every layout knows, so every flow
//! through a NodePort is SNATed (kube-proxy's `KUBE-EXT` masquerade, our tc
//! egress) and the replies come back through the node. Also the kernel's
//! own measure of our tc programs per packet: during our runs, and on
//! crafted packets (`BPF_PROG_TEST_RUN`, the `tc_cost` bench).

use std::{fmt::Write as _, net::Ipv4Addr};

use anyhow::{Context as _, ensure};
use lb_tests::{
    agent::{Agent, PinDir},
    cgroup::TestCgroup,
    kubeproxy::{self, Proto, SvcSpec},
    netns::{exec, ip},
    probe::{self, BenchReport, Server},
    progstats::{Runs, StatsOn},
    unique,
};

use super::{
    Plan,
    rounds::Rounds,
    target::{Measured, Target},
    tc_cost::{self, TcCost},
};

/// The node ours runs as; its Node object carries the NodePort address.
const NODE: &str = "bench-node";
/// The measured NodePorts, after every filler's (20000 + i).
const TCP_NODE_PORT: u16 = 30080;
const UDP_NODE_PORT: u16 = 30053;
const FILLER_NODE_PORT: u16 = 20000;
/// The pods' network: kube-proxy's `--cluster-cidr`.
const CLUSTER_CIDR: &str = "10.42.0.0/16";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Ours,
    Iptables,
    Nftables,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Direct, Mode::Ours, Mode::Iptables, Mode::Nftables];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Ours => "ours (tc)",
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
        }
    }

    /// The index of this mode's node and client (`172.16.k.0/24`).
    fn k(self) -> u8 {
        self as u8
    }

    fn node_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(172, 16, self.k(), 1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// Connect, one request/response, close (RST): one new flow each.
    Tcp,
    /// One UDP socket per client worker, request/response on it.
    Udp,
}

impl Load {
    pub const ALL: [Load; 2] = [Load::Tcp, Load::Udp];
}

/// One mode at one N: every round's report per load, and for ours what the
/// tc programs ran meanwhile (ingress, egress; over both devices).
pub struct Row {
    pub mode: Mode,
    pub n: usize,
    pub runs: Rounds<Load>,
    pub tc: Vec<(Load, Runs, Runs)>,
}

impl Row {
    /// Mean ns per run of (ingress, egress) during `load`.
    pub fn tc_ns(&self, load: Load) -> (f64, f64) {
        let (mut i, mut e) = (Runs::default(), Runs::default());
        for (_, ri, re) in self.tc.iter().filter(|(l, ..)| *l == load) {
            i = Runs {
                time: i.time + ri.time,
                count: i.count + ri.count,
            };
            e = Runs {
                time: e.time + re.time,
                count: e.count + re.count,
            };
        }
        (i.ns_per_run(), e.ns_per_run())
    }
}

/// N NodePort Services: N-1 fillers (NodePorts 20000 + i), then the
/// measured UDP and TCP ones (TCP last, the worst case for iptables'
/// linear `KUBE-NODEPORTS`).
fn services(n: usize, pods: &[Ipv4Addr], filler_endpoints: usize) -> Vec<SvcSpec> {
    let mut all = kubeproxy::filler_services(n.saturating_sub(1), filler_endpoints);
    for (i, s) in all.iter_mut().enumerate() {
        s.node_port = Some((FILLER_NODE_PORT + i as u16).into());
    }
    for (name, port, node_port, target, proto) in [
        ("dns", 53, UDP_NODE_PORT, 5353, Proto::Udp),
        ("web", 80, TCP_NODE_PORT, 8080, Proto::Tcp),
    ] {
        all.push(SvcSpec {
            namespace: "bench".into(),
            name: name.into(),
            port_name: name.into(),
            vip: Ipv4Addr::new(10, 100, 0, 1),
            port,
            proto,
            endpoints: pods.iter().map(|ip| (*ip, target)).collect(),
            node_port: Some(node_port.into()),
        });
    }
    all
}

/// The namespaces of one N, deleted on drop (the agent and servers first).
struct Bed {
    agent: Option<Agent>,
    _servers: Vec<Server>,
    pins: PinDir,
    _cgroup: TestCgroup,
    prefix: String,
    namespaces: Vec<String>,
}

impl Drop for Bed {
    fn drop(&mut self) {
        drop(self.agent.take());
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(&self.prefix));
    }
}

impl Bed {
    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    fn add_ns(&mut self, host: &str) -> anyhow::Result<String> {
        let ns = self.ns(host);
        ip(&["netns", "add", &ns])?;
        self.namespaces.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A veth pair `a_if` in `a` / `b_if` in `b`, up, with the addresses
    /// given.
    fn link(a: (&str, &str, Option<&str>), b: (&str, &str, Option<&str>)) -> anyhow::Result<()> {
        ip(&[
            "link", "add", "name", "lbtveth0", "netns", a.0, "type", "veth", "peer", "name",
            "lbtveth1", "netns", b.0,
        ])?;
        for ((ns, dev, addr), tmp) in [(a, "lbtveth0"), (b, "lbtveth1")] {
            ip(&["-n", ns, "link", "set", tmp, "name", dev])?;
            if let Some(addr) = addr {
                ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            }
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }

    fn new(pods: &[Ipv4Addr]) -> anyhow::Result<Self> {
        let prefix = unique("npb");
        let mut bed = Self {
            agent: None,
            _servers: Vec::new(),
            pins: PinDir::new(&prefix),
            _cgroup: TestCgroup::new(&prefix)?,
            prefix,
            namespaces: Vec::new(),
        };
        let fabric = bed.add_ns("f")?;
        ip(&["-n", &fabric, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &fabric, "link", "set", "br0", "up"])?;
        let mut servers = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            let ns = bed.add_ns(&format!("pod{i}"))?;
            let port = format!("pod{i}");
            Self::link(
                (&ns, "eth0", Some(&format!("{pod}/24"))),
                (&fabric, &port, None),
            )?;
            ip(&["-n", &fabric, "link", "set", &port, "master", "br0"])?;
            for mode in Mode::ALL {
                let via = Ipv4Addr::new(10, 42, 0, 101 + mode.k());
                let net = format!("172.16.{}.0/24", mode.k());
                ip(&["-n", &ns, "route", "add", &net, "via", &via.to_string()])?;
            }
            servers.push(Server::start(&ns, &port, &[8080], &[5353])?);
        }
        bed._servers = servers;
        for mode in Mode::ALL {
            let k = mode.k();
            let node = bed.add_ns(&format!("n{k}"))?;
            let client = bed.add_ns(&format!("c{k}"))?;
            let port = format!("n{k}");
            Self::link(
                (&node, "eth1", Some(&format!("10.42.0.{}/24", 101 + k))),
                (&fabric, &port, None),
            )?;
            ip(&["-n", &fabric, "link", "set", &port, "master", "br0"])?;
            Self::link(
                (&client, "eth0", Some(&format!("172.16.{k}.2/24"))),
                (&node, "eth0", Some(&format!("{}/24", mode.node_addr()))),
            )?;
            ip(&[
                "-n",
                &client,
                "route",
                "add",
                "default",
                "via",
                &mode.node_addr().to_string(),
            ])?;
            exec(
                &node,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.rp_filter=0",
                ],
            )?;
        }
        Ok(bed)
    }

    /// The bed with `specs` programmed in every mode's node: our agent's,
    /// and kube-proxy's iptables and nftables rules.
    fn programmed(pods: &[Ipv4Addr], specs: &[SvcSpec]) -> anyhow::Result<Self> {
        let mut bed = Self::new(pods)?;
        bed.start_agent(&super::datapath::manifests(specs))?;
        let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
        kubeproxy::load_iptables(
            &node_ns(Mode::Iptables),
            &kubeproxy::iptables_restore(specs, CLUSTER_CIDR),
        )?;
        kubeproxy::load_nft(
            &node_ns(Mode::Nftables),
            &kubeproxy::nft_ruleset(specs, CLUSTER_CIDR),
        )?;
        Ok(bed)
    }

    /// Our agent in ours' node, on both devices, from `manifest`.
    fn start_agent(&mut self, manifest: &str) -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(&self.prefix);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("services.yaml");
        let node = format!(
            "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\n\
             status: {{addresses: [{{type: InternalIP, address: \"{}\"}}]}}\n",
            Mode::Ours.node_addr()
        );
        std::fs::write(&path, node + manifest)?;
        let mut agent = Agent::start_in(
            &self.ns(&format!("n{}", Mode::Ours.k())),
            &path,
            self._cgroup.path(),
            self.pins.path(),
            &[
                &format!("--hostname-override={NODE}"),
                "--devices=eth0,eth1",
            ],
        )?;
        agent.wait_syncs(1)?;
        self.agent = Some(agent);
        Ok(())
    }

    /// Our tc programs' drops for want of a SNAT port, so far.
    fn exhausted(&self) -> anyhow::Result<u64> {
        Ok(self.pins.stats()?["tc_drop_snat_exhausted"])
    }

    /// (ingress, egress) counters of our tc programs, summed over devices.
    fn tc_runs(&self) -> anyhow::Result<(Runs, Runs)> {
        let links = self.pins.path().join("links");
        let sum = |prefix: &str| -> anyhow::Result<Runs> {
            let mut total = Runs::default();
            for dev in ["eth0", "eth1"] {
                let r = Runs::of_link(&links.join(format!("{prefix}{dev}")))?;
                total.time += r.time;
                total.count += r.count;
            }
            Ok(total)
        };
        Ok((sum("tc-in-")?, sum("tc-out-")?))
    }
}

pub fn measure(plan: &Plan, n: usize) -> anyhow::Result<Vec<Row>> {
    let pods: Vec<Ipv4Addr> = (0..plan.endpoints)
        .map(|i| Ipv4Addr::new(10, 42, 0, i as u8 + 1))
        .collect();
    let bed = Bed::programmed(&pods, &services(n, &pods, plan.endpoints))?;
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let targets = |mode: Mode, load: Load| match (mode, load) {
        (Mode::Direct, Load::Tcp) => join(pods.iter().map(|p| format!("{p}:8080"))),
        (Mode::Direct, Load::Udp) => join(pods.iter().map(|p| format!("{p}:5353"))),
        (_, Load::Tcp) => format!("{}:{TCP_NODE_PORT}", mode.node_addr()),
        (_, Load::Udp) => format!("{}:{UDP_NODE_PORT}", mode.node_addr()),
    };
    let mut rows: Vec<Row> = Mode::ALL
        .iter()
        .map(|&mode| Row {
            mode,
            n,
            runs: Rounds::default(),
            tc: Vec::new(),
        })
        .collect();
    let (c, t) = (plan.concurrency.to_string(), plan.seconds.to_string());
    for round in 0..plan.rounds {
        let mut order = Mode::ALL;
        if round % 2 == 1 {
            order.reverse();
        }
        for mode in order {
            let client = bed.ns(&format!("c{}", mode.k()));
            let mut line = format!("   {:<9} N={n:<6}", mode.name());
            for load in Load::ALL {
                if matches!(mode, Mode::Iptables | Mode::Nftables) {
                    exec(&node_ns(mode), &["conntrack", "-F"]).context("flushing conntrack")?;
                }
                let to = targets(mode, load);
                let sub = match load {
                    Load::Tcp => "bench-tcp",
                    Load::Udp => "bench-udp",
                };
                let args = [sub, "--to", &to, "-c", &c, "--seconds", &t];
                let stats = (mode == Mode::Ours)
                    .then(|| -> anyhow::Result<_> { Ok((StatsOn::enable()?, bed.tc_runs()?)) })
                    .transpose()?;
                let r = probe::outside_bench(&client, &args)?;
                let row = rows
                    .iter_mut()
                    .find(|r| r.mode == mode)
                    .expect("every mode has a row");
                if let Some((_on, (i0, e0))) = stats {
                    let (i1, e1) = bed.tc_runs()?;
                    row.tc.push((load, i1.since(i0), e1.since(e0)));
                }
                ensure!(
                    r.ok > 0,
                    "NodePort {} {load:?} at N={n} answered nothing",
                    mode.name()
                );
                let _ = write!(
                    line,
                    "  {load:?} {:>6.0}/s (p50 {:>5.1} us, {} failed)",
                    r.rate,
                    r.p50_us().unwrap_or(f64::NAN),
                    r.failed
                );
                row.runs.push(load, r);
            }
            eprintln!("{line}");
        }
    }
    Ok(rows)
}

/// SNAT capacity: new flows to a NodePort whose one endpoint is on another
/// node, each from a fresh client port (a DNS-style resolver; short TCP
/// connections), for longer than the UDP timeout, through ours and
/// kube-proxy's layouts: how many were answered, and how many failed.
pub struct Capacity {
    pub mode: Mode,
    pub load: Load,
    pub report: BenchReport,
    /// Ours: packets dropped for want of a SNAT port meanwhile.
    pub exhausted: Option<u64>,
}

/// Measures [`Capacity`] for ours, iptables and nftables.
pub fn capacity(plan: &Plan) -> anyhow::Result<Vec<Capacity>> {
    let pods = [Ipv4Addr::new(10, 42, 0, 1)];
    let bed = Bed::programmed(&pods, &services(1, &pods, 1))?;
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let seconds = if plan.quick { "2" } else { CAPACITY_SECONDS };
    let c = plan.concurrency.to_string();
    let mut out = Vec::new();
    for mode in [Mode::Ours, Mode::Iptables, Mode::Nftables] {
        let client = bed.ns(&format!("c{}", mode.k()));
        for load in Load::ALL {
            if mode != Mode::Ours {
                exec(&node_ns(mode), &["conntrack", "-F"]).context("flushing conntrack")?;
            }
            let (sub, port) = match load {
                Load::Tcp => ("bench-tcp", TCP_NODE_PORT),
                Load::Udp => ("bench-udp", UDP_NODE_PORT),
            };
            let to = format!("{}:{port}", mode.node_addr());
            let args = [
                sub,
                "--to",
                &to,
                "-c",
                &c,
                "--seconds",
                seconds,
                "--socket-per-request",
            ];
            let before = bed.exhausted()?;
            let report = probe::outside_bench(&client, &args)?;
            let exhausted = (mode == Mode::Ours)
                .then(|| Ok::<_, anyhow::Error>(bed.exhausted()? - before))
                .transpose()?;
            eprintln!(
                "   {:<9} {load:?} {} flows ({:.0}/s), {} failed",
                mode.name(),
                report.ok,
                report.rate,
                report.failed
            );
            out.push(Capacity {
                mode,
                load,
                report,
                exhausted,
            });
        }
    }
    Ok(out)
}

/// How long each capacity run lasts: longer than the UDP timeout (60 s),
/// so that mappings of the first flows expire while new ones keep coming.
const CAPACITY_SECONDS: &str = "65";

fn join(targets: impl Iterator<Item = String>) -> String {
    targets.collect::<Vec<_>>().join(",")
}

/// The NodePort section of the report, and its targets.
pub fn render(
    plan: &Plan,
    rows: &[Row],
    capacity: &[Capacity],
    tc_cost: &TcCost,
) -> (String, Vec<Target>) {
    let find = |mode: Mode, n: usize| {
        rows.iter()
            .find(|r| r.mode == mode && r.n == n)
            .expect("every mode at every N")
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "## NodePort from outside the node (externalTrafficPolicy: Cluster)\n\n\
         A client in its own namespace reaches the NodePort of a node namespace: ours runs \
         the agent with its tc programs on both of the node's devices; iptables and nftables \
         run kube-proxy v1.31's layouts (`KUBE-NODEPORTS` -> `KUBE-EXT-*`, `service-nodeports`) \
         for the same N NodePort Services ({} endpoints each; the measured ones last); direct \
         goes through a plain router to the pods. The pods are on other nodes as far as every \
         layout knows, so every flow is SNATed and answered through the node. {} concurrent \
         clients, {} s per measurement, {} rounds in ABBA order, medians; conntrack of the \
         kube-proxy nodes flushed before each measurement.\n",
        plan.endpoints, plan.concurrency, plan.seconds, plan.rounds
    );
    for (load, title, unit, lat) in [
        (
            Load::Tcp,
            "TCP short connections to a NodePort",
            "conn/s",
            "connect",
        ),
        (
            Load::Udp,
            "UDP request/response to a NodePort, one socket per client",
            "req/s",
            "round trip",
        ),
    ] {
        let _ = writeln!(o, "### {title}\n");
        let _ = writeln!(
            o,
            "| N | mode | {unit} | vs direct | vs ours | spread | {lat} p50 µs | {lat} p99 µs | tc ns/packet in, out |"
        );
        let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
        for &n in &plan.scales {
            let (d, us) = (find(Mode::Direct, n), find(Mode::Ours, n));
            for mode in Mode::ALL {
                let r = find(mode, n);
                let (lo, hi) = r.runs.spread(load);
                let tc = if mode == Mode::Ours {
                    let (i, e) = r.tc_ns(load);
                    format!("{i:.0}, {e:.0}")
                } else {
                    String::new()
                };
                let _ = writeln!(
                    o,
                    "| {n} | {} | {:.0} | {:.2} | {:.2} | {lo:.0}-{hi:.0} | {:.1} | {:.1} | {tc} |",
                    mode.name(),
                    r.runs.rate(load),
                    r.runs.rate(load) / d.runs.rate(load),
                    r.runs.rate(load) / us.runs.rate(load),
                    r.runs.p50(load),
                    r.runs.p99(load),
                );
            }
        }
        o.push('\n');
    }
    let secs = if plan.quick { "2" } else { CAPACITY_SECONDS };
    let _ = writeln!(
        o,
        "### SNAT ports: fresh-port flows to one remote endpoint\n\n\
         New flows, each from a new client port (UDP: a new connected socket per request, \
         as a resolver asks; TCP: short connections), to a NodePort whose one endpoint is \
         on another node, so every flow takes a SNAT port of that endpoint's: {} concurrent \
         clients for {secs} s, longer than the UDP timeout (ours 60 s, the kernel's 30 s).\n\n\
         | mode | load | flows answered | flows/s | failed | dropped for want of a SNAT port |\n\
         |---|---|---:|---:|---:|---:|",
        plan.concurrency
    );
    for c in capacity {
        let _ = writeln!(
            o,
            "| {} | {:?} | {} | {:.0} | {} | {} |",
            c.mode.name(),
            c.load,
            c.report.ok,
            c.report.rate,
            c.report.failed,
            c.exhausted.map_or_else(String::new, |n| n.to_string())
        );
    }
    o.push('\n');
    let failed: u64 = rows.iter().map(|r| r.runs.failed()).sum();
    let _ = writeln!(
        o,
        "Failed requests over all NodePort runs: {failed}. \"tc ns/packet\": the kernel's mean \
         run time of our tc programs during our runs (`bpf_stats_enabled`), over every packet \
         both devices saw: client side and pod side, new flows and conntrack hits alike.\n\n\
         ### Our tc programs on crafted packets (`BPF_PROG_TEST_RUN`)\n\n```text\n{}```\n",
        tc_cost.table
    );

    let mut t = Vec::new();
    for load in Load::ALL {
        let rate = |mode| {
            capacity
                .iter()
                .find(|c| c.mode == mode && c.load == load)
                .map(|c| (c.report.rate, c.report.failed))
        };
        if let (Some((us, us_failed)), Some((ipt, _))) = (rate(Mode::Ours), rate(Mode::Iptables)) {
            t.push(Target::new(
                format!(
                    "SNAT: fresh-port {load:?} flows to one remote endpoint without a failure, at \
                     least kube-proxy's (iptables) rate within 10%"
                ),
                Measured::Text(format!(
                    "{us:.0}/s, {us_failed} failed; iptables {ipt:.0}/s"
                )),
                us_failed == 0 && us >= ipt * 0.9,
            ));
        }
    }
    for &n in &plan.scales {
        let us = find(Mode::Ours, n).runs.rate(Load::Tcp);
        let nft = find(Mode::Nftables, n).runs.rate(Load::Tcp);
        t.push(Target::at_least(
            format!("NodePort: ours >= nftables at N={n} (TCP)"),
            us,
            nft,
            Measured::Times(us / nft),
        ));
    }
    if plan.scales.contains(&10_000) {
        let ipt = find(Mode::Iptables, 10_000).runs.rate(Load::Tcp);
        let r = find(Mode::Ours, 10_000).runs.rate(Load::Tcp) / ipt;
        t.push(Target::at_least(
            "NodePort: ours >= 2x iptables at N=10000 (TCP)",
            r,
            2.0,
            Measured::Times(r),
        ));
    }
    // The repeat table's conntrack-hit row, the kernel's mean.
    let hit = tc_cost.figures.repeat_ns(tc_cost::INGRESS_HIT);
    t.push(match hit.map(|ns| ns as f64) {
        Some(ns) => Target::at_most(
            "tc ingress <= 150 ns per packet on a conntrack hit (BPF_PROG_TEST_RUN)",
            ns,
            150.0,
            Measured::Nanos(ns),
        ),
        None => Target::new("tc ingress per-packet cost", Measured::Missing, false),
    });
    (o, t)
}
