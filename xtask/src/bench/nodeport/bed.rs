//! The NodePort bed of one N: the namespaces (see [`super`]'s drawing),
//! the pods' servers, N NodePort Services programmed in every mode's node
//! (our agent's, kube-proxy's iptables and nftables rules of each family),
//! and what is read off the node of ours between runs.

use std::net::Ipv4Addr;

use anyhow::Context as _;
use lb_tests::{
    kubeproxy::{self, Proto, SvcSpec},
    netns::{Namespaces, XdpPass, exec, ip, no_dad, sysctl, tx_checksum_off, veth, xdp_pass},
    probe::Server,
    progstats::Runs,
    rig::Rig,
    unique,
};

use super::{
    super::{
        manifests::manifests,
        results::nodeport::{Family, Mode},
    },
    net::{CLUSTER_NET, SINK_NET, addrs, at, in_family, prefix, route},
};

/// The node ours runs as; its Node object carries the NodePort addresses.
const NODE: &str = "bench-node";
/// The measured NodePorts, after every filler's (20000 + i).
pub(super) const TCP_NODE_PORT: u16 = 30080;
pub(super) const UDP_NODE_PORT: u16 = 30053;
/// The UDP NodePort whose endpoints are behind each node's sink.
pub(super) const SINK_NODE_PORT: u16 = 30054;
const FILLER_NODE_PORT: u16 = 20000;
/// How many fillers get NodePorts (20000..30000).
const FILLER_NODE_PORTS: usize = 10_000;

/// N NodePort Services: N-1 fillers (NodePorts 20000 + i), then the
/// measured ones: the sink's and the pods' UDP ones and the pods' TCP one
/// (TCP last, the worst case for iptables' linear `KUBE-NODEPORTS`). Their
/// IPv4 addresses; see [`in_family`].
pub(super) fn services(n: usize, pods: &[Ipv4Addr], filler_endpoints: usize) -> Vec<SvcSpec> {
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
        let manifest = manifests(&[&v4, &v6]);
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
    pub(super) fn exhausted(&self, family: Family) -> anyhow::Result<u64> {
        let counter = match family {
            Family::V4 => "tc ipv4 drop_snat_exhausted",
            Family::V6 => "tc ipv6 drop_snat_exhausted",
        };
        Ok(self.rig(Mode::Ours).pins.stats()?.of(counter))
    }

    /// (ingress, egress) counters of our tc programs, summed over devices.
    pub(super) fn tc_runs(&self) -> anyhow::Result<(Runs, Runs)> {
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

/// Empties a kube-proxy node's conntrack table, of both families.
pub(super) fn flush_conntrack(ns: &str) -> anyhow::Result<()> {
    for family in ["ipv4", "ipv6"] {
        exec(ns, &["conntrack", "-F", "-f", family]).context("flushing conntrack")?;
    }
    Ok(())
}
