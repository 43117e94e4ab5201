//! Traffic from outside the node through the tc programs, with real sockets
//! in network namespaces and the real `lb-agent` running in its node's
//! namespace. Needs root; fails loudly without it.
//!
//! ```text
//! client 203.0.113.2 --eth0-- node-1 203.0.113.1 --eth1 192.168.57.1/.2-- node-2
//!                               |  (agent, --devices eth0,eth1)             |
//!                              pod p1 10.42.1.2                            pod p2 10.42.2.2
//! ```
//!
//! The client is in no test cgroup, so no socket hook touches its
//! connections: only the tc programs on node-1's devices can reach a pod
//! through node-1's NodePort or the external IP 198.51.100.10 (which no
//! namespace owns). node-2 runs no agent; it routes node-1's addresses back
//! to node-1, so a backend there answers a flow from the client directly to
//! node-1 whether or not it was SNATed: which address the backend saw tells.

use std::{
    collections::BTreeSet,
    fs,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::bail;
use lb_fixtures::{Ep, Node, Object, Slice, Svc, SvcPort, yaml};
use lb_tests::{
    agent::{Agent, PinDir},
    cgroup::TestCgroup,
    netns::{exec, ip},
    probe::{Held, Report, Server, outside_client},
    require_root, unique,
};

const CLIENT: &str = "203.0.113.2";
const NODE1: &str = "203.0.113.1";
const EXTERNAL_IP: &str = "198.51.100.10";

/// Namespaces `<name>-{c,n1,n2,p1,p2}`, deleted on drop.
struct Nodes {
    name: String,
}

impl Nodes {
    fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.name)
    }

    fn new(name: &str) -> anyhow::Result<Self> {
        let nodes = Self {
            name: name.to_owned(),
        };
        for host in ["c", "n1", "n2", "p1", "p2"] {
            let ns = nodes.ns(host);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let (c, n1, n2, p1, p2) = (
            nodes.ns("c"),
            nodes.ns("n1"),
            nodes.ns("n2"),
            nodes.ns("p1"),
            nodes.ns("p2"),
        );
        nodes.link(
            &c,
            "eth0",
            &format!("{CLIENT}/24"),
            &n1,
            "eth0",
            &format!("{NODE1}/24"),
        )?;
        nodes.link(
            &n1,
            "eth1",
            "192.168.57.1/24",
            &n2,
            "eth1",
            "192.168.57.2/24",
        )?;
        nodes.link(&p1, "eth0", "10.42.1.2/24", &n1, "p1", "10.42.1.1/24")?;
        nodes.link(&p2, "eth0", "10.42.2.2/24", &n2, "p2", "10.42.2.1/24")?;
        for (ns, via) in [(&c, NODE1), (&p1, "10.42.1.1"), (&p2, "10.42.2.1")] {
            ip(&["-n", ns, "route", "add", "default", "via", via])?;
        }
        ip(&[
            "-n",
            &n1,
            "route",
            "add",
            "10.42.2.0/24",
            "via",
            "192.168.57.2",
        ])?;
        ip(&[
            "-n",
            &n2,
            "route",
            "add",
            "203.0.113.0/24",
            "via",
            "192.168.57.1",
        ])?;
        for ns in [&n1, &n2] {
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

    /// A veth pair: `a_if` in `a` with `a_addr`, `b_if` in `b` with `b_addr`.
    fn link(
        &self,
        a: &str,
        a_if: &str,
        a_addr: &str,
        b: &str,
        b_if: &str,
        b_addr: &str,
    ) -> anyhow::Result<()> {
        ip(&[
            "link", "add", "name", "lbtveth0", "netns", a, "type", "veth", "peer", "name",
            "lbtveth1", "netns", b,
        ])?;
        ip(&["-n", a, "link", "set", "lbtveth0", "name", a_if])?;
        ip(&["-n", b, "link", "set", "lbtveth1", "name", b_if])?;
        for (ns, dev, addr) in [(a, a_if, a_addr), (b, b_if, b_addr)] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        Ok(())
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for host in ["c", "n1", "n2", "p1", "p2"] {
            let _ = ip(&["netns", "del", &self.ns(host)]);
        }
    }
}

/// Node `node-1` (InternalIP 203.0.113.1), and Services with one endpoint
/// on each node: `cluster` (eTP Cluster, NodePort 30080 TCP and UDP, the
/// external IP), `local` (eTP Local, NodePort 30081), and the
/// LoadBalancers `guarded` (198.51.100.20, source ranges holding the
/// client's address) and `shut` (198.51.100.21, ranges without it); and
/// `empty` (NodePort 30082), without endpoints.
fn manifest() -> String {
    let slice = |svc: &str| {
        Slice::new("default", &format!("{svc}-1"))
            .service(svc)
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .endpoints([
                Ep::new("10.42.1.2").ready(true).node("node-1"),
                Ep::new("10.42.2.2").ready(true).node("node-2"),
            ])
    };
    yaml([
        Object::from(Node::new("node-1").address("InternalIP", NODE1)),
        Svc::new("default", "cluster")
            .type_("NodePort")
            .cluster_ip("10.96.57.1")
            .external_ips(&[EXTERNAL_IP])
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30080))
            .with_port(SvcPort::new("dns", 53, "UDP").node_port(30080))
            .into(),
        slice("cluster").into(),
        Svc::new("default", "local")
            .type_("NodePort")
            .cluster_ip("10.96.57.2")
            .external_traffic_policy("Local")
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30081))
            .with_port(SvcPort::new("dns", 53, "UDP").node_port(30081))
            .into(),
        slice("local").into(),
        Svc::new("default", "guarded")
            .type_("LoadBalancer")
            .cluster_ip("10.96.57.4")
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30083))
            .lb_ingress("198.51.100.20", Some("VIP"))
            .source_ranges(&["203.0.113.0/25"])
            .into(),
        slice("guarded").into(),
        Svc::new("default", "shut")
            .type_("LoadBalancer")
            .cluster_ip("10.96.57.5")
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30084))
            .lb_ingress("198.51.100.21", Some("VIP"))
            .source_ranges(&["192.0.2.0/24"])
            .into(),
        slice("shut").into(),
        Svc::new("default", "empty")
            .type_("NodePort")
            .cluster_ip("10.96.57.3")
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30082))
            .with_port(SvcPort::new("dns", 53, "UDP").node_port(30082))
            .into(),
    ])
}

/// The `<pod> from <address>` answers of `r`, after checking that all `n`
/// requests were answered and the client saw only `to` as its peer.
fn answers<'a>(r: &'a Report, n: u32, to: &str) -> BTreeSet<&'a str> {
    assert_eq!((r.ok(), r.failed()), (n, 0), "{to}: {r:?}");
    let peers: BTreeSet<&str> = r.peers.keys().map(String::as_str).collect();
    assert_eq!(peers, BTreeSet::from([to]), "{to}: {r:?}");
    r.replies.keys().map(String::as_str).collect()
}

struct Bed {
    nodes: Nodes,
    pins: PinDir,
    cgroup: TestCgroup,
    manifest: PathBuf,
    _servers: Vec<Server>,
}

impl Bed {
    fn new() -> anyhow::Result<Self> {
        require_root();
        let name = unique("np");
        let nodes = Nodes::new(&name)?;
        let servers = vec![
            Server::start(&nodes.ns("p1"), "p1", &[8080], &[5353])?,
            Server::start(&nodes.ns("p2"), "p2", &[8080], &[5353])?,
        ];
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir)?;
        let path = dir.join("services.yaml");
        fs::write(&path, manifest())?;
        Ok(Self {
            pins: PinDir::new(&name),
            cgroup: TestCgroup::new(&name)?,
            manifest: path,
            _servers: servers,
            nodes,
        })
    }

    fn agent(&self) -> anyhow::Result<Agent> {
        let mut agent = Agent::start_in(
            &self.nodes.ns("n1"),
            &self.manifest,
            self.cgroup.path(),
            self.pins.path(),
            &["--hostname-override=node-1", "--devices=eth0,eth1"],
        )?;
        agent.wait_syncs(1)?;
        Ok(agent)
    }

    fn client(&self, args: &[&str]) -> anyhow::Result<Report> {
        outside_client(&self.nodes.ns("c"), args)
    }

    /// Waits until the client reaches `to`, the tc programs being attached.
    fn wait_reachable(&self, to: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.client(&["tcp", "--to", to])?.ok() != 1 {
            if Instant::now() > deadline {
                bail!("{to} never answered");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

#[test]
fn nodeports_and_external_ips_reach_pods_on_both_nodes_from_outside() -> anyhow::Result<()> {
    let bed = Bed::new()?;
    let mut agent = bed.agent()?;
    let node_port = format!("{NODE1}:30080");
    bed.wait_reachable(&node_port)?;

    // eTP Cluster: both pods; the pod on this node sees the client, the
    // one on node-2 sees node-1 (SNAT), so its answer comes back through
    // node-1, which gives it the NodePort's address again.
    let (p1_sees_client, p2_sees_node) = (format!("p1 from {CLIENT}"), format!("p2 from {NODE1}"));
    let both = BTreeSet::from([p1_sees_client.as_str(), p2_sees_node.as_str()]);
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "60", "--from"])?;
    assert_eq!(answers(&r, 60, &node_port), both);
    // A UDP socket is one flow, pinned to one backend: 16 sockets.
    let mut udp = BTreeSet::new();
    for _ in 0..16 {
        let r = bed.client(&["udp", "--to", &node_port, "-n", "3", "--from"])?;
        let got = answers(&r, 3, &node_port);
        assert_eq!(got.len(), 1, "one backend per flow: {r:?}");
        udp.extend(got.into_iter().map(str::to_owned));
    }
    let both_owned: BTreeSet<String> = both.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(udp, both_owned, "UDP replies come from the NodePort");
    let external = format!("{EXTERNAL_IP}:80");
    let r = bed.client(&["tcp", "--to", &external, "-n", "60", "--from"])?;
    assert_eq!(answers(&r, 60, &external), both);

    // eTP Local: only the pod on this node, and it sees the client.
    let local = format!("{NODE1}:30081");
    let r = bed.client(&["tcp", "--to", &local, "-n", "40", "--from"])?;
    let only_p1 = BTreeSet::from([p1_sees_client.as_str()]);
    assert_eq!(answers(&r, 40, &local), only_p1);
    let r = bed.client(&["udp", "--to", &local, "-n", "40", "--from"])?;
    assert_eq!(answers(&r, 40, &local), only_p1);

    // Path MTU: node-1 reaches p1 through a 1280-byte route, while the
    // client and p1 have 1500-byte links (so TCP's MSS does not help). The
    // "fragmentation needed" node-1 sends quotes the DNATed segment; only
    // translated back does the client's socket learn the path MTU.
    let n1 = bed.nodes.ns("n1");
    ip(&[
        "-n",
        &n1,
        "route",
        "replace",
        "10.42.1.0/24",
        "dev",
        "p1",
        "mtu",
        "1280",
    ])?;
    let r = bed.client(&["tcp", "--to", &local, "-n", "3", "--size", "20000"])?;
    assert_eq!(
        (r.ok(), r.failed()),
        (3, 0),
        "20 kB through a 1280-byte path: {r:?}"
    );

    // loadBalancerSourceRanges: the client's range gets in, others not
    // (dropped, as kube-proxy's firewall drops: the connect times out).
    let guarded = "198.51.100.20:80";
    let r = bed.client(&["tcp", "--to", guarded, "-n", "20", "--from"])?;
    assert_eq!(answers(&r, 20, guarded), both);
    let before = bed.pins.stats()?["tc_drop_source_range"];
    let r = bed.client(&["tcp", "--to", "198.51.100.21:80", "-n", "1"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    assert!(bed.pins.stats()?["tc_drop_source_range"] > before);
    let dump = bed.pins.dump()?;
    assert!(
        dump.lines().any(|l| l.starts_with("TCP  198.51.100.21:80 ")
            && l.ends_with(" LoadBalancer source-ranges from-outside")),
        "{dump}"
    );

    // No endpoints: refused at once, as kube-proxy's REJECT does.
    let empty = format!("{NODE1}:30082");
    let r = bed.client(&["tcp", "--to", &empty, "-n", "3"])?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
    let r = bed.client(&["udp", "--to", &empty, "-n", "1", "--connected"])?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&1), "{r:?}");

    // Counted as new flows; listed as frontends seen from outside.
    let stats = bed.pins.stats()?;
    assert!(stats["tc_new_flow"] >= 160, "{stats:?}");
    let dump = bed.pins.dump()?;
    assert!(
        dump.lines()
            .any(|l| l.starts_with("TCP  203.0.113.1:30081 ")
                && l.ends_with(" NodePort eTP=Local from-outside")),
        "{dump}"
    );

    // Each flow is listed, both ways, and a SNATed one with its port.
    let ct = bed.pins.conntrack()?;
    let inbound = format!(" -> {NODE1}:30081 backend 10.42.1.2:8080 ");
    assert!(
        ct.lines()
            .any(|l| l.starts_with("TCP  IN  ") && l.contains(&inbound)),
        "{ct}"
    );
    let snat = format!("10.42.2.2:8080 -> {NODE1}:");
    assert!(
        ct.lines().any(|l| l.starts_with("TCP  ")
            && l.contains(&snat)
            && l.contains(" client 203.0.113.2:")),
        "{ct}"
    );

    // An established connection outlives the agent: its programs and
    // conntrack stay pinned, and the next agent takes them over.
    let mut held = Held::open_in(&bed.nodes.ns("c"), None, &local)?;
    assert_eq!(held.request()?, "p1");
    agent.kill();
    assert_eq!(held.request()?, "p1", "the programs outlive the agent");
    let agent = bed.agent()?;
    assert_eq!(held.request()?, "p1", "a new agent keeps the flow");
    drop(agent);
    assert_eq!(held.request()?, "p1");
    Ok(())
}
