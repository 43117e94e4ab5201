//! Endpoints rolling up and down hundreds of times per second, through the
//! stand-in apiserver, while clients connect at full speed: no connection may
//! fail, and every answer must come from an endpoint of its Service. Needs
//! root; fails loudly without it.

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use lb_fixtures::{Object, Slice, Svc, json, yaml};
use lb_tests::{
    apiserver::ApiServer,
    probe::{self, BenchReport},
    scenario::{Bed, apply_yaml},
};

const WEB: [(&str, &str); 4] = [
    ("pa", "10.42.0.1"),
    ("pb", "10.42.0.2"),
    ("pc", "10.42.0.3"),
    ("pd", "10.42.0.4"),
];
const DNS: [(&str, &str); 3] = [
    ("qa", "10.42.1.1"),
    ("qb", "10.42.1.2"),
    ("qc", "10.42.1.3"),
];
/// How long the endpoints roll, and the clients run.
const SECONDS: f64 = 8.0;
/// Slice updates per second, both Services together.
const UPDATES_PER_SECOND: f64 = 400.0;

/// The EndpointSlice of `svc` holding the pods in `mask` (bit i: pod i).
fn slice_of(svc: &str, port: i32, proto: &str, pods: &[(&str, &str)], mask: usize) -> Object {
    let ips: Vec<&str> = pods
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, (_, ip))| *ip)
        .collect();
    Slice::new("default", &format!("{svc}-1"))
        .service(svc)
        .port("p", port, proto)
        .ready(&ips)
        .into()
}

fn service(name: &str, vip: &str, port: i32, proto: &str) -> Object {
    Svc::new("default", name)
        .cluster_ip(vip)
        .port("p", port, proto)
        .into()
}

fn ids(pods: &[(&str, &str)]) -> BTreeSet<String> {
    pods.iter().map(|(id, _)| (*id).to_owned()).collect()
}

#[test]
fn endpoints_rolling_hundreds_of_times_a_second_fail_no_connection() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    for (id, ip) in WEB {
        bed.backend(id, ip.parse()?, &[8080], &[])?;
    }
    for (id, ip) in DNS {
        bed.backend(id, ip.parse()?, &[], &[5353])?;
    }
    let api = ApiServer::start()?;
    apply_yaml(
        &api,
        &yaml([
            service("web", "10.96.100.1", 80, "TCP"),
            slice_of("web", 8080, "TCP", &WEB, 0b1111),
            service("dns", "10.96.100.2", 53, "UDP"),
            slice_of("dns", 5353, "UDP", &DNS, 0b111),
        ]),
    )?;
    bed.start_agent_kube(&api, &[])?;

    let seconds = SECONDS.to_string();
    let (ns, cg) = (bed.client_ns.clone(), bed.cgroup.path().to_owned());
    let mut applied = 0u32;
    let (tcp, udp, took): (BenchReport, BenchReport, Duration) = std::thread::scope(|s| {
        let tcp = s.spawn(|| {
            let args = [
                "bench-tcp",
                "--to",
                "10.96.100.1:80",
                "-c",
                "3",
                "--seconds",
                &seconds,
            ];
            probe::bench(&ns, &cg, &args)
        });
        let udp = s.spawn(|| {
            let args = [
                "bench-udp",
                "--to",
                "10.96.100.2:53",
                "-c",
                "1",
                "--seconds",
                &seconds,
                "--socket-per-request",
            ];
            probe::bench(&ns, &cg, &args)
        });
        // Every non-empty subset in turn, so each Service scales up and
        // down; its endpoints never all go, so no connection has cause to fail.
        let start = Instant::now();
        let gap = Duration::from_secs_f64(1.0 / UPDATES_PER_SECOND);
        let mut next = start;
        while start.elapsed().as_secs_f64() < SECONDS {
            let n = applied as usize;
            let slice = if n.is_multiple_of(2) {
                slice_of("web", 8080, "TCP", &WEB, 1 + (n / 2) % 15)
            } else {
                slice_of("dns", 5353, "UDP", &DNS, 1 + (n / 2) % 7)
            };
            api.apply(json(slice))?;
            applied += 1;
            next += gap;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        let took = start.elapsed();
        anyhow::Ok((
            tcp.join().expect("tcp client")?,
            udp.join().expect("udp client")?,
            took,
        ))
    })?;

    let rate = f64::from(applied) / took.as_secs_f64();
    eprintln!(
        "endpoint churn: {applied} slice updates in {:.1} s ({rate:.0}/s); \
         TCP {} connections ({:.0}/s), {} failed; UDP {} requests ({:.0}/s), {} failed",
        took.as_secs_f64(),
        tcp.ok + tcp.failed,
        tcp.rate,
        tcp.failed,
        udp.ok + udp.failed,
        udp.rate,
        udp.failed,
    );
    assert!(rate > 200.0, "only {rate:.0} updates/s");
    assert_eq!(tcp.failed, 0, "{:?}", tcp.errors);
    assert_eq!(udp.failed, 0, "{:?}", udp.errors);
    assert!(tcp.ok > 10_000, "too little TCP load: {}", tcp.ok);
    assert!(udp.ok > 2_000, "too little UDP load: {}", udp.ok);
    let answered = |r: &BenchReport| r.replies.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(
        answered(&tcp),
        ids(&WEB),
        "web answers from web's pods, all of them"
    );
    assert_eq!(
        answered(&udp),
        ids(&DNS),
        "dns answers from dns's pods, all of them"
    );

    // The agent saw every update; the datapath never found a slot or
    // backend missing, and translated every connection.
    let agent = bed.agent();
    let deadline = Instant::now() + Duration::from_secs(20);
    while agent.metric("kubeproxy_sync_proxy_rules_endpoint_changes_total")? < f64::from(applied) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the agent fell behind the updates"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "UDP sockets destroyed as stale: {}",
        agent.metric("lbagent_udp_sockets_destroyed_total")?
    );
    let stats = bed.pins.stats()?;
    assert_eq!(stats.of("refused_inconsistent"), 0, "{stats:?}");
    assert_eq!(stats.of("passed_frontend_removed"), 0, "{stats:?}");
    assert!(
        stats.of("connect_translated") >= tcp.ok + udp.ok,
        "{stats:?}"
    );
    // Retired revisions are deleted once their grace period passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dump = bed.pins.dump()?;
        if dump.contains("; 0 revisions retired") {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "revisions never reaped:\n{dump}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
