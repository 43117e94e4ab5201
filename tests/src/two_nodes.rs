//! Two nodes behind a router, each with its pod, for traffic from outside
//! the node through the tc programs, with a real `lb-agent` in each node's
//! namespace (or kube-proxy's rules, for a takeover). Needs root.
//!
//! ```text
//!                   client 203.0.113.2
//!                          |
//!                   router 203.0.113.1, 192.168.57.254 (bridge)
//!                     /                          \
//!   node-1 eth0 192.168.57.1             node-2 eth0 192.168.57.2
//!        |                                        |
//!   pod p1 10.42.1.2                         pod p2 10.42.2.2
//! ```
//!
//! The client is in no test cgroup, so no socket hook touches its
//! connections: only the tc programs on a node's `eth0` can reach a pod
//! through that node's NodePort, or through the external and load-balancer
//! IPs (198.51.100.0/24, which the router sends to node-1 and no namespace
//! owns). Each agent finds its device itself (the one holding its Node's
//! address). Nodes route the other node's pods to it directly, so a backend
//! answers a flow it got unSNATed straight to the client through the
//! router, and one it got SNATed to the node that sent it: which address
//! the backend saw tells.

use std::{
    collections::BTreeSet,
    fs,
    net::SocketAddr,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::bail;

use crate::{
    agent::{Agent, PinDir},
    cgroup::TestCgroup,
    http,
    netns::{exec, ip},
    probe::{Report, Server, outside_client},
    require_root, unique,
};

pub const CLIENT: &str = "203.0.113.2";
pub const NODE1: &str = "192.168.57.1";
pub const NODE2: &str = "192.168.57.2";
pub const EXTERNAL_IP: &str = "198.51.100.10";
/// `proxied`'s load-balancer IP (`ipMode: Proxy`): node-1 routes it to p1,
/// which owns it and answers on port 80 as `proxy`, as a proxying load
/// balancer would.
pub const PROXY_IP: &str = "198.51.100.30";
/// `lonely`'s health-check port.
pub const HC_PORT: u16 = 32100;

pub const HOSTS: [&str; 6] = ["c", "r", "n1", "n2", "p1", "p2"];

/// Namespaces `<name>-{c,r,n1,n2,p1,p2}`, deleted on drop.
pub struct Nodes {
    name: String,
}

impl Nodes {
    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.name)
    }

    pub fn new(name: &str) -> anyhow::Result<Self> {
        let nodes = Self {
            name: name.to_owned(),
        };
        for host in HOSTS {
            let ns = nodes.ns(host);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let [c, r, n1, n2, p1, p2] = HOSTS.map(|h| nodes.ns(h));
        nodes.link(
            &c,
            "eth0",
            Some(&format!("{CLIENT}/24")),
            &r,
            "eth0",
            Some("203.0.113.1/24"),
        )?;
        ip(&["-n", &r, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &r, "addr", "add", "192.168.57.254/24", "dev", "br0"])?;
        ip(&["-n", &r, "link", "set", "br0", "up"])?;
        for (node, addr, port) in [(&n1, NODE1, "n1"), (&n2, NODE2, "n2")] {
            nodes.link(node, "eth0", Some(&format!("{addr}/24")), &r, port, None)?;
            ip(&["-n", &r, "link", "set", port, "master", "br0"])?;
        }
        nodes.link(
            &p1,
            "eth0",
            Some("10.42.1.2/24"),
            &n1,
            "p1",
            Some("10.42.1.1/24"),
        )?;
        nodes.link(
            &p2,
            "eth0",
            Some("10.42.2.2/24"),
            &n2,
            "p2",
            Some("10.42.2.1/24"),
        )?;
        for (ns, via) in [
            (&c, "203.0.113.1"),
            (&n1, "192.168.57.254"),
            (&n2, "192.168.57.254"),
            (&p1, "10.42.1.1"),
            (&p2, "10.42.2.1"),
        ] {
            ip(&["-n", ns, "route", "add", "default", "via", via])?;
        }
        for (ns, to, via) in [
            (&r, "198.51.100.0/24", NODE1),
            (&n1, "10.42.2.0/24", NODE2),
            (&n2, "10.42.1.0/24", NODE1),
            (&n1, &format!("{PROXY_IP}/32"), "10.42.1.2"),
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
            exec(
                ns,
                &[
                    "sysctl",
                    "-qw",
                    "net.ipv4.ip_forward=1",
                    "net.ipv4.conf.all.send_redirects=0",
                    "net.ipv4.conf.all.rp_filter=0",
                ],
            )?;
        }
        Ok(nodes)
    }

    /// A veth pair: `a_if` in `a`, `b_if` in `b`, with their addresses.
    pub fn link(
        &self,
        a: &str,
        a_if: &str,
        a_addr: Option<&str>,
        b: &str,
        b_if: &str,
        b_addr: Option<&str>,
    ) -> anyhow::Result<()> {
        ip(&[
            "link", "add", "name", "lbtveth0", "netns", a, "type", "veth", "peer", "name",
            "lbtveth1", "netns", b,
        ])?;
        ip(&["-n", a, "link", "set", "lbtveth0", "name", a_if])?;
        ip(&["-n", b, "link", "set", "lbtveth1", "name", b_if])?;
        for (ns, dev, addr) in [(a, a_if, a_addr), (b, b_if, b_addr)] {
            if let Some(addr) = addr {
                ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            }
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for host in HOSTS {
            let _ = ip(&["netns", "del", &self.ns(host)]);
        }
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

/// One node of the bed: its namespace's short name, Node name, and the
/// agent's pins and cgroup.
pub struct NodeBed {
    pub host: &'static str,
    pub name: &'static str,
    pub pins: PinDir,
    pub cgroup: TestCgroup,
}

pub struct Bed {
    pub nodes: Nodes,
    pub node1: NodeBed,
    pub node2: NodeBed,
    pub manifest: PathBuf,
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
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir)?;
        let path = dir.join("services.yaml");
        fs::write(&path, manifest)?;
        let node = |host, node_name| -> anyhow::Result<NodeBed> {
            let id = format!("{name}-{host}");
            Ok(NodeBed {
                host,
                name: node_name,
                pins: PinDir::new(&id),
                cgroup: TestCgroup::new(&id)?,
            })
        };
        Ok(Self {
            node1: node("n1", "node-1")?,
            node2: node("n2", "node-2")?,
            manifest: path,
            _servers: servers,
            nodes,
        })
    }

    /// Starts `node`'s agent in its namespace, on the devices it finds.
    pub fn agent(&self, node: &NodeBed) -> anyhow::Result<Agent> {
        self.agent_with(node, &[])
    }

    /// Starts `node`'s agent in its namespace with `args` besides its name.
    pub fn agent_with(&self, node: &NodeBed, args: &[&str]) -> anyhow::Result<Agent> {
        let name = format!("--hostname-override={}", node.name);
        let args: Vec<&str> = std::iter::once(name.as_str())
            .chain(args.iter().copied())
            .collect();
        let mut agent = Agent::start_in(
            &self.nodes.ns(node.host),
            &self.manifest,
            node.cgroup.path(),
            node.pins.path(),
            &args,
        )?;
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

    /// Replaces the agents' source; they read it within a second.
    pub fn write_manifest(&self, manifest: &str) -> anyhow::Result<()> {
        fs::write(&self.manifest, manifest)?;
        Ok(())
    }

    /// Runs `cmd` in `host`'s namespace (`c`, `r`, `n1`, `n2`, `p1`, `p2`).
    pub fn exec(&self, host: &str, cmd: &[&str]) -> anyhow::Result<String> {
        exec(&self.nodes.ns(host), cmd)
    }
}
