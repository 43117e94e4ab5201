//! Replacing kube-proxy on live nodes keeps every connection: kube-proxy
//! v1.31's iptables rules (`lb_tests::kubeproxy`) serve NodePort
//! connections on the two nodes of `lb_tests::two_nodes`, the agents start
//! on both, and the rules are removed, as an operator replaces kube-proxy.
//! Needs root; fails loudly without it.

use std::{net::Ipv4Addr, time::Duration};

use lb_fixtures::yaml;
use lb_tests::{
    kubeproxy::{self, NodePort, Proto, SvcSpec},
    probe::{Held, HeldUdp, UdpAnswer},
    two_nodes::{Bed, NODE1, NODE2, node_objects, node_port_svc, p1, p2, slice},
};

const P1: Ipv4Addr = Ipv4Addr::new(10, 42, 1, 2);
const P2: Ipv4Addr = Ipv4Addr::new(10, 42, 2, 2);
/// `cluster` (eTP Cluster) and `local` (eTP Local): an endpoint on each
/// node, TCP 80 -> 8080 and UDP 53 -> 5353 on each NodePort.
const CLUSTER: u16 = 30080;
const LOCAL: u16 = 30081;

fn manifest() -> String {
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        node_port_svc("cluster", "10.96.59.1", CLUSTER).into(),
        slice("cluster", vec![p1(), p2()]).into(),
        node_port_svc("local", "10.96.59.2", LOCAL)
            .external_traffic_policy("Local")
            .into(),
        slice("local", vec![p1(), p2()]).into(),
    ])
}

/// kube-proxy's view of the same Services, on the node running `own`.
fn kube_proxy_services(own: Ipv4Addr) -> Vec<SvcSpec> {
    let mut specs = Vec::new();
    for (name, vip, node_port, local) in [
        ("cluster", Ipv4Addr::new(10, 96, 59, 1), CLUSTER, false),
        ("local", Ipv4Addr::new(10, 96, 59, 2), LOCAL, true),
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
                endpoints: vec![(P1, target), (P2, target)],
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

#[test]
fn replacing_kube_proxy_keeps_every_established_connection() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    for (host, own) in [("n1", P1), ("n2", P2)] {
        let rules = kubeproxy::iptables_restore(&kube_proxy_services(own), "10.42.0.0/16");
        kubeproxy::load_iptables(&bed.nodes.ns(host), &rules)?;
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
    let targets = [NODE1, NODE2].map(|n| [CLUSTER, LOCAL].map(|p| format!("{n}:{p}")));
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
    let _agents = [bed.agent(&bed.node1)?, bed.agent(&bed.node2)?];
    bed.wait_reachable(&format!("{NODE1}:{CLUSTER}"))?;
    bed.wait_reachable(&format!("{NODE2}:{LOCAL}"))?;
    for host in ["n1", "n2"] {
        bed.exec(
            host,
            &[
                "sh",
                "-c",
                "iptables-save | grep -v KUBE | iptables-restore",
            ],
        )?;
        let left = bed.exec(host, &["iptables-save"])?;
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
    for node in [&bed.node1, &bed.node2] {
        assert!(node.pins.stats()?["tc_passed_untracked"] > 0);
    }
    // New connections are the agents'.
    for to in targets.iter().flatten() {
        let r = bed.client(&["tcp", "--to", to, "-n", "10"])?;
        assert_eq!((r.ok(), r.failed()), (10, 0), "{to}: {r:?}");
    }
    let before = bed.node1.pins.stats()?["tc_new_flow"];
    assert!(before >= 20, "{before}");
    Ok(())
}
