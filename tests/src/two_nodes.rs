//! Two nodes behind a router, each with its pod, for traffic from outside
//! the node through the tc programs, with a real `lb-agent` in each node's
//! namespace (or kube-proxy's rules, for a takeover). Needs root.
//!
//! ```text
//!                   client 203.0.113.2, 2001:db8:c::2
//!                          |
//!                   router 203.0.113.1, 2001:db8:c::1;
//!                          192.168.57.254, fd00:57::fe (bridge)
//!                     /                          \
//!   node-1 eth0 192.168.57.1, fd00:57::1   node-2 eth0 192.168.57.2, fd00:57::2
//!        |                                        |              \
//!   pod p1 10.42.1.2, fd42:1::2              pod p2 10.42.2.2,    pod p3 10.42.2.130,
//!                                                   fd42:2::2            fd42:2::1:2
//! ```
//!
//! Node-1's pod CIDRs are 10.42.1.0/24 and fd42:1::/64, node-2's
//! 10.42.2.0/24 and fd42:2::/64 (p3 is in a /25 and a /112 of node-2's of
//! its own, routed by node-2 to its veth).
//!
//! Every link is dual-stack, and both families are routed alike (duplicate
//! address detection is off, so every address is usable at once). The
//! client is in no test cgroup, so no socket hook touches its
//! connections: only the tc programs on a node's `eth0` can reach a pod
//! through that node's NodePort, or through the external and load-balancer
//! IPs (198.51.100.0/24 and 2001:db8:e::/64, which the router sends to
//! node-1 and no namespace owns). Each agent finds its device itself (the
//! one holding its Node's address). Nodes route the other node's pods to it
//! directly (or through the router: [`Bed::route_pods_through_router`]), so
//! a backend answers a flow it got unSNATed straight to the client through
//! the router, and one it got SNATed to the node that sent it: which
//! address the backend saw tells.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    ops::Deref,
    time::{Duration, Instant},
};

use anyhow::bail;
use lb_fixtures::{Ep, Node, Object, Slice, Svc, SvcPort};

use crate::{
    agent::Agent,
    http,
    netns::{Namespaces, exec, ip, no_dad, sysctl, veth},
    probe::{Report, Server, outside_client},
    require_root,
    rig::Rig,
    unique,
};

pub const CLIENT: &str = "203.0.113.2";
pub const NODE1: &str = "192.168.57.1";
pub const NODE2: &str = "192.168.57.2";
pub const EXTERNAL_IP: &str = "198.51.100.10";
/// `proxied`'s load-balancer IP (`ipMode: Proxy`): node-1 routes it to p1,
/// which owns it and answers on port 80 as `proxy`, as a proxying load
/// balancer would.
pub const PROXY_IP: &str = "198.51.100.30";
/// The IPv6 addresses of the client and the nodes (each node's Node object
/// has both, so each family has its NodePort address and its SNAT source).
pub const CLIENT6: &str = "2001:db8:c::2";
pub const NODE1_6: &str = "fd00:57::1";
pub const NODE2_6: &str = "fd00:57::2";
/// The pods' IPv6 addresses.
pub const P1_6: &str = "fd42:1::2";
pub const P2_6: &str = "fd42:2::2";
/// Pod `p3`, the second on node-2 (it serves nothing unless a test starts
/// a server there: a client on the node of another pod).
pub const P3: &str = "10.42.2.130";
pub const P3_6: &str = "fd42:2::1:2";
/// An IPv6 external IP; the router sends 2001:db8:e::/64 to node-1.
pub const EXTERNAL_IP6: &str = "2001:db8:e::10";
/// `lonely`'s health-check port.
pub const HC_PORT: u16 = 32100;

/// Namespaces `<name>-{c,r,n1,n2,p1,p2,p3}`, deleted on drop.
pub struct Nodes {
    namespaces: Namespaces,
}

impl Nodes {
    pub fn ns(&self, host: &str) -> String {
        self.namespaces.ns(host)
    }

    pub fn new(name: &str) -> anyhow::Result<Self> {
        let mut namespaces = Namespaces::new(name);
        let [c, r, n1, n2, p1, p2, p3] = [
            namespaces.add("c")?,
            namespaces.add("r")?,
            namespaces.add("n1")?,
            namespaces.add("n2")?,
            namespaces.add("p1")?,
            namespaces.add("p2")?,
            namespaces.add("p3")?,
        ];
        // Before any interface exists, so that link-local addresses are
        // not tentative either.
        for ns in [&c, &r, &n1, &n2, &p1, &p2, &p3] {
            no_dad(ns)?;
        }
        veth(
            (&c, "eth0", Some(&format!("{CLIENT}/24"))),
            (&r, "eth0", Some("203.0.113.1/24")),
        )?;
        ip(&["-n", &r, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &r, "addr", "add", "192.168.57.254/24", "dev", "br0"])?;
        ip(&["-n", &r, "link", "set", "br0", "up"])?;
        for (node, addr, port) in [(&n1, NODE1, "n1"), (&n2, NODE2, "n2")] {
            veth(
                (node, "eth0", Some(&format!("{addr}/24"))),
                (&r, port, None),
            )?;
            ip(&["-n", &r, "link", "set", port, "master", "br0"])?;
        }
        veth(
            (&p1, "eth0", Some("10.42.1.2/24")),
            (&n1, "p1", Some("10.42.1.1/24")),
        )?;
        veth(
            (&p2, "eth0", Some("10.42.2.2/24")),
            (&n2, "p2", Some("10.42.2.1/24")),
        )?;
        // A narrower subnet of node-2's pod CIDR: its connected route
        // wins over p2's.
        veth(
            (&p3, "eth0", Some(&format!("{P3}/25"))),
            (&n2, "p3", Some("10.42.2.129/25")),
        )?;
        for (ns, dev, addr) in [
            (&c, "eth0", format!("{CLIENT6}/64")),
            (&r, "eth0", "2001:db8:c::1/64".to_owned()),
            (&r, "br0", "fd00:57::fe/64".to_owned()),
            (&n1, "eth0", format!("{NODE1_6}/64")),
            (&n2, "eth0", format!("{NODE2_6}/64")),
            (&p1, "eth0", format!("{P1_6}/64")),
            (&n1, "p1", "fd42:1::1/64".to_owned()),
            (&p2, "eth0", format!("{P2_6}/64")),
            (&n2, "p2", "fd42:2::1/64".to_owned()),
            (&p3, "eth0", format!("{P3_6}/112")),
            (&n2, "p3", "fd42:2::1:1/112".to_owned()),
        ] {
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev, "nodad"])?;
        }
        for (ns, via) in [
            (&c, "203.0.113.1"),
            (&n1, "192.168.57.254"),
            (&n2, "192.168.57.254"),
            (&p1, "10.42.1.1"),
            (&p2, "10.42.2.1"),
            (&p3, "10.42.2.129"),
            (&c, "2001:db8:c::1"),
            (&n1, "fd00:57::fe"),
            (&n2, "fd00:57::fe"),
            (&p1, "fd42:1::1"),
            (&p2, "fd42:2::1"),
            (&p3, "fd42:2::1:1"),
        ] {
            ip(&["-n", ns, "route", "add", "default", "via", via])?;
        }
        for (ns, to, via) in [
            (&r, "198.51.100.0/24", NODE1),
            (&n1, "10.42.2.0/24", NODE2),
            (&n2, "10.42.1.0/24", NODE1),
            (&n1, &format!("{PROXY_IP}/32"), "10.42.1.2"),
            (&r, "2001:db8:e::/64", NODE1_6),
            (&n1, "fd42:2::/64", NODE2_6),
            (&n2, "fd42:1::/64", NODE1_6),
        ] {
            ip(&["-n", ns, "route", "add", to, "via", via])?;
        }
        ip(&[
            "-n",
            &p1,
            "addr",
            "add",
            &format!("{PROXY_IP}/32"),
            "dev",
            "lo",
        ])?;
        for ns in [&r, &n1, &n2] {
            sysctl(
                ns,
                &[
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.send_redirects=0",
                    "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv6.conf.all.forwarding=1",
                ],
            )?;
        }
        Ok(Self { namespaces })
    }
}

/// Pod `p1`, ready, on node-1.
pub fn p1() -> Ep {
    Ep::new("10.42.1.2").ready(true).node("node-1")
}

/// Pod `p2`, ready, on node-2.
pub fn p2() -> Ep {
    Ep::new("10.42.2.2").ready(true).node("node-2")
}

/// Pod `p1`'s IPv6 address, ready, on node-1.
pub fn p1_6() -> Ep {
    Ep::new(P1_6).ready(true).node("node-1")
}

/// Pod `p2`'s IPv6 address, ready, on node-2.
pub fn p2_6() -> Ep {
    Ep::new(P2_6).ready(true).node("node-2")
}

/// Node objects `node-1` and `node-2` with their addresses, an InternalIP
/// of each family, and their pod CIDRs.
pub fn node_objects() -> [Object; 2] {
    [
        Node::new("node-1")
            .address("InternalIP", NODE1)
            .address("InternalIP", NODE1_6)
            .pod_cidr("10.42.1.0/24")
            .pod_cidr("fd42:1::/64")
            .into(),
        Node::new("node-2")
            .address("InternalIP", NODE2)
            .address("InternalIP", NODE2_6)
            .pod_cidr("10.42.2.0/24")
            .pod_cidr("fd42:2::/64")
            .into(),
    ]
}

/// A NodePort Service on `ip`: `http` (TCP 80) and `dns` (UDP 53), both
/// on `node_port`.
pub fn node_port_svc(name: &str, ip: &str, node_port: u16) -> Svc {
    Svc::new("default", name)
        .type_("NodePort")
        .cluster_ip(ip)
        .with_port(SvcPort::new("http", 80, "TCP").node_port(node_port.into()))
        .with_port(SvcPort::new("dns", 53, "UDP").node_port(node_port.into()))
}

/// `svc`'s slice `<svc>-1` on `endpoints`, with the ports the pods serve:
/// `http` (TCP 8080) and `dns` (UDP 5353).
pub fn slice(svc: &str, endpoints: Vec<Ep>) -> Slice {
    Slice::new("default", &format!("{svc}-1"))
        .service(svc)
        .port("http", 8080, "TCP")
        .port("dns", 5353, "UDP")
        .endpoints(endpoints)
}

/// `svc` (with its IPv4 cluster IP) made dual-stack, with `ipv6` second.
pub fn dual_stack(svc: Svc, ipv6: &str) -> Svc {
    let ipv4 = svc.clone().build().spec.and_then(|s| s.cluster_ip);
    let ipv4 = ipv4.expect("an IPv4 cluster IP first");
    svc.cluster_ips(&[&ipv4, ipv6])
        .ip_families(&["IPv4", "IPv6"])
        .ip_family_policy("RequireDualStack")
}

/// [`slice`]'s IPv6 twin, `<svc>-6`, for IPv6 endpoints ([`p1_6`], [`p2_6`]).
pub fn slice6(svc: &str, endpoints: Vec<Ep>) -> Slice {
    Slice::new("default", &format!("{svc}-6"))
        .service(svc)
        .address_type("IPv6")
        .port("http", 8080, "TCP")
        .port("dns", 5353, "UDP")
        .endpoints(endpoints)
}

/// `host`:`port` as a socket address: `[host]:port` for IPv6.
pub fn addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The `<pod> from <address>` answers of `r`, after checking that all `n`
/// requests were answered and the client saw only `to` as its peer.
pub fn answers<'a>(r: &'a Report, n: u32, to: &str) -> BTreeSet<&'a str> {
    assert_eq!((r.ok(), r.failed()), (n, 0), "{to}: {r:?}");
    let peers: BTreeSet<&str> = r.peers.keys().map(String::as_str).collect();
    assert_eq!(peers, BTreeSet::from([to]), "{to}: {r:?}");
    r.replies.keys().map(String::as_str).collect()
}

/// One node of the bed: its namespace's short name, its Node name, and
/// the [`Rig`] of its agent, which runs in the node's namespace (the rig's
/// fields and methods, `node.pins` ..., are the node's).
pub struct NodeBed {
    pub host: &'static str,
    pub name: &'static str,
    rig: Rig,
}

impl Deref for NodeBed {
    type Target = Rig;

    fn deref(&self) -> &Rig {
        &self.rig
    }
}

pub struct Bed {
    pub nodes: Nodes,
    pub node1: NodeBed,
    pub node2: NodeBed,
    _servers: Vec<Server>,
}

impl Bed {
    /// The nodes, pods `p1` and `p2` (each serving its name on TCP 8080
    /// and UDP 5353) and `proxy` (TCP 80 in p1), and `manifest` as the
    /// agents' source.
    pub fn new(manifest: &str) -> anyhow::Result<Self> {
        require_root();
        let name = unique("np");
        let nodes = Nodes::new(&name)?;
        let (p1, p2) = (nodes.ns("p1"), nodes.ns("p2"));
        let servers = vec![
            Server::start(&p1, "p1", &[8080], &[5353])?,
            Server::start(&p2, "p2", &[8080], &[5353])?,
            Server::start(&p1, "proxy", &[80], &[])?,
        ];
        let node = |host, node_name| -> anyhow::Result<NodeBed> {
            let rig = Rig::in_netns(&format!("{name}-{host}"), &nodes.ns(host))?;
            rig.write_manifest(manifest)?;
            Ok(NodeBed {
                host,
                name: node_name,
                rig,
            })
        };
        Ok(Self {
            node1: node("n1", "node-1")?,
            node2: node("n2", "node-2")?,
            _servers: servers,
            nodes,
        })
    }

    /// Starts `node`'s agent in its namespace, on the devices it finds.
    pub fn agent(&self, node: &NodeBed) -> anyhow::Result<Agent> {
        self.agent_with(node, &[])
    }

    /// Starts `node`'s agent in its namespace with `args` besides its name,
    /// and waits for its first sync.
    pub fn agent_with(&self, node: &NodeBed, args: &[&str]) -> anyhow::Result<Agent> {
        let name = format!("--hostname-override={}", node.name);
        let args: Vec<&str> = std::iter::once(name.as_str())
            .chain(args.iter().copied())
            .collect();
        let mut agent = node.launch(&args)?;
        agent.wait_syncs(1)?;
        Ok(agent)
    }

    pub fn client(&self, args: &[&str]) -> anyhow::Result<Report> {
        outside_client(&self.nodes.ns("c"), args)
    }

    /// Waits until the client reaches `to`, the tc programs being attached.
    pub fn wait_reachable(&self, to: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.client(&["tcp", "--to", to])?.ok() != 1 {
            if Instant::now() > deadline {
                bail!("{to} never answered");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The client's GET of a node's health-check port, once it answers
    /// `status` (the listeners follow the syncs), for at most 20 s.
    pub fn health(&self, node: &str, status: u16) -> anyhow::Result<http::Answer> {
        let addr: SocketAddr = format!("{node}:{HC_PORT}").parse()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let last = http::request_in(&self.nodes.ns("c"), addr, "GET", "/healthz");
            match &last {
                Ok(a) if a.status == status => return last,
                _ if Instant::now() > deadline => {
                    bail!("{addr} never answered {status}; last: {last:?}")
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Replaces both agents' source; they read it within a second.
    pub fn write_manifest(&self, manifest: &str) -> anyhow::Result<()> {
        self.node1.write_manifest(manifest)?;
        self.node2.write_manifest(manifest)
    }

    /// Narrows the router's way back to the client, in both families, to
    /// 1,280 bytes (IPv6's minimum) while every link stays at 1,500, so that
    /// only path-MTU discovery carries a large reply: the router's
    /// "fragmentation needed" or Packet Too Big must reach the socket that
    /// sent it.
    pub fn narrow_way_to_client(&self) -> anyhow::Result<()> {
        // The kernel's own routes, replaced with their metric: an IPv6
        // route replaced without its metric is added beside it instead,
        // and shadowed.
        self.narrow(&["-4", "203.0.113.0/24", "dev", "eth0"])?;
        self.narrow(&["-6", "2001:db8:c::/64", "dev", "eth0", "metric", "256"])
    }

    /// Makes the nodes reach each other's pods through the router, at the
    /// IP level, rather than straight across the bridge, as nodes in
    /// different subnets or behind a top-of-rack router do: every packet
    /// between a node and the other node's pod crosses the router, which
    /// (IPv4) drops one that carries its own address as the source.
    pub fn route_pods_through_router(&self) -> anyhow::Result<()> {
        for (host, to, via) in [
            ("r", "10.42.1.0/24", NODE1),
            ("r", "10.42.2.0/24", NODE2),
            ("r", "fd42:1::/64", NODE1_6),
            ("r", "fd42:2::/64", NODE2_6),
            ("n1", "10.42.2.0/24", "192.168.57.254"),
            ("n2", "10.42.1.0/24", "192.168.57.254"),
            ("n1", "fd42:2::/64", "fd00:57::fe"),
            ("n2", "fd42:1::/64", "fd00:57::fe"),
        ] {
            self.exec(host, &["ip", "route", "replace", to, "via", via])?;
        }
        // It sends those packets back out of the bridge they came in on:
        // no redirect, which would take it off the path again.
        sysctl(&self.nodes.ns("r"), &["net.ipv4.conf.br0.send_redirects=0"])
    }

    /// Narrows the router's way to node-2's pod, in both families, to
    /// 1,280 bytes, as [`Self::narrow_way_to_client`] its way to the client;
    /// after [`Self::route_pods_through_router`], whose routes it replaces.
    pub fn narrow_way_to_p2(&self) -> anyhow::Result<()> {
        self.narrow(&["-4", "10.42.2.0/24", "via", NODE2])?;
        self.narrow(&["-6", "fd42:2::/64", "via", NODE2_6])
    }

    /// Replaces the router's `route` (`ip route replace` arguments, the
    /// family first) with one whose MTU is 1,280 and locked (`mtu lock`,
    /// which a router forwards with whatever path MTU it might learn).
    fn narrow(&self, route: &[&str]) -> anyhow::Result<()> {
        let mut cmd = vec!["ip", route[0], "route", "replace"];
        cmd.extend_from_slice(&route[1..]);
        cmd.extend_from_slice(&["mtu", "lock", "1280"]);
        self.exec("r", &cmd).map(drop)
    }

    /// Runs `cmd` in `host`'s namespace (`c`, `r`, `n1`, `n2`, `p1`, `p2`,
    /// `p3`).
    pub fn exec(&self, host: &str, cmd: &[&str]) -> anyhow::Result<String> {
        exec(&self.nodes.ns(host), cmd)
    }
}
