//! NodePort figures: a client outside the node making short TCP connections
//! and UDP request/response to a NodePort (`externalTrafficPolicy:
//! Cluster`), through a node running our tc programs, one running kube-proxy
//! v1.31's iptables layout, one running its nftables layout, and a plain
//! router straight to the pods (direct); at each N, over IPv4 and over
//! IPv6. Each node reaches the same pods over one shared bridge, and each
//! has a client of its own:
//!
//! ```text
//! client-k 172.16.k.2 -- eth0 172.16.k.1  node-k  eth1 10.42.0.(101+k) -- bridge -- pods 10.42.0.1..
//!                                                 eth2 10.44.k.1 -- sink-k 10.44.k.2 (10.43.0.0/16)
//! ```
//!
//! The sink (packets per second only) is the route of a third Service's
//! endpoints (10.43.0.1..), a namespace whose XDP program counts and drops
//! every frame: no socket buffer is made after the node.
//!
//! Every link is dual-stack: each address has its IPv6 image, `fd00::`
//! and the IPv4 address's 32 bits (`netns::v6_of`, as the datapath
//! section's pods), in a prefix 96 bits longer. Every Service is
//! dual-stack (RequireDualStack, a slice of each family), so each family's
//! layout holds the same N Services: kube-proxy's are loaded per family as
//! its one proxier per family writes them (`iptables-restore` and
//! `ip6tables-restore`, `table ip` and `table ip6`).
//!
//! The pods are on other nodes as far as every layout knows, so every flow
//! through a NodePort is SNATed (kube-proxy's `KUBE-EXT` masquerade, our tc
//! egress) and the replies come back through the node. Also the kernel's
//! own measure of our tc programs per packet: during our runs, and on
//! crafted packets (`BPF_PROG_TEST_RUN`, the `tc_cost` bench).

mod pps;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Context as _;
use lb_tests::{
    kubeproxy::{self, Proto, SvcSpec},
    netns::{
        Namespaces, XdpPass, exec, ip, no_dad, sysctl, tx_checksum_off, v6_of, veth, xdp_pass,
    },
    probe::{self, Server},
    progstats::{Runs, StatsOn},
    rig::Rig,
    unique,
};

use super::{
    Plan,
    results::{
        nodeport::{Capacity, Family, Load, Mode, NodePort, Row},
        pps::{Pps, PpsMode},
    },
    rounds, tc_cost,
};

/// The node ours runs as; its Node object carries the NodePort addresses.
const NODE: &str = "bench-node";
/// The measured NodePorts, after every filler's (20000 + i).
const TCP_NODE_PORT: u16 = 30080;
const UDP_NODE_PORT: u16 = 30053;
/// The UDP NodePort whose endpoints are behind each node's sink.
const SINK_NODE_PORT: u16 = 30054;
/// The sink Service's endpoints: routed to each node's sink.
const SINK_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 43, 0, 0), 16);
const FILLER_NODE_PORT: u16 = 20000;
/// How many fillers get NodePorts (20000..30000).
const FILLER_NODE_PORTS: usize = 10_000;
/// The pods' network: kube-proxy's `--cluster-cidr` (IPv4's; IPv6's is its
/// image).
const CLUSTER_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 42, 0, 0), 16);

/// `ip` in `family`: itself, or its IPv6 image.
fn at(family: Family, ip: Ipv4Addr) -> IpAddr {
    match family {
        Family::V4 => ip.into(),
        Family::V6 => v6_of(ip).into(),
    }
}

/// `ip/len` in `family`.
fn prefix(family: Family, (ip, len): (Ipv4Addr, u8)) -> String {
    match family {
        Family::V4 => format!("{ip}/{len}"),
        Family::V6 => format!("{}/{}", v6_of(ip), len + 96),
    }
}

/// `specs` over `family`: their addresses' images.
fn in_family(specs: &[SvcSpec], family: Family) -> Vec<SvcSpec> {
    let map = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => at(family, v4),
        IpAddr::V6(_) => ip,
    };
    specs
        .iter()
        .map(|s| SvcSpec {
            vip: map(s.vip),
            endpoints: s.endpoints.iter().map(|&(ip, p)| (map(ip), p)).collect(),
            ..s.clone()
        })
        .collect()
}

/// Gives `dev` in `ns` the address `ip/len` and its IPv6 image.
fn addrs(ns: &str, dev: &str, net: (Ipv4Addr, u8)) -> anyhow::Result<()> {
    for family in Family::ALL {
        let addr = prefix(family, net);
        let mut args = vec!["-n", ns, "addr", "add", &addr, "dev", dev];
        if family == Family::V6 {
            args.push("nodad");
        }
        ip(&args)?;
    }
    Ok(())
}

/// Routes `to` via `via` in `ns`, in both families.
fn route(ns: &str, to: Option<(Ipv4Addr, u8)>, via: Ipv4Addr) -> anyhow::Result<()> {
    for family in Family::ALL {
        let to = to.map_or("default".to_owned(), |net| prefix(family, net));
        ip(&[
            "-n",
            ns,
            "route",
            "add",
            &to,
            "via",
            &at(family, via).to_string(),
        ])?;
    }
    Ok(())
}

impl Mode {
    /// The index of this mode's node and client (`172.16.k.0/24`).
    fn k(self) -> u8 {
        self as u8
    }

    /// This mode's node on its client's link.
    fn node_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(172, 16, self.k(), 1)
    }

    /// This mode's client.
    fn client_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(172, 16, self.k(), 2)
    }

    /// This mode's node on the pods' bridge.
    fn fabric_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(10, 42, 0, 101 + self.k())
    }

    /// This mode's node, and its sink, on their link (`10.44.k.0/24`).
    fn sink_link(self) -> (Ipv4Addr, Ipv4Addr) {
        (
            Ipv4Addr::new(10, 44, self.k(), 1),
            Ipv4Addr::new(10, 44, self.k(), 2),
        )
    }
}

/// N NodePort Services: N-1 fillers (NodePorts 20000 + i), then the
/// measured ones: the sink's and the pods' UDP ones and the pods' TCP one
/// (TCP last, the worst case for iptables' linear `KUBE-NODEPORTS`). Their
/// IPv4 addresses; see [`in_family`].
fn services(n: usize, pods: &[Ipv4Addr], filler_endpoints: usize) -> Vec<SvcSpec> {
    let fillers = n.saturating_sub(1);
    // NodePorts for as many as 20000..30000 holds; the rest (N = 100,000)
    // are ClusterIP Services.
    let with_ports = fillers.min(FILLER_NODE_PORTS);
    let mut all = kubeproxy::filler_node_ports(with_ports, filler_endpoints, FILLER_NODE_PORT);
    all.extend(
        kubeproxy::filler_services(fillers, filler_endpoints)
            .into_iter()
            .skip(with_ports),
    );
    let sinks: Vec<Ipv4Addr> = (1..=pods.len())
        .map(|i| Ipv4Addr::new(10, 43, 0, i as u8))
        .collect();
    for (name, port, node_port, target, proto, endpoints) in [
        ("sink", 54, SINK_NODE_PORT, 5353, Proto::Udp, &sinks[..]),
        ("dns", 53, UDP_NODE_PORT, 5353, Proto::Udp, pods),
        ("web", 80, TCP_NODE_PORT, 8080, Proto::Tcp, pods),
    ] {
        all.push(SvcSpec {
            namespace: "bench".into(),
            name: name.into(),
            port_name: name.into(),
            vip: Ipv4Addr::new(10, 100, 0, 1).into(),
            port,
            proto,
            endpoints: endpoints.iter().map(|&ip| (ip.into(), target)).collect(),
            node_port: Some(node_port.into()),
        });
    }
    all
}

/// The namespaces of one N, deleted on drop (the agents and servers
/// first).
pub(super) struct Bed {
    /// An agent of ours in the node of each mode that runs one
    /// ([`Mode::agent_flags`]).
    rigs: Vec<(Mode, Rig)>,
    _servers: Vec<Server>,
    /// NAPI at the peers of the XDP node's devices, where its fast path
    /// sends frames out (see `lb_tests::netns::xdp_pass`).
    _xdp_peers: Vec<XdpPass>,
    namespaces: Namespaces,
}

impl Bed {
    pub(super) fn ns(&self, host: &str) -> String {
        self.namespaces.ns(host)
    }

    /// The namespace of `mode`'s node.
    pub(super) fn node_ns(&self, mode: Mode) -> String {
        self.ns(&format!("n{}", mode.k()))
    }

    /// The namespace of `mode`'s client.
    pub(super) fn client_ns(&self, mode: Mode) -> String {
        self.ns(&format!("c{}", mode.k()))
    }

    /// The namespace of `mode`'s sink.
    pub(super) fn sink_ns(&self, mode: Mode) -> String {
        self.ns(&format!("s{}", mode.k()))
    }

    /// The namespaces of the pods.
    pub(super) fn pod_namespaces(&self, pods: usize) -> Vec<String> {
        (0..pods).map(|i| self.ns(&format!("pod{i}"))).collect()
    }

    /// The agent in `mode`'s node.
    fn rig(&self, mode: Mode) -> &Rig {
        &self
            .rigs
            .iter()
            .find(|(m, _)| *m == mode)
            .expect("an agent in every mode of ours")
            .1
    }

    fn new(pods: &[Ipv4Addr]) -> anyhow::Result<Self> {
        let prefix = unique("npb");
        let mut namespaces = Namespaces::new(&prefix);
        let rigs = Mode::ALL
            .into_iter()
            .filter(|m| m.agent_flags().is_some())
            .map(|m| {
                let node = namespaces.ns(&format!("n{}", m.k()));
                Ok((m, Rig::in_netns(&format!("{prefix}a{}", m.k()), &node)?))
            })
            .collect::<anyhow::Result<_>>()?;
        // Every namespace without duplicate address detection before its
        // interfaces exist, so that no IPv6 address is ever tentative.
        let mut add = |host: &str| -> anyhow::Result<String> {
            let ns = namespaces.add(host)?;
            no_dad(&ns)?;
            Ok(ns)
        };
        let fabric = add("f")?;
        ip(&["-n", &fabric, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &fabric, "link", "set", "br0", "up"])?;
        let mut servers = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            let ns = add(&format!("pod{i}"))?;
            let port = format!("pod{i}");
            veth((&ns, "eth0", None), (&fabric, &port, None))?;
            addrs(&ns, "eth0", (*pod, 24))?;
            ip(&["-n", &fabric, "link", "set", &port, "master", "br0"])?;
            for mode in Mode::ALL {
                let client_net = (Ipv4Addr::new(172, 16, mode.k(), 0), 24);
                route(&ns, Some(client_net), mode.fabric_addr())?;
            }
            servers.push(Server::start(&ns, &port, &[8080], &[5353])?);
            // Complete checksums, as a NIC delivers them: the XDP node's
            // fast path cannot complete a veth's partial ones.
            tx_checksum_off(&ns, "eth0")?;
        }
        let mut xdp_peers = Vec::new();
        for mode in Mode::ALL {
            let k = mode.k();
            let node = add(&format!("n{k}"))?;
            let client = add(&format!("c{k}"))?;
            let port = format!("n{k}");
            veth((&node, "eth1", None), (&fabric, &port, None))?;
            addrs(&node, "eth1", (mode.fabric_addr(), 24))?;
            ip(&["-n", &fabric, "link", "set", &port, "master", "br0"])?;
            veth((&client, "eth0", None), (&node, "eth0", None))?;
            addrs(&client, "eth0", (mode.client_addr(), 24))?;
            addrs(&node, "eth0", (mode.node_addr(), 24))?;
            route(&client, None, mode.node_addr())?;
            let sink = add(&format!("s{k}"))?;
            let (at_node, at_sink) = mode.sink_link();
            veth((&node, "eth2", None), (&sink, "eth0", None))?;
            addrs(&node, "eth2", (at_node, 24))?;
            addrs(&sink, "eth0", (at_sink, 24))?;
            route(&node, Some(SINK_NET), at_sink)?;
            if mode == Mode::OursXdp {
                tx_checksum_off(&client, "eth0")?;
                xdp_peers.push(xdp_pass(&client, "eth0")?);
                xdp_peers.push(xdp_pass(&fabric, &port)?);
            }
            sysctl(
                &node,
                &[
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv6.conf.all.forwarding=1",
                ],
            )?;
        }
        Ok(Self {
            rigs,
            _servers: servers,
            _xdp_peers: xdp_peers,
            namespaces,
        })
    }

    /// The bed with `specs` (dual-stack: see [`in_family`]) programmed in
    /// every mode's node: our agent's, and kube-proxy's iptables and
    /// nftables rules of each family.
    pub(super) fn programmed(
        pods: &[Ipv4Addr],
        specs: &[SvcSpec],
        kube_proxy: bool,
    ) -> anyhow::Result<Self> {
        let mut bed = Self::new(pods)?;
        let [v4, v6] = Family::ALL.map(|f| in_family(specs, f));
        let manifest = super::datapath::manifests(&[&v4, &v6]);
        let capacity = capacity_flags(specs);
        for (mode, rig) in &mut bed.rigs {
            start_agent(*mode, rig, &manifest, &capacity)?;
        }
        if !kube_proxy {
            return Ok(bed);
        }
        let node_ns = |m: Mode| bed.node_ns(m);
        for (family, specs) in [(Family::V4, &v4), (Family::V6, &v6)] {
            let cidr = prefix(family, CLUSTER_NET);
            let rules = kubeproxy::iptables_restore(specs, &cidr);
            match family {
                Family::V4 => kubeproxy::load_iptables(&node_ns(Mode::Iptables), &rules)?,
                Family::V6 => kubeproxy::load_ip6tables(&node_ns(Mode::Iptables), &rules)?,
            }
            kubeproxy::load_nft(
                &node_ns(Mode::Nftables),
                &kubeproxy::nft_ruleset(specs, &cidr),
            )?;
        }
        Ok(bed)
    }

    /// Our tc programs' drops for want of a SNAT port in `family`, so far.
    fn exhausted(&self, family: Family) -> anyhow::Result<u64> {
        let counter = match family {
            Family::V4 => "tc ipv4 drop_snat_exhausted",
            Family::V6 => "tc ipv6 drop_snat_exhausted",
        };
        Ok(self.rig(Mode::Ours).pins.stats()?.of(counter))
    }

    /// (ingress, egress) counters of our tc programs, summed over devices.
    fn tc_runs(&self) -> anyhow::Result<(Runs, Runs)> {
        let links = self.rig(Mode::Ours).pins_path().join("links");
        let sum = |prefix: &str| -> anyhow::Result<Runs> {
            let mut total = Runs::default();
            for dev in ["eth0", "eth1", "eth2"] {
                let r = Runs::of_link(&links.join(format!("{prefix}{dev}")))?;
                total.time += r.time;
                total.count += r.count;
            }
            Ok(total)
        };
        Ok((sum("tc-in-")?, sum("tc-out-")?))
    }
}

/// Map capacities for `specs` in each family (the agent's defaults,
/// 65,536, 131,072 and 262,144, up to N = 10,000): a Service's cluster IP and its wildcard, and a NodePort's
/// frontends at the node's address from inside and from outside, with
/// room to spare; its endpoints, once as backends and twice as slots (a
/// revision and its successor).
fn capacity_flags(specs: &[SvcSpec]) -> [String; 3] {
    let frontends: usize = specs
        .iter()
        .map(|s| if s.node_port.is_some() { 6 } else { 2 })
        .sum();
    let endpoints: usize = specs.iter().map(|s| s.endpoints.len()).sum();
    [
        format!(
            "--bpf-lb-service-map-max={}",
            (frontends + 1024).max(65_536)
        ),
        format!(
            "--bpf-lb-service-backend-map-max={}",
            (endpoints + 1024).max(131_072)
        ),
        format!("--bpf-lb-slot-map-max={}", (2 * endpoints).max(262_144)),
    ]
}

/// Our agent in `mode`'s node, on its three devices, with the mode's flags
/// and map `capacity` flags, from `manifest`; its Node has an InternalIP of each family (each
/// family's NodePort address and SNAT source).
fn start_agent(
    mode: Mode,
    rig: &mut Rig,
    manifest: &str,
    capacity: &[String],
) -> anyhow::Result<()> {
    let [v4, v6] = Family::ALL.map(|f| at(f, mode.node_addr()));
    let node = format!(
        "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {NODE}}}\n\
         status: {{addresses: [{{type: InternalIP, address: \"{v4}\"}}, \
         {{type: InternalIP, address: \"{v6}\"}}]}}\n"
    );
    rig.write_manifest(&(node + manifest))?;
    let mut flags = vec![
        format!("--hostname-override={NODE}"),
        "--devices=eth0,eth1,eth2".to_owned(),
    ];
    flags.extend_from_slice(capacity);
    flags.extend(
        mode.agent_flags()
            .into_iter()
            .flatten()
            .map(|f| f.to_string()),
    );
    rig.start_agent(&flags.iter().map(String::as_str).collect::<Vec<_>>())?;
    Ok(())
}

/// The whole NodePort section: every mode at each N (requests, then
/// packets per second), the SNAT capacity runs, and the `tc_cost` bench.
pub(super) fn measure(plan: &Plan) -> anyhow::Result<NodePort> {
    let mut rows = Vec::new();
    let mut pps_rows = Vec::new();
    for &n in &plan.nodeport_scales {
        eprintln!("== NodePort, N = {n}");
        let (r, p) = every_mode(plan, n, true)?;
        rows.extend(r);
        pps_rows.extend(p);
    }
    pps_rows.extend(ours_pps(plan)?);
    eprintln!("== SNAT ports: fresh-port flows to one remote endpoint");
    let capacity = capacity(plan)?;
    eprintln!("== tc programs on crafted packets");
    Ok(NodePort {
        rows,
        capacity,
        capacity_seconds: capacity_seconds(plan),
        tc_cost: tc_cost::run(plan)?,
        pps: pps_of(plan, pps_rows),
    })
}

/// `--pps-only`: packets per second at each N, on the NodePort section's
/// bed, without its other measurements.
pub(super) fn measure_pps(plan: &Plan) -> anyhow::Result<Pps> {
    let mut rows = Vec::new();
    for &n in &plan.nodeport_scales {
        eprintln!("== packets per second to a NodePort, N = {n}");
        rows.extend(every_mode(plan, n, false)?.1);
    }
    rows.extend(ours_pps(plan)?);
    Ok(pps_of(plan, rows))
}

/// Packets per second at the N of ours alone: the ceiling and our two
/// modes, no kube-proxy rules loaded.
fn ours_pps(plan: &Plan) -> anyhow::Result<Vec<super::results::pps::Row>> {
    let mut rows = Vec::new();
    for &n in &plan.pps_ours_scales {
        eprintln!("== packets per second to a NodePort, N = {n}, ours only");
        let pods = pods(plan);
        let bed = Bed::programmed(&pods, &services(n, &pods, plan.endpoints), false)?;
        rows.extend(pps::measure(plan, n, &bed, pods.len(), &PpsMode::OURS)?);
    }
    Ok(rows)
}

/// The endpoints' addresses.
fn pods(plan: &Plan) -> Vec<Ipv4Addr> {
    (0..plan.endpoints)
        .map(|i| Ipv4Addr::new(10, 42, 0, i as u8 + 1))
        .collect()
}

fn pps_of(plan: &Plan, rows: Vec<super::results::pps::Row>) -> Pps {
    Pps {
        rows,
        flows: pps::FLOWS,
        frame_len: pps::FRAME_LEN,
        generator_cpu: pps::GENERATOR_CPU,
        seconds: plan.pps_seconds,
        rounds: plan.pps_rounds,
    }
}

/// Every mode at one N in each family on one bed: with `requests`, the
/// request rounds over the plan's rounds (IPv4's then IPv6's); then the
/// packets-per-second runs.
fn every_mode(
    plan: &Plan,
    n: usize,
    requests: bool,
) -> anyhow::Result<(Vec<Row>, Vec<super::results::pps::Row>)> {
    let pods = pods(plan);
    let bed = Bed::programmed(&pods, &services(n, &pods, plan.endpoints), true)?;
    let mut rows = Vec::new();
    if requests {
        for family in Family::ALL {
            rows.extend(rounds_of(plan, n, &bed, &pods, family)?);
        }
    }
    eprintln!("   packets per second");
    let pps = pps::measure(plan, n, &bed, pods.len(), &PpsMode::ALL)?;
    Ok((rows, pps))
}

/// Every mode at one N over `family`.
fn rounds_of(
    plan: &Plan,
    n: usize,
    bed: &Bed,
    pods: &[Ipv4Addr],
    family: Family,
) -> anyhow::Result<Vec<Row>> {
    eprintln!("   over {}", family.name());
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let to = |ip: Ipv4Addr, port: u16| SocketAddr::new(at(family, ip), port).to_string();
    let targets = |mode: Mode, load: Load| match (mode, load) {
        (Mode::Direct, Load::Tcp) => join(pods.iter().map(|&p| to(p, 8080))),
        (Mode::Direct, Load::Udp) => join(pods.iter().map(|&p| to(p, 5353))),
        (_, Load::Tcp) => to(mode.node_addr(), TCP_NODE_PORT),
        (_, Load::Udp) => to(mode.node_addr(), UDP_NODE_PORT),
    };
    // Ours: what the tc programs ran during each measurement.
    let mut tc: Vec<(Load, Runs, Runs)> = Vec::new();
    let (c, t) = (plan.concurrency.to_string(), plan.seconds.to_string());
    let what = format!("NodePort over {} ", family.name());
    let modes = rounds::drive(plan.rounds, n, &what, &Mode::ALL, |mode: Mode, load| {
        let client = bed.ns(&format!("c{}", mode.k()));
        if matches!(mode, Mode::Iptables | Mode::Nftables) {
            flush_conntrack(&node_ns(mode))?;
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
    })?;
    Ok(modes
        .into_iter()
        .map(|(mode, runs)| Row {
            family,
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

/// Empties a kube-proxy node's conntrack table, of both families.
fn flush_conntrack(ns: &str) -> anyhow::Result<()> {
    for family in ["ipv4", "ipv6"] {
        exec(ns, &["conntrack", "-F", "-f", family]).context("flushing conntrack")?;
    }
    Ok(())
}

/// Measures [`Capacity`] for ours, iptables and nftables.
pub(super) fn capacity(plan: &Plan) -> anyhow::Result<Vec<Capacity>> {
    let pods = [Ipv4Addr::new(10, 42, 0, 1)];
    let bed = Bed::programmed(&pods, &services(1, &pods, 1), true)?;
    let node_ns = |m: Mode| bed.ns(&format!("n{}", m.k()));
    let seconds = capacity_seconds(plan);
    let c = plan.concurrency.to_string();
    let mut out = Vec::new();
    for (family, mode) in Family::ALL
        .into_iter()
        .flat_map(|f| [Mode::Ours, Mode::Iptables, Mode::Nftables].map(|m| (f, m)))
    {
        let client = bed.ns(&format!("c{}", mode.k()));
        for load in Load::ALL {
            if mode != Mode::Ours {
                flush_conntrack(&node_ns(mode))?;
            }
            let (sub, port) = match load {
                Load::Tcp => ("bench-tcp", TCP_NODE_PORT),
                Load::Udp => ("bench-udp", UDP_NODE_PORT),
            };
            let to = SocketAddr::new(at(family, mode.node_addr()), port).to_string();
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
            let before = bed.exhausted(family)?;
            let report = probe::outside_bench(&client, &args)?;
            let exhausted = (mode == Mode::Ours)
                .then(|| Ok::<_, anyhow::Error>(bed.exhausted(family)? - before))
                .transpose()?;
            eprintln!(
                "   {} {:<9} {load:?} {} flows ({:.0}/s), {} failed",
                family.name(),
                mode.name(),
                report.ok,
                report.rate,
                report.failed
            );
            out.push(Capacity {
                family,
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
