//! IPv6 and dual-stack Services at the socket hooks, with real sockets in
//! network namespaces (every host is dual-stack: `fd00::a.b.c.d` beside
//! `a.b.c.d`) and the real agent. Needs root; fails loudly without it.

use std::{
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use lb_fixtures::{Ep, Object, Slice, Svc, yaml};
use lb_tests::{
    apiserver::ApiServer,
    netns::v6_of,
    probe::UdpAnswer,
    scenario::{Bed, apply_yaml},
};

const VIP4: &str = "10.96.60.1";
const VIP6: &str = "fd00:96::1";
const PODS: [(&str, Ipv4Addr); 2] = [
    ("p1", Ipv4Addr::new(10, 42, 6, 1)),
    ("p2", Ipv4Addr::new(10, 42, 6, 2)),
];

/// Service `web` with a cluster IP per family in `cluster_ips` (primary
/// first), `http` 80/TCP and `dns` 53/UDP, an IPv4 slice of the pods at
/// `v4` and an IPv6 slice of the pods at `v6` (by their IPv4 addresses;
/// none: no slice).
fn web(cluster_ips: &[&str], v4: &[Ipv4Addr], v6: &[Ipv4Addr]) -> String {
    let mut svc = Svc::new("default", "web")
        .cluster_ip(cluster_ips[0])
        .port("http", 80, "TCP")
        .port("dns", 53, "UDP");
    if cluster_ips.len() > 1 {
        svc = svc.cluster_ips(cluster_ips);
    }
    let mut docs = vec![Object::from(svc)];
    let slice = |name: &str, family: &str, ips: Vec<String>| {
        let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
        Slice::new("default", name)
            .service("web")
            .address_type(family)
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .ready(&ips)
            .into()
    };
    if !v4.is_empty() {
        docs.push(slice(
            "web-v4",
            "IPv4",
            v4.iter().map(Ipv4Addr::to_string).collect(),
        ));
    }
    if !v6.is_empty() {
        docs.push(slice(
            "web-v6",
            "IPv6",
            v6.iter().map(|ip| v6_of(*ip).to_string()).collect(),
        ));
    }
    yaml(docs)
}

/// The addresses of every pod in [`PODS`].
fn all_pods() -> Vec<Ipv4Addr> {
    PODS.iter().map(|(_, ip)| *ip).collect()
}

/// [`PODS`] serving 8080/TCP and 5353/UDP on both families.
fn bed_with_pods() -> anyhow::Result<Bed> {
    let mut bed = Bed::new()?;
    for (id, ip) in PODS {
        bed.backend(id, ip, &[8080], &[5353])?;
    }
    Ok(bed)
}

/// Both pods answered (at least a fifth each), nothing failed, and the
/// application saw only `peers`.
fn spread(r: &lb_tests::probe::Report, n: u32, peers: &[&str]) {
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.ok(), n, "{r:?}");
    for (id, _) in PODS {
        let got = r.replies.get(id).copied().unwrap_or(0);
        assert!(got >= n / 5, "{id} answered {got} of {n}: {r:?}");
    }
    assert_eq!(r.peers.keys().collect::<Vec<_>>(), peers, "{r:?}");
}

#[test]
fn dual_stack_service_is_reached_over_both_families_from_one_pod() -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    bed.write_manifest(&web(&[VIP4, VIP6], &all_pods(), &all_pods()))?;
    bed.start_agent(&[])?;

    // TCP: spread over both pods, getpeername shows the VIP of the family
    // the application used.
    let to6 = format!("[{VIP6}]:80");
    spread(&bed.tcp(&to6, 200)?, 200, &[&to6]);
    let to4 = format!("{VIP4}:80");
    spread(&bed.tcp(&to4, 200)?, 200, &[&to4]);

    // UDP, unconnected: every reply comes from [VIP]:53.
    let dns6 = format!("[{VIP6}]:53");
    spread(&bed.udp(&dns6, 200, false)?, 200, &[&dns6]);
    // Connected: one backend for the socket, getpeername the VIP.
    let r = bed.udp(&dns6, 20, true)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.replies.len(), 1, "{r:?}");
    assert_eq!(r.peers.get(&dns6), Some(&20), "{r:?}");
    assert_eq!(
        r.peers.get(&format!("getpeername {dns6}")),
        Some(&1),
        "{r:?}"
    );

    // The listing shows each family's frontends with that family's
    // backends.
    let dump = bed.pins.dump()?;
    for want in [
        format!("TCP  [{VIP6}]:80"),
        format!("-> [{}]:8080", v6_of(PODS[0].1)),
        format!("UDP  [{VIP6}]:53"),
        format!("-> {}:5353", PODS[1].1),
    ] {
        assert!(dump.contains(&want), "no {want:?} in\n{dump}");
    }
    Ok(())
}

#[test]
fn an_inet6_socket_reaches_an_ipv4_cluster_ip_through_v4_mapped_addresses() -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    // Single-stack IPv4, with a stray IPv6 slice that must program nothing.
    bed.write_manifest(&web(&[VIP4], &all_pods(), &all_pods()))?;
    bed.start_agent(&[])?;

    // connect6 translates through the IPv4 maps into a v4-mapped backend.
    let mapped = format!("[::ffff:{VIP4}]:80");
    spread(&bed.tcp(&mapped, 200)?, 200, &[&mapped]);
    // An unconnected send goes through sendmsg4 (the kernel hands a
    // v4-mapped destination to the IPv4 path), the reply through recvmsg6.
    let mapped_dns = format!("[::ffff:{VIP4}]:53");
    spread(&bed.udp(&mapped_dns, 200, false)?, 200, &[&mapped_dns]);
    let r = bed.udp(&mapped_dns, 20, true)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(
        r.peers.get(&format!("getpeername {mapped_dns}")),
        Some(&1),
        "{r:?}"
    );

    // Nothing was programmed for IPv6: no cluster IP of that family.
    let dump = bed.pins.dump()?;
    assert!(!dump.contains('['), "an IPv6 frontend in\n{dump}");
    Ok(())
}

#[test]
fn ipv6_only_service_refuses_without_endpoints_and_skips_excluded_ones() -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    let excluded = v6_of(PODS[0].1);
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("default", "web")
                .cluster_ip(VIP6)
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "web-1")
            .service("web")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .ready(&[&excluded.to_string(), &v6_of(PODS[1].1).to_string()])
            .into(),
        Object::from(
            Svc::new("default", "empty")
                .cluster_ip("fd00:96::2")
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "empty-1")
            .service("empty")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .endpoint(Ep::new(&v6_of(PODS[1].1).to_string()).ready(false))
            .into(),
    ]))?;
    // A mix of both families in one flag, as with two CNIs.
    bed.start_agent(&[&format!(
        "--exclude-cluster-cidr=10.244.0.0/16,{excluded}/128"
    )])?;

    let r = bed.tcp(&format!("[{VIP6}]:80"), 50)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.replies.get("p2"), Some(&50), "{r:?}");

    let r = bed.tcp("[fd00:96::2]:80", 3)?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
    let stats = bed.pins.stats()?;
    assert_eq!(stats.of("refused_no_endpoints"), 3, "{stats:?}");
    Ok(())
}

#[test]
fn sigkill_of_the_agent_under_ipv6_traffic_fails_no_connection() -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    // IPv6-primary dual-stack.
    bed.write_manifest(&web(&[VIP6, VIP4], &all_pods(), &all_pods()))?;
    bed.start_agent(&[])?;
    let to6 = format!("[{VIP6}]:80");
    let churn = bed.churn(&to6)?;
    std::thread::sleep(Duration::from_millis(500));
    bed.agent().kill();
    std::thread::sleep(Duration::from_millis(1000));
    // While the agent is down, p1 leaves the IPv6 slice; the restarted
    // agent must apply it.
    bed.write_manifest(&web(&[VIP6, VIP4], &all_pods(), &[PODS[1].1]))?;
    bed.start_agent(&[])?;
    std::thread::sleep(Duration::from_millis(500));
    let r = churn.finish()?;
    eprintln!(
        "IPv6 churn across SIGKILL: {} ok, {} failed",
        r.ok(),
        r.failed()
    );
    assert_eq!(r.failed(), 0, "{r:?}");
    assert!(r.ok() > 100, "{r:?}");
    bed.until_reached(&to6, &["p2"])?;
    // IPv4 kept both pods.
    spread(
        &bed.tcp(&format!("{VIP4}:80"), 100)?,
        100,
        &[&format!("{VIP4}:80")],
    );
    Ok(())
}

#[test]
fn a_connected_ipv6_udp_socket_to_a_removed_backend_is_aborted() -> anyhow::Result<()> {
    let dns6 = format!("[{VIP6}]:53");
    removed_backend_aborts(
        &web(&[VIP6], &[], &all_pods()),
        &web(&[VIP6], &[], &[PODS[1].1]),
        &dns6,
    )
}

/// An AF_INET6 socket connected to `::ffff:<IPv4 cluster IP>`: `connect6`
/// translated it through the IPv4 maps, and its socket storage says IPv4.
#[test]
fn a_v4_mapped_udp_socket_to_a_removed_backend_is_aborted() -> anyhow::Result<()> {
    let mapped = format!("[::ffff:{VIP4}]:53");
    removed_backend_aborts(
        &web(&[VIP4], &all_pods(), &[]),
        &web(&[VIP4], &[PODS[1].1], &[]),
        &mapped,
    )
}

/// A long-lived socket connected to `to` that landed on p1 is aborted once
/// `after` (p2 only) replaces `before` (p1 and p2), and reaches p2 again.
fn removed_backend_aborts(before: &str, after: &str, to: &str) -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    bed.write_manifest(before)?;
    bed.start_agent(&[])?;
    let mut held = None;
    for _ in 0..100 {
        let mut h = bed.hold_udp(to)?;
        assert_eq!(h.peer, to);
        if h.request()? == UdpAnswer::Reply("p1".into()) {
            held = Some(h);
            break;
        }
    }
    let mut held = held.expect("no socket landed on p1 in 100 tries");
    bed.update(after)?;
    // p1 still answers: only the agent can make the socket fail.
    let deadline = Instant::now() + Duration::from_secs(1);
    let aborted = loop {
        assert!(
            Instant::now() < deadline,
            "the socket to {to}'s removed backend was not aborted within 1 s"
        );
        match held.request()? {
            UdpAnswer::Reply(id) => assert_eq!(id, "p1"),
            e => break e,
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(aborted.is_error(libc::ECONNABORTED), "{aborted:?}");
    held.reconnect()?;
    assert_eq!(held.peer, to);
    assert_eq!(held.request()?, UdpAnswer::Reply("p2".into()));
    Ok(())
}

#[test]
fn affinity_local_traffic_policy_and_unknown_ports_work_over_ipv6() -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    let [p1, p2] = PODS.map(|(_, ip)| v6_of(ip).to_string());
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("default", "sticky")
                .cluster_ip("fd00:96::3")
                .port("http", 80, "TCP")
                .client_ip_affinity(Some(60)),
        ),
        Slice::new("default", "sticky-1")
            .service("sticky")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .ready(&[&p1, &p2])
            .into(),
        Object::from(
            Svc::new("default", "local")
                .cluster_ip("fd00:96::4")
                .port("http", 80, "TCP")
                .internal_traffic_policy("Local"),
        ),
        Slice::new("default", "local-1")
            .service("local")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .endpoint(Ep::new(&p1).node("node-1"))
            .endpoint(Ep::new(&p2).node("node-2"))
            .into(),
    ]))?;
    bed.start_agent(&["--hostname-override=node-1"])?;

    // ClientIP affinity: every connection of this pod goes to one backend.
    let r = bed.tcp("[fd00:96::3]:80", 50)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.replies.len(), 1, "{r:?}");
    // internalTrafficPolicy Local: this node's endpoint only.
    let r = bed.tcp("[fd00:96::4]:80", 50)?;
    assert_eq!(r.replies.get("p1"), Some(&50), "{r:?}");
    // A port the Service does not define is refused, not passed on.
    let r = bed.tcp("[fd00:96::3]:81", 3)?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");

    let stats = bed.pins.stats()?;
    assert_eq!(stats.of("refused_unknown_port"), 3, "{stats:?}");
    assert_eq!(stats.of("affinity_hit"), 49, "{stats:?}");
    let dump = bed.pins.dump()?;
    assert!(
        dump.contains("[fd00:96::3]:80") && dump.contains("persistent 60"),
        "{dump}"
    );
    assert!(
        dump.contains("[fd00:96::4]:80") && dump.contains(" local"),
        "{dump}"
    );
    Ok(())
}

#[test]
fn dual_stack_objects_through_the_apiserver_program_both_families() -> anyhow::Result<()> {
    let mut bed = bed_with_pods()?;
    let api = ApiServer::start()?;
    // As an apiserver stores a RequireDualStack Service, IPv6 primary.
    let svc = |v6_pods: &[Ipv4Addr]| {
        let mut docs = vec![Object::from(
            Svc::new("default", "web")
                .cluster_ip(VIP6)
                .cluster_ips(&[VIP6, VIP4])
                .ip_families(&["IPv6", "IPv4"])
                .ip_family_policy("RequireDualStack")
                .port("http", 80, "TCP"),
        )];
        for (name, family, ips) in [
            (
                "web-v4",
                "IPv4",
                all_pods()
                    .iter()
                    .map(Ipv4Addr::to_string)
                    .collect::<Vec<_>>(),
            ),
            (
                "web-v6",
                "IPv6",
                v6_pods.iter().map(|ip| v6_of(*ip).to_string()).collect(),
            ),
        ] {
            let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
            docs.push(
                Slice::new("default", name)
                    .service("web")
                    .address_type(family)
                    .port("http", 8080, "TCP")
                    .ready(&ips)
                    .into(),
            );
        }
        yaml(docs)
    };
    apply_yaml(&api, &svc(&all_pods()))?;
    bed.start_agent_kube(&api, &[])?;
    let (to6, to4) = (format!("[{VIP6}]:80"), format!("{VIP4}:80"));
    spread(&bed.tcp(&to6, 100)?, 100, &[&to6]);
    spread(&bed.tcp(&to4, 100)?, 100, &[&to4]);

    // A watch event changes one family only.
    bed.kube_apply(&api, &svc(&[PODS[1].1]))?;
    bed.until_reached(&to6, &["p2"])?;
    spread(&bed.tcp(&to4, 100)?, 100, &[&to4]);
    Ok(())
}
