//! `cargo xtask demo`: the seed scenario, in namespaces of its own.
//!
//! Pods are processes in network namespaces; the client sits in the demo's
//! cgroup, where the agent attaches. service-a's only endpoint lies in the
//! excluded 10.244.0.0/16, so it is left to its owning CNI, played here by a
//! DNAT rule in the hub namespace. Everything is removed on exit, also on
//! failure or Ctrl-C.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::{Context as _, bail, ensure};
use lb_fixtures::{Object, Slice, Svc, yaml};
use lb_tests::{netns, probe::Report, scenario::Bed};

const REQUESTS: u32 = 300;

struct Pod {
    id: &'static str,
    ip: &'static str,
    tcp: &'static [u16],
    udp: &'static [u16],
}

const PODS: [Pod; 6] = [
    Pod {
        id: "ovn-pod-a",
        ip: "10.244.0.11",
        tcp: &[80],
        udp: &[],
    },
    Pod {
        id: "pod-b",
        ip: "10.144.219.69",
        tcp: &[80],
        udp: &[],
    },
    Pod {
        id: "ngx-148",
        ip: "10.42.0.148",
        tcp: &[80],
        udp: &[],
    },
    Pod {
        id: "ngx-149",
        ip: "10.42.0.149",
        tcp: &[80],
        udp: &[],
    },
    Pod {
        id: "coredns-1",
        ip: "10.42.0.20",
        tcp: &[],
        udp: &[53],
    },
    Pod {
        id: "coredns-2",
        ip: "10.42.0.21",
        tcp: &[],
        udp: &[53],
    },
];

fn manifest() -> String {
    let svc = |ns: &str, name: &str, vip: &str, port: (&str, i32, &str)| {
        Object::from(
            Svc::new(ns, name)
                .cluster_ip(vip)
                .port(port.0, port.1, port.2),
        )
    };
    let slice = |ns: &str, name: &str, svc: &str, port: (&str, i32, &str), ips: &[&str]| {
        Object::from(
            Slice::new(ns, name)
                .service(svc)
                .port(port.0, port.1, port.2)
                .ready(ips),
        )
    };
    yaml([
        svc("ovn-poc", "service-a", "10.96.164.53", ("", 10001, "TCP")),
        slice(
            "ovn-poc",
            "service-a-x1",
            "service-a",
            ("", 80, "TCP"),
            &["10.244.0.11"],
        ),
        svc("ovn-poc", "service-b", "10.96.67.152", ("", 10001, "TCP")),
        slice(
            "ovn-poc",
            "service-b-x1",
            "service-b",
            ("", 80, "TCP"),
            &["10.144.219.69"],
        ),
        svc("default", "ngx-svc", "10.43.120.124", ("http", 80, "TCP")),
        slice(
            "default",
            "ngx-svc-x1",
            "ngx-svc",
            ("http", 80, "TCP"),
            &["10.42.0.148", "10.42.0.149"],
        ),
        svc("kube-system", "kube-dns", "10.96.0.10", ("dns", 53, "UDP")),
        slice(
            "kube-system",
            "kube-dns-x1",
            "kube-dns",
            ("dns", 53, "UDP"),
            &["10.42.0.20", "10.42.0.21"],
        ),
    ])
}

pub(crate) fn run() -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Ctrl-C: let the current step fail, so the guards below clean up.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("signal handler")?;
    let check = || -> anyhow::Result<()> {
        ensure!(!stop.load(Ordering::SeqCst), "interrupted");
        Ok(())
    };

    let mut bed = Bed::new()?;
    for pod in &PODS {
        bed.backend(pod.id, pod.ip.parse()?, pod.tcp, pod.udp)?;
    }
    netns::foreign_cni_dnat(bed.topo.hub(), "10.96.164.53", 10001, "10.244.0.11:80")?;
    bed.write_manifest(&manifest())?;
    println!(
        "== lb-agent run --exclude-cluster-cidr=10.244.0.0/16,  (cgroup {})",
        bed.cgroup.path().display()
    );
    let agent = bed.start_agent(&["--exclude-cluster-cidr=10.244.0.0/16,"])?;
    for line in agent
        .log_text()
        .lines()
        .filter(|l| l.contains("excluded") || l.contains("own CNI"))
    {
        println!("   agent: {}", line.split("INFO ").last().unwrap_or(line));
    }
    check()?;

    let mut failures = Vec::new();
    let mut expect = |ok: bool, what: String| {
        println!("   [{}] {what}", if ok { "ok" } else { "FAIL" });
        if !ok {
            failures.push(what);
        }
    };

    let show = |name: &str, to: &str, r: &Report| {
        println!("\n== {name} {to}: {REQUESTS} requests");
        for (id, n) in &r.replies {
            println!("   {id:<12} {n:>4}");
        }
        for (e, n) in &r.errors {
            println!("   error {e:<10} {n:>4}");
        }
    };

    let a = bed.tcp("10.96.164.53:10001", REQUESTS)?;
    show("service-a (ovn-poc)", "10.96.164.53:10001/TCP", &a);
    let hits = netns::foreign_cni_hits(bed.topo.hub())?;
    expect(
        a.replies.get("ovn-pod-a") == Some(&REQUESTS),
        "every request answered by 10.244.0.11".into(),
    );
    expect(
        hits == u64::from(REQUESTS),
        format!(
            "left untranslated for its owning CNI: its DNAT saw {hits} connections to the VIP itself"
        ),
    );
    check()?;

    let b = bed.tcp("10.96.67.152:10001", REQUESTS)?;
    show("service-b (ovn-poc)", "10.96.67.152:10001/TCP", &b);
    expect(
        b.replies.get("pod-b") == Some(&REQUESTS),
        "every request to 10.144.219.69 via eBPF".into(),
    );
    check()?;

    let n = bed.tcp("10.43.120.124:80", REQUESTS)?;
    show("ngx-svc", "10.43.120.124:80/TCP", &n);
    let spread = |r: &Report, ids: [&str; 2]| {
        ids.iter()
            .all(|id| r.replies.get(*id).copied().unwrap_or(0) >= REQUESTS / 4)
    };
    expect(
        n.ok() == REQUESTS && spread(&n, ["ngx-148", "ngx-149"]),
        "spread over both endpoints".into(),
    );
    expect(
        n.peers.keys().eq(["10.43.120.124:80"]),
        "getpeername() returns the ClusterIP".into(),
    );
    check()?;

    let d = bed.udp("10.96.0.10:53", REQUESTS, false)?;
    show("kube-dns", "10.96.0.10:53/UDP", &d);
    expect(
        d.ok() == REQUESTS && spread(&d, ["coredns-1", "coredns-2"]),
        "spread over both endpoints".into(),
    );
    expect(
        d.peers.keys().eq(["10.96.0.10:53"]),
        "every reply comes from 10.96.0.10:53".into(),
    );
    check()?;

    println!(
        "\n== lb-agent dump --bpffs-dir {}",
        bed.pins_path().display()
    );
    let dump = bed.pins.dump()?;
    print!("{dump}");
    expect(
        !dump.contains("10.96.164.53"),
        "service-a is not programmed".into(),
    );

    // Alternating rounds, so neither side gets the cold start.
    println!(
        "\n== rough TCP connection rate, one client, 2000 short connections per round, 4 rounds each, alternating"
    );
    let modes = [
        ("through VIP 10.43.120.124:80", "10.43.120.124:80"),
        ("direct to the pod IPs", ""),
    ];
    let mut totals = BTreeMap::<&str, (u64, u128)>::new();
    for round in 0..8 {
        let (label, to) = modes[round % 2];
        // Direct rounds alternate between the two pods, as the VIP spreads over both.
        let to = if to.is_empty() {
            ["10.42.0.148:80", "10.42.0.149:80"][round / 2 % 2]
        } else {
            to
        };
        let r = bed.tcp(to, 2000)?;
        ensure!(r.failed() == 0, "{label}: {r:?}");
        let t = totals.entry(label).or_default();
        t.0 += 2000;
        t.1 += r.elapsed_ms;
    }
    for (label, (conns, ms)) in &totals {
        println!(
            "   {label:<30} {:>8.0} conn/s",
            *conns as f64 * 1000.0 / (*ms).max(1) as f64
        );
    }
    check()?;

    if !failures.is_empty() {
        bail!("{} expectation(s) failed: {failures:?}", failures.len());
    }
    println!("\ndemo passed; tearing down namespaces, cgroup and pins");
    Ok(())
}
