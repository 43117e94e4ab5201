//! Full maps, with the real agent and real traffic: capacities set small
//! by flag, the overflow waits without disturbing what is programmed, is
//! counted once, leaves `/healthz` healthy, and is written as soon as room
//! frees up, without a restart. Needs root; fails loudly without it.
//!
//! Addresses: VIPs 10.96.210-211.x, backends 10.42.210-211.x.

use std::time::{Duration, Instant};

use lb_fixtures::{Object, Slice, Svc, yaml};
use lb_tests::scenario::Bed;

const WAITING: &str = "lbagent_frontends_waiting_for_room";
const REFUSED: &str = "lbagent_map_full_errors_total";

/// Service `name` on `vip` port 80/TCP, and its slice with `ips` ready
/// on 8080.
fn service(name: &str, vip: &str, ips: &[&str]) -> [Object; 2] {
    [
        Svc::new("default", name)
            .cluster_ip(vip)
            .port("http", 80, "TCP")
            .into(),
        Slice::new("default", &format!("{name}-1"))
            .service(name)
            .port("http", 8080, "TCP")
            .ready(ips)
            .into(),
    ]
}

fn manifest(services: &[(&str, &str, &[&str])]) -> String {
    yaml(
        services
            .iter()
            .flat_map(|(name, vip, ips)| service(name, vip, ips)),
    )
}

/// Whether `lb-agent dump` lists a frontend on `vip`.
fn listed(bed: &Bed, vip: &str) -> anyhow::Result<bool> {
    let dump = bed.pins.dump()?;
    Ok(dump.lines().any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|a| a.starts_with(&format!("{vip}:")))
    }))
}

#[test]
fn a_full_frontends_map_keeps_programmed_services_and_programs_the_rest_when_room_frees()
-> anyhow::Result<()> {
    const PODS: [(&str, &str); 4] = [
        ("pa", "10.42.210.1"),
        ("pb", "10.42.210.2"),
        ("pc", "10.42.210.3"),
        ("pd", "10.42.210.4"),
    ];
    let mut bed = Bed::new()?;
    for (id, ip) in PODS {
        bed.backend(id, ip.parse()?, &[8080], &[])?;
    }
    let a = ("a", "10.96.210.1", &["10.42.210.1"][..]);
    let b = ("b", "10.96.210.2", &["10.42.210.2"][..]);
    let c = ("c", "10.96.210.3", &["10.42.210.3"][..]);
    let d = ("d", "10.96.210.4", &["10.42.210.4"][..]);
    // Room for six frontends: three Services of one port each, every
    // ClusterIP also holding its wildcard frontend (unknown ports refused).
    // `d`, last by name, does not fit.
    bed.write_manifest(&manifest(&[a, b, c, d]))?;
    bed.start_agent(&["--bpf-lb-service-map-max=6"])?;
    let pid = bed.agent().pid();

    for (vip, pod) in [
        ("10.96.210.1", "pa"),
        ("10.96.210.2", "pb"),
        ("10.96.210.3", "pc"),
    ] {
        bed.until_reached(&format!("{vip}:80"), &[pod])?;
    }
    assert!(!listed(&bed, "10.96.210.4")?, "d cannot fit");
    assert_eq!(bed.agent().metric(WAITING)?, 2.0, "d's port and wildcard");
    assert_eq!(bed.agent().metric(REFUSED)?, 2.0);
    // A full map is not an unhealthy proxy: everything programmed works.
    let (status, body) = bed.agent().http_get("healthz", "/healthz")?;
    assert_eq!(status, 200, "{body}");

    // Under traffic to a programmed Service, d waits through retries
    // (1 s, then 2 s) and is counted once...
    let churn = bed.churn("10.96.210.2:80")?;
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(bed.agent().metric(REFUSED)?, 2.0, "counted once per wait");
    assert_eq!(bed.agent().metric(WAITING)?, 2.0);

    // ...and is programmed once a deleted Service frees room, without a
    // restart. (That it is due at once rather than at its next retry is
    // the syncer's unit test; this prints how long it took.)
    let freed = Instant::now();
    bed.update(&manifest(&[b, c, d]))?;
    bed.until_reached("10.96.210.4:80", &["pd"])?;
    println!("d reachable {:?} after a was deleted", freed.elapsed());
    let r = churn.finish()?;
    assert_eq!(r.failed(), 0, "a programmed Service must not notice: {r:?}");
    assert_eq!(r.replies.keys().collect::<Vec<_>>(), ["pb"], "{r:?}");
    assert!(!listed(&bed, "10.96.210.1")?);
    // d's port went first; its wildcard may still wait for the id of a's
    // port frontend, free once its grace period has passed.
    bed.agent().wait_metric(WAITING, 0.0)?;
    assert!(bed.pins.dump()?.contains("10.96.210.4:*"), "d's wildcard");
    assert_eq!(bed.agent().metric(REFUSED)?, 2.0);
    assert_eq!(bed.agent().pid(), pid, "no restart");
    Ok(())
}

#[test]
fn a_full_backends_map_keeps_a_services_previous_endpoints_until_room_frees() -> anyhow::Result<()>
{
    const PODS: [(&str, &str); 4] = [
        ("w1", "10.42.211.1"),
        ("w2", "10.42.211.2"),
        ("w3", "10.42.211.3"),
        ("w4", "10.42.211.4"),
    ];
    let mut bed = Bed::new()?;
    for (id, ip) in PODS {
        bed.backend(id, ip.parse()?, &[8080], &[])?;
    }
    let api = ("api", "10.96.211.2", &["10.42.211.3"][..]);
    let web = |ips: &'static [&'static str]| ("web", "10.96.211.1", ips);
    let web_to = "10.96.211.1:80";
    bed.write_manifest(&manifest(&[api, web(&["10.42.211.1", "10.42.211.2"])]))?;
    // Room for three distinct backend addresses.
    bed.start_agent(&["--bpf-lb-service-backend-map-max=3"])?;
    bed.until_reached(web_to, &["w1", "w2"])?;
    bed.until_reached("10.96.211.2:80", &["w3"])?;

    // A fourth endpoint does not fit: web keeps serving from its previous
    // endpoints, without a failed connection.
    let churn = bed.churn(web_to)?;
    bed.update(&manifest(&[
        api,
        web(&["10.42.211.1", "10.42.211.2", "10.42.211.4"]),
    ]))?;
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(bed.agent().metric(WAITING)?, 1.0, "web's port");
    assert_eq!(bed.agent().metric(REFUSED)?, 1.0);
    let r = churn.finish()?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(r.replies.keys().collect::<Vec<_>>(), ["w1", "w2"], "{r:?}");

    // api's endpoint leaves with it, after its grace period: web gets
    // the new one.
    let churn = bed.churn(web_to)?;
    bed.update(&manifest(&[web(&[
        "10.42.211.1",
        "10.42.211.2",
        "10.42.211.4",
    ])]))?;
    bed.until_reached(web_to, &["w1", "w2", "w4"])?;
    let r = churn.finish()?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(bed.agent().metric(WAITING)?, 0.0);
    Ok(())
}

/// `LB4_REVNAT` (UDP sockets' reverse NAT, LRU) far too small for the
/// sockets that come and go, and small against the kernel's per-CPU LRU
/// lists. An unconnected socket's first destination is in its own storage,
/// its others in this map: resolver-style UDP asking two nameservers (a new
/// socket per request, as musl's) fills it dozens of times over while
/// long-lived unconnected sockets keep asking beside it. The entries
/// evicted must be those of closed sockets, never one of a socket waiting
/// for its reply: no reply may show a backend's address (`WrongPeer`), none
/// may be lost. (Before the programs marked a new entry referenced, 1.3 to
/// 1.8 % of the new sockets' replies did.)
#[test]
fn a_full_udp_reverse_nat_map_evicts_the_entries_of_closed_sockets() -> anyhow::Result<()> {
    const CAPACITY: usize = 512;
    const DNS: [&str; 2] = ["10.96.212.10:53", "10.96.212.11:53"];
    let mut bed = Bed::new()?;
    for (id, ip) in [
        ("d1", "10.42.212.1"),
        ("d2", "10.42.212.2"),
        ("d3", "10.42.212.3"),
        ("d4", "10.42.212.4"),
    ] {
        bed.backend(id, ip.parse()?, &[], &[53])?;
    }
    let dns = |name: &str, vip: &str, ips: &[&str]| -> [Object; 2] {
        [
            Object::from(
                Svc::new("kube-system", name)
                    .cluster_ip(vip)
                    .port("dns", 53, "UDP"),
            ),
            Slice::new("kube-system", &format!("{name}-1"))
                .service(name)
                .port("dns", 53, "UDP")
                .ready(ips)
                .into(),
        ]
    };
    let [a, b] = dns("dns-a", "10.96.212.10", &["10.42.212.1", "10.42.212.2"]);
    let [c, d] = dns("dns-b", "10.96.212.11", &["10.42.212.3", "10.42.212.4"]);
    bed.write_manifest(&yaml([a, b, c, d]))?;
    bed.start_agent(&[&format!("--bpf-sock-rev-map-max={CAPACITY}")])?;

    let run = |extra: &'static [&'static str]| {
        let (ns, cg) = (bed.client_ns.clone(), bed.cgroup.path().to_owned());
        std::thread::spawn(move || {
            let mut args = vec![
                "bench-udp",
                "--to",
                DNS[0],
                "--to",
                DNS[1],
                "--seconds",
                "3",
            ];
            args.extend(extra);
            lb_tests::probe::bench(&ns, &cg, &args)
        })
    };
    let fresh = run(&["-c", "4", "--ask-all"]);
    let long = run(&["-c", "2"]);
    let fresh = fresh.join().expect("fresh-socket client")?;
    let long = long.join().expect("long-lived client")?;
    let entries = lb_tests::maps::count_entries(&bed.pins.path().join("maps"), true)?
        .revnat
        .unwrap_or(0);
    eprintln!(
        "LB4_REVNAT of {CAPACITY}: {entries} entries at the end; new socket per request: {} \
         answered, {} failed {:?}; long-lived sockets: {} answered, {} failed {:?}",
        fresh.ok, fresh.failed, fresh.errors, long.ok, long.failed, long.errors
    );
    // The map was filled many times over: each fresh socket's second
    // answer came through an entry of its own there.
    assert!(fresh.ok / 2 > 10 * CAPACITY as u64, "{fresh:?}");
    assert!(entries <= CAPACITY, "{entries}");
    assert!(
        entries >= CAPACITY / 2,
        "the map held the sockets' entries: {entries}"
    );
    assert!(long.ok > 0, "{long:?}");
    assert_eq!(fresh.failed, 0, "{:?}", fresh.errors);
    assert_eq!(long.failed, 0, "{:?}", long.errors);
    Ok(())
}
