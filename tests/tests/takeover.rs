//! Replacing kube-proxy on live nodes keeps every connection: kube-proxy
//! v1.31's iptables rules (`lb_tests::kubeproxy`, ip6tables for IPv6) serve
//! NodePort connections on the two nodes of `lb_tests::two_nodes`, the
//! agents start on both, and the rules are removed, as an operator replaces
//! kube-proxy. Each family has its test, as kube-proxy has a proxier per
//! family. Needs root; fails loudly without it.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use lb_fixtures::{Slice, yaml};
use lb_tests::{
    kubeproxy::{self, NodePort, Proto, SvcSpec},
    probe::{Held, HeldUdp, UdpAnswer},
    two_nodes::{
        Bed, NODE1, NODE1_6, NODE2, NODE2_6, addr, node_objects, node_port_svc, p1, p1_6, p2, p2_6,
        slice, slice6,
    },
};

/// `cluster` (eTP Cluster) and `local` (eTP Local): an endpoint on each
/// node, TCP 80 -> 8080 and UDP 53 -> 5353 on each NodePort.
const CLUSTER: u16 = 30080;
const LOCAL: u16 = 30081;

/// One family's side of the bed, and of kube-proxy's proxier for it.
struct Side {
    /// The nodes' addresses, each node's NodePort address.
    nodes: [&'static str; 2],
    /// Pods p1 (on node-1) and p2 (on node-2).
    pods: [IpAddr; 2],
    /// `cluster`'s and `local`'s cluster IPs.
    cluster_ips: [IpAddr; 2],
    /// The pods' addresses: kube-proxy's `--cluster-cidr`.
    cluster_cidr: &'static str,
    /// A Service's EndpointSlice of p1 and p2.
    slice: fn(&str) -> Slice,
    /// `iptables` or `ip6tables` (`-save`, `-restore`).
    iptables: &'static str,
    load: fn(&str, &str) -> anyhow::Result<()>,
    /// The labels of the family's tc counters.
    stats: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

const fn v6(a: u16, b: u16, c: u16, d: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(a, b, 0, 0, 0, 0, c, d))
}

const V4: Side = Side {
    nodes: [NODE1, NODE2],
    pods: [v4(10, 42, 1, 2), v4(10, 42, 2, 2)],
    cluster_ips: [v4(10, 96, 59, 1), v4(10, 96, 59, 2)],
    cluster_cidr: "10.42.0.0/16",
    slice: |svc| slice(svc, vec![p1(), p2()]),
    iptables: "iptables",
    load: kubeproxy::load_iptables,
    stats: "tc ipv4",
};

const V6: Side = Side {
    nodes: [NODE1_6, NODE2_6],
    pods: [v6(0xfd42, 1, 0, 2), v6(0xfd42, 2, 0, 2)],
    cluster_ips: [v6(0xfd00, 0x96, 0x59, 1), v6(0xfd00, 0x96, 0x59, 2)],
    cluster_cidr: "fd42::/16",
    slice: |svc| slice6(svc, vec![p1_6(), p2_6()]),
    iptables: "ip6tables",
    load: kubeproxy::load_ip6tables,
    stats: "tc ipv6",
};

/// The Nodes and the single-stack Services of `side`'s family.
fn manifest(side: &Side) -> String {
    let [node1, node2] = node_objects();
    let svc = |name, ip: IpAddr, node_port| {
        let svc = node_port_svc(name, &ip.to_string(), node_port);
        if ip.is_ipv6() {
            svc.ip_families(&["IPv6"])
        } else {
            svc
        }
    };
    yaml([
        node1,
        node2,
        svc("cluster", side.cluster_ips[0], CLUSTER).into(),
        (side.slice)("cluster").into(),
        svc("local", side.cluster_ips[1], LOCAL)
            .external_traffic_policy("Local")
            .into(),
        (side.slice)("local").into(),
    ])
}

/// kube-proxy's view of the same Services, on the node running `own`.
fn kube_proxy_services(side: &Side, own: IpAddr) -> Vec<SvcSpec> {
    let mut specs = Vec::new();
    for (name, vip, node_port, local) in [
        ("cluster", side.cluster_ips[0], CLUSTER, false),
        ("local", side.cluster_ips[1], LOCAL, true),
    ] {
        for (port_name, port, target, proto) in [
            ("http", 80, 8080, Proto::Tcp),
            ("dns", 53, 5353, Proto::Udp),
        ] {
            specs.push(SvcSpec {
                namespace: "default".into(),
                name: name.into(),
                port_name: port_name.into(),
                vip,
                port,
                proto,
                endpoints: side.pods.iter().map(|&pod| (pod, target)).collect(),
                node_port: Some(if local {
                    NodePort::local(node_port, [own])
                } else {
                    NodePort::cluster(node_port)
                }),
            });
        }
    }
    specs
}

/// kube-proxy (its rules for `side`'s family) serves held TCP connections
/// and UDP flows; the agents start (with `args`) and the rules go; every
/// connection goes on with its backend, translated by the kernel, and new
/// ones are ours.
fn replace_kube_proxy(side: &Side, args: &[&str]) -> anyhow::Result<()> {
    let bed = Bed::new(&manifest(side))?;
    for (host, own) in [("n1", side.pods[0]), ("n2", side.pods[1])] {
        let rules = kubeproxy::iptables_restore(&kube_proxy_services(side, own), side.cluster_cidr);
        (side.load)(&bed.nodes.ns(host), &rules)?;
        // A conntrack user of the node's own (a CNI's or firewall's rule):
        // without one, the kernel stops tracking once kube-proxy's rules
        // go, and every flow they NATed dies, kube-proxy's own included.
        for cmd in [
            "add table inet node",
            "add chain inet node keep { type filter hook forward priority 0 ; }",
            "add rule inet node keep ct state established,related accept",
        ] {
            let mut args = vec!["nft"];
            args.extend(cmd.split(' '));
            bed.exec(host, &args)?;
        }
    }
    // kube-proxy serves: six TCP connections and six UDP flows through each
    // node, to the Cluster and the Local NodePort.
    let c = bed.nodes.ns("c");
    let targets = side.nodes.map(|n| [CLUSTER, LOCAL].map(|p| addr(n, p)));
    let mut tcp = Vec::new();
    let mut udp = Vec::new();
    for to in targets.iter().flatten() {
        for _ in 0..3 {
            let mut held = Held::open_in(&c, None, to)?;
            let pod = held.request()?;
            tcp.push((to.clone(), held, pod));
        }
        // A datagram cannot tell an old flow from a new one: several, so
        // that one balanced anew would show.
        for _ in 0..3 {
            let mut held = HeldUdp::open_in(&c, None, to)?;
            let UdpAnswer::Reply(pod) = held.request()? else {
                anyhow::bail!("kube-proxy did not answer UDP to {to}");
            };
            udp.push((to.clone(), held, pod));
        }
    }
    assert_eq!(tcp.len(), 12);

    // The agents start on both nodes, their programs attach in front of
    // kube-proxy's rules; then kube-proxy's rules go.
    let agents = [
        bed.agent_with(&bed.node1, args)?,
        bed.agent_with(&bed.node2, args)?,
    ];
    for to in [&targets[0][0], &targets[1][1]] {
        bed.wait_reachable(to).map_err(|e| {
            // What each node had, to tell which side failed.
            let mut report = format!("{e:#}");
            for (agent, node) in agents.iter().zip([&bed.node1, &bed.node2]) {
                let stats = node.pins.dump().unwrap_or_else(|e| format!("{e:#}"));
                let ct = node.pins.conntrack().unwrap_or_else(|e| format!("{e:#}"));
                let log = agent.log_text();
                report += &format!("\n--- {}:\n{log}\n{stats}\n{ct}", node.name);
            }
            anyhow::anyhow!(report)
        })?;
    }
    let iptables = side.iptables;
    for host in ["n1", "n2"] {
        let drop_kube = format!("{iptables}-save | grep -v KUBE | {iptables}-restore");
        bed.exec(host, &["sh", "-c", &drop_kube])?;
        let left = bed.exec(host, &[&format!("{iptables}-save")])?;
        assert!(!left.contains("KUBE"), "{left}");
    }

    // Every connection goes on, with the backend it had.
    for _ in 0..3 {
        for (to, held, pod) in &mut tcp {
            assert_eq!(held.request()?, *pod, "TCP to {to}");
        }
        for (to, held, pod) in &mut udp {
            assert_eq!(
                held.request()?,
                UdpAnswer::Reply(pod.clone()),
                "UDP to {to}"
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // The kernel translated them, not the programs.
    let stat = |name: &str| format!("{} {name}", side.stats);
    for node in [&bed.node1, &bed.node2] {
        assert!(node.pins.stats()?.of(&stat("passed_untracked")) > 0);
    }
    // New connections are the agents'.
    for to in targets.iter().flatten() {
        let r = bed.client(&["tcp", "--to", to, "-n", "10"])?;
        assert_eq!((r.ok(), r.failed()), (10, 0), "{to}: {r:?}");
    }
    let new_flows = bed.node1.pins.stats()?.of(&stat("new_flow"));
    assert!(new_flows >= 20, "{new_flows}");
    Ok(())
}

#[test]
fn replacing_kube_proxy_keeps_every_established_connection() -> anyhow::Result<()> {
    replace_kube_proxy(&V4, &[])
}

#[test]
fn replacing_kube_proxy_keeps_every_established_ipv6_connection() -> anyhow::Result<()> {
    replace_kube_proxy(&V6, &[])
}

/// With Maglev and DSR, the programs take TCP flows over mid-flow (a flow
/// another node balanced): never one the kernel's conntrack translates.
#[test]
fn replacing_kube_proxy_with_maglev_and_dsr_keeps_every_established_connection()
-> anyhow::Result<()> {
    replace_kube_proxy(&V4, &["--bpf-lb-algorithm=maglev", "--bpf-lb-mode=dsr"])
}
