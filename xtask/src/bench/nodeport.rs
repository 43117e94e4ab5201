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

use std::net::Ipv4Addr;

use anyhow::Context as _;
use lb_tests::{
    kubeproxy::{self, Proto, SvcSpec},
    netns::{Namespaces, exec, ip, sysctl, veth},
    probe::{self, Server},
    progstats::{Runs, StatsOn},
    rig::Rig,
    unique,
};

use super::{
    Plan,
    results::nodeport::{Capacity, Load, Mode, NodePort, Row},
    rounds, tc_cost,
};

/// The node ours runs as; its Node object carries the NodePort address.
const NODE: &str = "bench-node";
/// The measured NodePorts, after every filler's (20000 + i).
const TCP_NODE_PORT: u16 = 30080;
const UDP_NODE_PORT: u16 = 30053;
const FILLER_NODE_PORT: u16 = 20000;
/// The pods' network: kube-proxy's `--cluster-cidr`.
const CLUSTER_CIDR: &str = "10.42.0.0/16";

impl Mode {
    /// The index of this mode's node and client (`172.16.k.0/24`).
    fn k(self) -> u8 {
        self as u8
    }

    fn node_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(172, 16, self.k(), 1)
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
            vip: Ipv4Addr::new(10, 100, 0, 1).into(),
            port,
            proto,
            endpoints: pods.iter().map(|&ip| (ip.into(), target)).collect(),
            node_port: Some(node_port.into()),
        });
    }
    all
}

/// The namespaces of one N, deleted on drop (the agent and servers first).
struct Bed {
    rig: Rig,
    _servers: Vec<Server>,
    namespaces: Namespaces,
}

impl Bed {
    fn ns(&self, host: &str) -> String {
        self.namespaces.ns(host)
    }

    fn new(pods: &[Ipv4Addr]) -> anyhow::Result<Self> {
        let prefix = unique("npb");
        let mut namespaces = Namespaces::new(&prefix);
        let rig = Rig::in_netns(&prefix, &namespaces.ns(&format!("n{}", Mode::Ours.k())))?;
        let fabric = namespaces.add("f")?;
        ip(&["-n", &fabric, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &fabric, "link", "set", "br0", "up"])?;
        let mut servers = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            let ns = namespaces.add(&format!("pod{i}"))?;
            let port = format!("pod{i}");
            veth(
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
        for mode in Mode::ALL {
            let k = mode.k();
            let node = namespaces.add(&format!("n{k}"))?;
            let client = namespaces.add(&format!("c{k}"))?;
            let port = format!("n{k}");
            veth(
                (&node, "eth1", Some(&format!("10.42.0.{}/24", 101 + k))),
                (&fabric, &port, None),
            )?;
            ip(&["-n", &fabric, "link", "set", &port, "master", "br0"])?;
            veth(
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
            sysctl(
                &node,
                &["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"],
            )?;
        }
        Ok(Self {
            rig,
            _servers: servers,
            namespaces,
        })
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
        let node = format!(
            "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\n\
             status: {{addresses: [{{type: InternalIP, address: \"{}\"}}]}}\n",
            Mode::Ours.node_addr()
        );
        self.rig.write_manifest(&(node + manifest))?;
        self.rig.start_agent(&[
            &format!("--hostname-override={NODE}"),
            "--devices=eth0,eth1",
        ])?;
        Ok(())
    }

    /// Our tc programs' drops for want of a SNAT port, so far.
    fn exhausted(&self) -> anyhow::Result<u64> {
        Ok(self.rig.pins.stats()?["tc_drop_snat_exhausted"])
    }

    /// (ingress, egress) counters of our tc programs, summed over devices.
    fn tc_runs(&self) -> anyhow::Result<(Runs, Runs)> {
        let links = self.rig.pins_path().join("links");
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

/// The whole NodePort section: every mode at each N, the SNAT capacity
/// runs, and the `tc_cost` bench.
pub(super) fn measure(plan: &Plan) -> anyhow::Result<NodePort> {
    let mut rows = Vec::new();
    for &n in &plan.nodeport_scales {
        eprintln!("== NodePort, N = {n}");
        rows.extend(every_mode(plan, n)?);
    }
    eprintln!("== SNAT ports: fresh-port flows to one remote endpoint");
    let capacity = capacity(plan)?;
    eprintln!("== tc programs on crafted packets");
    Ok(NodePort {
        rows,
        capacity,
        capacity_seconds: capacity_seconds(plan),
        tc_cost: tc_cost::run(plan)?,
    })
}

/// Every mode at one N, over the plan's rounds.
fn every_mode(plan: &Plan, n: usize) -> anyhow::Result<Vec<Row>> {
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
    // Ours: what the tc programs ran during each measurement.
    let mut tc: Vec<(Load, Runs, Runs)> = Vec::new();
    let (c, t) = (plan.concurrency.to_string(), plan.seconds.to_string());
    let modes = rounds::drive(
        plan.rounds,
        n,
        "NodePort ",
        &Mode::ALL,
        |mode: Mode, load| {
            let client = bed.ns(&format!("c{}", mode.k()));
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
            if let Some((_on, (i0, e0))) = stats {
                let (i1, e1) = bed.tc_runs()?;
                tc.push((load, i1.since(i0), e1.since(e0)));
            }
            Ok(r)
        },
    )?;
    Ok(modes
        .into_iter()
        .map(|(mode, runs)| Row {
            mode,
            n,
            runs,
            tc: if mode == Mode::Ours {
                std::mem::take(&mut tc)
            } else {
                Vec::new()
            },
        })
        .collect())
}

/// Measures [`Capacity`] for ours, iptables and nftables.
pub(super) fn capacity(plan: &Plan) -> anyhow::Result<Vec<Capacity>> {
    let pods = [Ipv4Addr::new(10, 42, 0, 1)];
    let bed = Bed::programmed(&pods, &services(1, &pods, 1))?;
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let seconds = capacity_seconds(plan);
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
/// so that mappings of the first flows expire while new ones keep coming;
/// 2 s in a smoke run.
fn capacity_seconds(plan: &Plan) -> &'static str {
    if plan.quick { "2" } else { "65" }
}

fn join(targets: impl Iterator<Item = String>) -> String {
    targets.collect::<Vec<_>>().join(",")
}
