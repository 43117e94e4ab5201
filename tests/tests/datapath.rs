//! Socket-LB behaviour with real sockets in network namespaces, driven
//! through the real `lb-agent` binary. Needs root; fails loudly without it.

use lb_fixtures::{Ep, Object, Slice, Svc, yaml};
use lb_tests::{
    cgroup::{SOCK_HOOKS, attached_programs},
    netns,
    probe::UdpAnswer,
    scenario::Bed,
};

const VIP: &str = "10.96.100.1";
const TO: &str = "10.96.100.1:80";

/// The `web` Service on VIP:80 with the given endpoints (port 8080).
fn web(endpoints: &[&str]) -> String {
    yaml([
        Object::from(
            Svc::new("default", "web")
                .cluster_ip(VIP)
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "web-1")
            .service("web")
            .port("http", 8080, "TCP")
            .ready(endpoints)
            .into(),
    ])
}

/// Pods pa (10.42.0.148) and pb (10.42.0.149) behind `web`, agent running.
fn web_bed() -> anyhow::Result<Bed> {
    let mut bed = Bed::new()?;
    bed.backend("pa", "10.42.0.148".parse()?, &[8080], &[])?;
    bed.backend("pb", "10.42.0.149".parse()?, &[8080], &[])?;
    bed.write_manifest(&web(&["10.42.0.148", "10.42.0.149"]))?;
    bed.start_agent(&[])?;
    Ok(bed)
}

#[test]
fn tcp_through_vip_reaches_every_backend_evenly_and_getpeername_is_vip() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    for (id, ip) in [
        ("p1", "10.42.1.1"),
        ("p2", "10.42.1.2"),
        ("p3", "10.42.1.3"),
    ] {
        bed.backend(id, ip.parse()?, &[8080], &[])?;
    }
    bed.write_manifest(&web(&["10.42.1.1", "10.42.1.2", "10.42.1.3"]))?;
    bed.start_agent(&[])?;
    let r = bed.tcp(TO, 300)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.ok(), 300);
    for id in ["p1", "p2", "p3"] {
        let n = r.replies.get(id).copied().unwrap_or(0);
        // Expected 100 each; 50 is more than 6 standard deviations below.
        assert!(n >= 50, "{id} got {n} of 300: {r:?}");
    }
    assert_eq!(
        r.peers.keys().collect::<Vec<_>>(),
        [TO],
        "getpeername must show the VIP"
    );
    Ok(())
}

#[test]
fn udp_connected_and_unconnected_replies_come_from_the_vip() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    bed.backend("dns1", "10.42.2.1".parse()?, &[], &[53])?;
    bed.backend("dns2", "10.42.2.2".parse()?, &[], &[53])?;
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("kube-system", "kube-dns")
                .cluster_ip("10.96.0.10")
                .port("dns", 53, "UDP"),
        ),
        Slice::new("kube-system", "kube-dns-1")
            .service("kube-dns")
            .port("dns", 53, "UDP")
            .ready(&["10.42.2.1", "10.42.2.2"])
            .into(),
    ]))?;
    bed.start_agent(&[])?;

    let r = bed.udp("10.96.0.10:53", 200, false)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert!(r.replies.get("dns1").copied().unwrap_or(0) >= 40, "{r:?}");
    assert!(r.replies.get("dns2").copied().unwrap_or(0) >= 40, "{r:?}");
    assert_eq!(
        r.peers.keys().collect::<Vec<_>>(),
        ["10.96.0.10:53"],
        "reply source must be the VIP"
    );

    let r = bed.udp("10.96.0.10:53", 50, true)?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(
        r.replies.len(),
        1,
        "a connected socket sticks to one backend: {r:?}"
    );
    assert_eq!(r.peers.get("10.96.0.10:53"), Some(&50), "{r:?}");
    assert_eq!(r.peers.get("getpeername 10.96.0.10:53"), Some(&1), "{r:?}");
    Ok(())
}

#[test]
fn a_udp_socket_reconnected_from_the_vip_to_another_pod_shows_that_pod() -> anyhow::Result<()> {
    const DNS: &str = "10.96.0.10:53";
    let mut bed = Bed::new()?;
    bed.backend("dns1", "10.42.2.1".parse()?, &[], &[5353])?;
    // Not the Service's.
    bed.backend("other", "10.42.2.2".parse()?, &[], &[5353])?;
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("kube-system", "kube-dns")
                .cluster_ip("10.96.0.10")
                .port("dns", 53, "UDP"),
        ),
        Slice::new("kube-system", "kube-dns-1")
            .service("kube-dns")
            .port("dns", 5353, "UDP")
            .ready(&["10.42.2.1"])
            .into(),
    ]))?;
    bed.start_agent(&[])?;
    let mut held = bed.hold_udp(DNS)?;
    assert_eq!(held.peer, DNS);
    assert_eq!(held.request()?, UdpAnswer::Reply("dns1".into()));
    // The same socket, now straight to a pod: its storage still names the
    // Service's backend, which this peer is not.
    held.connect_same("10.42.2.2:5353")?;
    assert_eq!(held.peer, "10.42.2.2:5353");
    assert_eq!(held.request()?, UdpAnswer::Reply("other".into()));
    held.connect_same(DNS)?;
    assert_eq!(held.peer, DNS, "through the Service again");
    assert_eq!(held.request()?, UdpAnswer::Reply("dns1".into()));
    Ok(())
}

#[test]
fn zero_endpoints_is_refused_at_once_not_a_timeout() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("default", "empty")
                .cluster_ip(VIP)
                .port("http", 80, "TCP")
                .port("dns", 53, "UDP"),
        ),
        Slice::new("default", "empty-1")
            .service("empty")
            .port("http", 8080, "TCP")
            .endpoint(Ep::new("10.42.3.1").ready(false))
            .into(),
    ]))?;
    bed.start_agent(&[])?;
    let r = bed.tcp(TO, 3)?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
    let r = bed.udp("10.96.100.1:53", 3, false)?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
    let r = bed.udp("10.96.100.1:53", 1, true)?;
    assert_eq!(
        r.errors.get("ConnectionRefused"),
        Some(&1),
        "connect() on UDP refuses too: {r:?}"
    );
    let dump = bed.pins.dump()?;
    assert!(
        dump.contains("10.96.100.1:80") && dump.contains("reject"),
        "{dump}"
    );
    // Counted by reason, not refused silently.
    let stats = bed.pins.stats()?;
    assert_eq!(stats.of("refused_no_endpoints"), 7, "{stats:?}");
    assert_eq!(stats.of("connect_translated"), 0, "{stats:?}");
    Ok(())
}

#[test]
fn excluded_only_frontend_passes_through_and_mixed_uses_only_the_rest() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    bed.backend("ovn", "10.244.0.11".parse()?, &[80], &[])?;
    bed.backend("flannel", "10.42.4.1".parse()?, &[80], &[])?;
    // The other CNI's own load balancing, for the excluded service only.
    netns::foreign_cni_dnat(bed.topo.hub(), "10.96.164.53", 10001, "10.244.0.11:80")?;
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("ovn-poc", "service-a")
                .cluster_ip("10.96.164.53")
                .port("", 10001, "TCP"),
        ),
        Slice::new("ovn-poc", "service-a-1")
            .service("service-a")
            .port("", 80, "TCP")
            .ready(&["10.244.0.11"])
            .into(),
        Svc::new("default", "mixed")
            .cluster_ip(VIP)
            .port("http", 80, "TCP")
            .into(),
        Slice::new("default", "mixed-1")
            .service("mixed")
            .port("http", 80, "TCP")
            .ready(&["10.244.0.11", "10.42.4.1"])
            .into(),
    ]))?;
    let agent = bed.start_agent(&["--exclude-cluster-cidr=10.244.0.0/16,"])?;
    // The excluded pod, once for each Service it serves.
    assert_eq!(agent.metric("lbagent_excluded_endpoints_total")?, 2.0);

    let r = bed.tcp("10.96.164.53:10001", 20)?;
    assert_eq!(r.replies.get("ovn"), Some(&20), "{r:?}");
    assert_eq!(
        netns::foreign_cni_hits(bed.topo.hub())?,
        20,
        "the VIP must leave the client untranslated"
    );
    let dump = bed.pins.dump()?;
    assert!(
        !dump.contains("10.96.164.53"),
        "excluded-only frontend must not be programmed:\n{dump}"
    );
    assert!(
        !dump.contains("10.244.0.11"),
        "excluded endpoint must not be programmed:\n{dump}"
    );

    let r = bed.tcp(TO, 50)?;
    assert_eq!(r.replies.get("flannel"), Some(&50), "{r:?}");
    Ok(())
}

#[test]
fn removed_backend_gets_no_new_connections_but_open_ones_survive() -> anyhow::Result<()> {
    let mut bed = web_bed()?;
    // Keep connections until one sits on pb, the backend we remove.
    let mut held = None;
    for _ in 0..50 {
        let mut h = bed.hold(TO)?;
        if h.request()? == "pb" {
            held = Some(h);
            break;
        }
    }
    let mut held = held.expect("no connection landed on pb in 50 tries");
    assert_eq!(held.peer, TO);

    bed.update(&web(&["10.42.0.148"]))?;
    let r = bed.tcp(TO, 100)?;
    assert_eq!(r.replies.get("pa"), Some(&100), "{r:?}");
    assert_eq!(
        held.request()?,
        "pb",
        "the established connection must keep working"
    );
    Ok(())
}

#[test]
fn sigkill_of_the_agent_under_load_fails_no_connection_and_restart_converges() -> anyhow::Result<()>
{
    let mut bed = web_bed()?;
    let churn = bed.churn(TO)?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    bed.agent().kill();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // While down, the manifest changes; the restarted agent must apply it.
    bed.write_manifest(&web(&["10.42.0.149"]))?;
    bed.start_agent(&[])?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let r = churn.finish()?;
    eprintln!("churn across SIGKILL: {} ok, {} failed", r.ok(), r.failed());
    assert_eq!(r.failed(), 0, "{r:?}");
    assert!(r.ok() > 100, "{r:?}");
    let after = bed.tcp(TO, 50)?;
    assert_eq!(after.replies.get("pb"), Some(&50), "{after:?}");
    Ok(())
}

#[test]
fn restart_adopts_maps_and_rewrites_nothing_that_did_not_change() -> anyhow::Result<()> {
    let mut bed = web_bed()?;
    let before = bed.pins.dump()?;
    assert!(bed.agent().terminate()?, "SIGTERM must exit cleanly");
    // Programs and maps outlive the agent.
    let r = bed.tcp(TO, 20)?;
    assert_eq!(
        r.ok(),
        20,
        "traffic must flow while the agent is down: {r:?}"
    );
    bed.start_agent(&[])?;
    // Entries are never overwritten, so a rewrite would show as new ids or
    // revisions: the listing would differ.
    assert_eq!(
        bed.pins.dump()?,
        before,
        "an unchanged restart must write nothing"
    );
    Ok(())
}

/// The programs attached at each socket hook of the bed's cgroup.
fn sock_programs(bed: &Bed) -> anyhow::Result<Vec<Vec<u32>>> {
    SOCK_HOOKS
        .iter()
        .map(|(_, hook)| attached_programs(bed.cgroup.path(), *hook))
        .collect()
}

/// Asserts that each hook has one program now, none of them one of `before`.
fn assert_replaced(before: &[Vec<u32>], after: &[Vec<u32>]) {
    for (old, new) in before.iter().zip(after) {
        assert_eq!(new.len(), 1, "{after:?}");
        assert!(!old.contains(&new[0]), "{before:?} -> {after:?}");
    }
}

#[test]
fn a_restart_of_the_same_build_adopts_its_programs_unless_the_maps_changed() -> anyhow::Result<()> {
    let mut bed = web_bed()?;
    let loaded = sock_programs(&bed)?;
    assert!(loaded.iter().all(|ids| ids.len() == 1), "{loaded:?}");
    assert!(bed.agent().terminate()?, "SIGTERM must exit cleanly");
    bed.start_agent(&[])?;
    assert_eq!(
        sock_programs(&bed)?,
        loaded,
        "the same build on the same maps: the same programs, not loaded again"
    );
    let r = bed.tcp(TO, 20)?;
    assert_eq!(r.ok(), 20, "{r:?}");

    // Another capacity: new maps, which the pinned programs do not use.
    assert!(bed.agent().terminate()?, "SIGTERM must exit cleanly");
    bed.start_agent(&["--bpf-lb-map-max=70000"])?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while bed.pins_path().join("maps-next").exists() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the maps were not migrated"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let migrated = sock_programs(&bed)?;
    assert_replaced(&loaded, &migrated);
    let r = bed.tcp(TO, 20)?;
    assert_eq!(r.ok(), 20, "{r:?}");

    // Without their pins, they are loaded again.
    assert!(bed.agent().terminate()?, "SIGTERM must exit cleanly");
    std::fs::remove_dir_all(bed.pins_path().join("programs"))?;
    bed.start_agent(&["--bpf-lb-map-max=70000"])?;
    assert_replaced(&migrated, &sock_programs(&bed)?);
    let r = bed.tcp(TO, 20)?;
    assert_eq!(r.ok(), 20, "{r:?}");
    Ok(())
}

#[test]
fn cleanup_detaches_and_non_vip_traffic_is_untouched() -> anyhow::Result<()> {
    let mut bed = web_bed()?;
    // Straight to a pod IP: not rewritten.
    let r = bed.tcp("10.42.0.148:8080", 20)?;
    assert_eq!(r.replies.get("pa"), Some(&20), "{r:?}");
    assert_eq!(r.peers.keys().collect::<Vec<_>>(), ["10.42.0.148:8080"]);
    // An address no Service has: not ours, left alone (the hub says unreachable).
    let r = bed.tcp("10.96.100.2:81", 1)?;
    assert_eq!(r.errors.get("NetworkUnreachable"), Some(&1), "{r:?}");
    // The VIP on a port its Service does not define: refused, as
    // kube-proxy's catch-all reject, instead of leaking past the node.
    let refused = bed.pins.stats()?.of("refused_unknown_port");
    let r = bed.tcp("10.96.100.1:81", 3)?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
    assert_eq!(bed.pins.stats()?.of("refused_unknown_port"), refused + 3);

    bed.agent().terminate()?;
    let out = std::process::Command::new(lb_tests::agent::agent_bin())
        .args(["cleanup", "--bpffs-dir"])
        .arg(bed.pins_path())
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!bed.pins_path().exists());
    let r = bed.tcp(TO, 1)?;
    assert_eq!(
        r.errors.get("NetworkUnreachable"),
        Some(&1),
        "after cleanup the VIP is no longer translated: {r:?}"
    );
    Ok(())
}

#[test]
fn malformed_documents_are_skipped_and_the_valid_ones_work() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    bed.backend("pa", "10.42.0.148".parse()?, &[8080], &[])?;
    let good = web(&["10.42.0.148"]);
    // A document that is no YAML at all, then objects the model refuses.
    let bad = "---\n: : [this is not yaml\n".to_owned()
        + &yaml([
            Object::from(
                Svc::new("default", "bad-ip")
                    .cluster_ip("not-an-ip")
                    .port("http", 80, "TCP"),
            ),
            Svc::new("default", "bad-port")
                .cluster_ip("10.96.100.2")
                .port("http", 70000, "TCP")
                .into(),
            Svc::new("default", "zero-port")
                .cluster_ip("10.96.100.3")
                .port("http", 0, "TCP")
                .into(),
            Slice::new("default", "orphan").no_endpoints().into(),
        ]);
    bed.write_manifest(&(bad + &good))?;
    let agent = bed.start_agent(&[])?;
    let invalid = |kind: &str| format!("lbagent_invalid_objects_total{{kind=\"{kind}\"}}");
    assert_eq!(
        agent.metric(&invalid("Service"))?,
        3.0,
        "bad-ip, bad-port, zero-port"
    );
    assert_eq!(agent.metric(&invalid("EndpointSlice"))?, 1.0, "orphan");
    assert_eq!(agent.metric("lbagent_services_programmed")?, 1.0, "web");
    let r = bed.tcp(TO, 20)?;
    assert_eq!(r.ok(), 20, "{r:?}");
    Ok(())
}

#[test]
fn a_frontend_deleted_by_hand_is_restored_by_the_periodic_prune() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    bed.backend("pa", "10.42.0.148".parse()?, &[8080], &[])?;
    bed.write_manifest(&web(&["10.42.0.148"]))?;
    bed.start_agent(&["--map-prune-interval", "1s"])?;
    let before = bed.pins.dump()?;
    assert!(before.contains(TO), "{before}");
    // What an operator's `bpftool map delete` does: 10.96.100.1:80/TCP,
    // internal scope, as the key's bytes.
    let map = bed.pins.path().join("maps").join(lb_common::FRONTENDS4.pin);
    let status = std::process::Command::new("bpftool")
        .args(["map", "delete", "pinned"])
        .arg(&map)
        .args(["key", "hex", "0a", "60", "64", "01", "00", "50", "06", "00"])
        .status()?;
    assert!(status.success(), "bpftool map delete: {status}");
    assert!(!bed.pins.dump()?.contains(TO), "the entry must be gone");
    // Repaired, and the orphaned revision freed once its grace period
    // passed: until then the listing counts it as retired.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut after = bed.pins.dump()?;
    while !(after.contains(TO) && after.contains("; 0 revisions retired")) {
        assert!(
            std::time::Instant::now() < deadline,
            "not repaired:\n{after}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        after = bed.pins.dump()?;
    }
    // Rewritten under a fresh id, the same backends; the orphaned state and
    // slots freed (the entry counts match).
    let backends = |d: &str| -> Vec<String> {
        d.lines()
            .filter(|l| l.trim_start().starts_with("->") || l.starts_with("# entries"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(backends(&after), backends(&before), "{before}\n{after}");
    let r = bed.tcp(TO, 20)?;
    assert_eq!(r.ok(), 20, "{r:?}");
    Ok(())
}
