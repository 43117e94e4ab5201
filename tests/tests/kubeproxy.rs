//! kube-proxy v1.31's iptables and nftables layouts (`lb_tests::kubeproxy`)
//! load with the real tools and DNAT real traffic. The rules go into the
//! client's namespace (the nat OUTPUT hook handles locally generated
//! traffic); nothing is loaded into the root namespace. No lb-agent runs here.
//! Needs root; fails loudly without it.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr},
    time::Instant,
};

use lb_tests::{
    kubeproxy::{self, Proto, SvcSpec, filler_services},
    netns::{self, Topology},
    require_root,
    scenario::Bed,
    unique,
};

/// The client (10.0.0.2) is outside this, so its traffic is also marked for
/// masquerade: the whole KUBE-MARK-MASQ / mark-for-masquerade path runs.
const CLUSTER_CIDR: &str = "10.42.0.0/16";
const TCP_TO: &str = "10.96.200.1:80";
const UDP_TO: &str = "10.96.200.1:53";

fn spec(
    name: &str,
    port_name: &str,
    vip: &str,
    port: u16,
    proto: Proto,
    eps: &[(&str, u16)],
) -> SvcSpec {
    SvcSpec {
        namespace: "default".into(),
        name: name.into(),
        port_name: port_name.into(),
        vip: vip.parse().expect("vip"),
        port,
        proto,
        endpoints: eps
            .iter()
            .map(|(ip, p)| (ip.parse().expect("endpoint"), *p))
            .collect(),
        node_port: None,
    }
}

/// Two decoys first (their endpoints do not exist), then `web` (TCP) and
/// `dns` (UDP) on the same VIP, each with the backends pa and pb.
fn services() -> Vec<SvcSpec> {
    vec![
        spec(
            "decoy-a",
            "http",
            "10.96.200.10",
            80,
            Proto::Tcp,
            &[("10.42.9.1", 8080)],
        ),
        spec(
            "decoy-b",
            "https",
            "10.96.200.11",
            443,
            Proto::Tcp,
            &[("10.42.9.2", 8443), ("10.42.9.3", 8443)],
        ),
        spec(
            "web",
            "http",
            "10.96.200.1",
            80,
            Proto::Tcp,
            &[("10.42.7.1", 8080), ("10.42.7.2", 8080)],
        ),
        spec(
            "dns",
            "dns",
            "10.96.200.1",
            53,
            Proto::Udp,
            &[("10.42.7.1", 5353), ("10.42.7.2", 5353)],
        ),
    ]
}

/// A client namespace and the backends pa (10.42.7.1) and pb (10.42.7.2),
/// answering with their id on TCP 8080 and UDP 5353.
fn bed() -> anyhow::Result<Bed> {
    let mut bed = Bed::new()?;
    bed.backend("pa", "10.42.7.1".parse()?, &[8080], &[5353])?;
    bed.backend("pb", "10.42.7.2".parse()?, &[8080], &[5353])?;
    // Control: without rules the VIP is unreachable (the hub rejects it).
    let r = bed.tcp(TCP_TO, 1)?;
    assert_eq!(
        (r.ok(), r.failed()),
        (0, 1),
        "VIP answered without rules: {r:?}"
    );
    Ok(bed)
}

/// 100 TCP connections and 40 UDP sockets through the VIP reach both
/// backends, and the client only ever sees the VIP as its peer.
fn assert_vip_reaches_both_backends(bed: &Bed) -> anyhow::Result<()> {
    let r = bed.tcp(TCP_TO, 100)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.ok(), 100, "{r:?}");
    for id in ["pa", "pb"] {
        assert!(r.replies.contains_key(id), "TCP never reached {id}: {r:?}");
    }
    assert_eq!(r.peers.keys().collect::<Vec<_>>(), [TCP_TO], "{r:?}");

    // One socket is one conntrack entry and so one backend: use many.
    let mut replies: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..40 {
        let r = bed.udp(UDP_TO, 1, false)?;
        assert_eq!((r.ok(), r.failed()), (1, 0), "{r:?}");
        assert_eq!(r.peers.keys().collect::<Vec<_>>(), [UDP_TO], "{r:?}");
        for (id, n) in r.replies {
            *replies.entry(id).or_default() += n;
        }
    }
    assert_eq!(
        replies.keys().collect::<Vec<_>>(),
        ["pa", "pb"],
        "UDP did not reach both backends: {replies:?}"
    );
    Ok(())
}

#[test]
fn iptables_layout_dnats_tcp_and_udp_vip_to_both_backends() -> anyhow::Result<()> {
    let bed = bed()?;
    kubeproxy::load_iptables(
        &bed.client_ns,
        &kubeproxy::iptables_restore(&services(), CLUSTER_CIDR),
    )?;
    assert_vip_reaches_both_backends(&bed)?;
    // The DNATs really were kube-proxy's: the web service's chain counted
    // the 100 TCP connections (only first packets traverse nat).
    let chain = netns::exec(
        &bed.client_ns,
        &["iptables", "-t", "nat", "-S", "KUBE-SERVICES"],
    )?;
    let svc_chain = chain
        .lines()
        .find(|l| l.contains("default/web:http cluster IP"))
        .and_then(|l| l.split_whitespace().last())
        .expect("web portal")
        .to_owned();
    let counted = netns::exec(
        &bed.client_ns,
        &["iptables", "-t", "nat", "-L", &svc_chain, "-n", "-v", "-x"],
    )?;
    let packets: u64 = counted
        .lines()
        .filter(|l| l.contains("KUBE-SEP-"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(packets, 100, "{counted}");
    Ok(())
}

#[test]
fn nftables_layout_dnats_tcp_and_udp_vip_to_both_backends() -> anyhow::Result<()> {
    let bed = bed()?;
    kubeproxy::load_nft(
        &bed.client_ns,
        &kubeproxy::nft_ruleset(&services(), CLUSTER_CIDR),
    )?;
    assert_vip_reaches_both_backends(&bed)?;
    // No iptables rules took part: the nat table is empty.
    let nat = netns::exec(&bed.client_ns, &["iptables-save", "-t", "nat"])?;
    assert!(!nat.contains("KUBE-"), "{nat}");
    Ok(())
}

/// `web` with its second endpoint moved from pb to pc (10.42.7.3): index 2
/// in [`services`]. Returns the services and the endpoint replaced.
fn move_web_endpoint(bed: &mut Bed) -> anyhow::Result<(Vec<SvcSpec>, (IpAddr, u16))> {
    bed.backend("pc", "10.42.7.3".parse()?, &[8080], &[5353])?;
    let mut changed = services();
    let old = changed[2].endpoints[1];
    changed[2].endpoints[1].0 = "10.42.7.3".parse()?;
    Ok((changed, old))
}

/// After the partial sync, web reaches pa and pc only, and dns (untouched
/// by the partial sync) still answers through both its backends.
fn assert_web_moved_to_pc(bed: &Bed) -> anyhow::Result<()> {
    let r = bed.tcp(TCP_TO, 100)?;
    assert_eq!((r.ok(), r.failed()), (100, 0), "{r:?}");
    assert_eq!(
        r.replies.keys().collect::<Vec<_>>(),
        ["pa", "pc"],
        "web did not move from pb to pc: {r:?}"
    );
    for _ in 0..20 {
        let r = bed.udp(UDP_TO, 1, false)?;
        assert_eq!((r.ok(), r.failed()), (1, 0), "{r:?}");
    }
    Ok(())
}

#[test]
fn iptables_partial_sync_moves_traffic_to_the_new_endpoint() -> anyhow::Result<()> {
    let mut bed = bed()?;
    kubeproxy::load_iptables(
        &bed.client_ns,
        &kubeproxy::iptables_restore(&services(), CLUSTER_CIDR),
    )?;
    assert_vip_reaches_both_backends(&bed)?;
    let (changed, _) = move_web_endpoint(&mut bed)?;
    let partial = kubeproxy::iptables_partial_restore(&changed, &[2], CLUSTER_CIDR);
    // Only web's chains are rewritten: one KUBE-SVC and its two KUBE-SEPs.
    assert_eq!(count(&partial, |l| l.starts_with(":KUBE-SVC-")), 1);
    assert_eq!(count(&partial, |l| l.starts_with(":KUBE-SEP-")), 2);
    kubeproxy::load_iptables_partial(&bed.client_ns, &partial)?;
    assert_web_moved_to_pc(&bed)
}

#[test]
fn nftables_partial_sync_moves_traffic_to_the_new_endpoint() -> anyhow::Result<()> {
    let mut bed = bed()?;
    let ns = bed.client_ns.clone();
    kubeproxy::load_nft(&ns, &kubeproxy::nft_ruleset(&services(), CLUSTER_CIDR))?;
    assert_vip_reaches_both_backends(&bed)?;
    let (changed, old) = move_web_endpoint(&mut bed)?;
    let stale = kubeproxy::nft_endpoint_chain(&changed[2], old.0, old.1);
    let tx =
        kubeproxy::nft_partial_sync(&changed, &[2], std::slice::from_ref(&stale), CLUSTER_CIDR);
    assert!(!tx.contains("add element"), "{tx}");
    kubeproxy::load_nft(&ns, &tx)?;
    assert_web_moved_to_pc(&bed)?;
    // The stale chain was only flushed; the later transaction deletes it.
    let chains = || netns::exec(&ns, &["nft", "list", "chains", "ip"]);
    assert!(chains()?.contains(&stale));
    kubeproxy::load_nft(
        &ns,
        &kubeproxy::nft_delete_chains(std::slice::from_ref(&stale)),
    )?;
    assert!(!chains()?.contains(&stale));
    assert_web_moved_to_pc(&bed)
}

fn count(text: &str, pred: impl Fn(&str) -> bool) -> usize {
    text.lines().filter(|l| pred(l)).count()
}

/// `nft -j` elements of a set or map.
fn nft_elements(ns: &str, kind: &str, name: &str) -> anyhow::Result<usize> {
    let out = netns::exec(ns, &["nft", "-j", "list", kind, "ip", "kube-proxy", name])?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    let list = v["nftables"].as_array().expect("nftables array");
    Ok(list
        .iter()
        .filter_map(|o| o[kind]["elem"].as_array())
        .map(Vec::len)
        .sum())
}

#[test]
fn thousand_services_of_four_endpoints_load_completely() -> anyhow::Result<()> {
    require_root();
    const N: usize = 1000;
    const E: usize = 4;
    let mut services = filler_services(N - 1, E);
    let last = Ipv4Addr::new(10, 99, 0, 1);
    services.push(SvcSpec {
        namespace: "bench".into(),
        name: "last".into(),
        port_name: "http".into(),
        vip: last.into(),
        port: 80,
        proto: Proto::Tcp,
        endpoints: (1..=E as u8)
            .map(|i| (Ipv4Addr::new(10, 99, 1, i).into(), 8080))
            .collect(),
        node_port: None,
    });
    // Rules only; no traffic. The hub is a namespace of our own.
    let topo = Topology::new(&unique("kp"))?;
    let ns = topo.hub();

    let ipt = kubeproxy::iptables_restore(&services, CLUSTER_CIDR);
    let t = Instant::now();
    kubeproxy::load_iptables(ns, &ipt)?;
    let ipt_load = t.elapsed();
    let saved = netns::exec(ns, &["iptables-save", "-t", "nat"])?;
    assert_eq!(count(&saved, |l| l.starts_with(":KUBE-SEP-")), N * E);
    assert_eq!(count(&saved, |l| l.starts_with(":KUBE-SVC-")), N);
    assert_eq!(
        count(&saved, |l| l.contains("-j DNAT --to-destination")),
        N * E
    );
    let portals = netns::exec(ns, &["iptables", "-t", "nat", "-S", "KUBE-SERVICES"])?;
    let portals: Vec<&str> = portals.lines().filter(|l| l.starts_with("-A ")).collect();
    assert_eq!(portals.len(), N + 1);
    assert!(
        portals[N - 1].contains(&format!("-d {last}/32")),
        "{}",
        portals[N - 1]
    );
    assert!(portals[N].ends_with("-j KUBE-NODEPORTS"), "{}", portals[N]);

    let nft = kubeproxy::nft_ruleset(&services, CLUSTER_CIDR);
    let t = Instant::now();
    kubeproxy::load_nft(ns, &nft)?;
    let nft_load = t.elapsed();
    let chains = netns::exec(ns, &["nft", "list", "chains", "ip"])?;
    let chain_names = |prefix: &str| {
        count(&chains, |l| {
            l.trim()
                .strip_prefix("chain ")
                .is_some_and(|c| c.starts_with(prefix) && c.contains('/'))
        })
    };
    assert_eq!(chain_names("endpoint-"), N * E);
    assert_eq!(chain_names("service-"), N);
    assert_eq!(nft_elements(ns, "map", "service-ips")?, N);
    assert_eq!(nft_elements(ns, "set", "cluster-ips")?, N);
    let table = netns::exec(ns, &["nft", "list", "table", "ip", "kube-proxy"])?;
    assert_eq!(count(&table, |l| l.contains(" dnat to ")), N * E);

    eprintln!(
        "{N}x{E}: iptables-restore {} lines in {ipt_load:?}, nft -f {} lines in {nft_load:?}",
        ipt.lines().count(),
        nft.lines().count()
    );
    Ok(())
}
