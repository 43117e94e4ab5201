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

/// A Service and its one EndpointSlice, `<name>-x1`.
struct Service {
    ns: &'static str,
    name: &'static str,
    vip: &'static str,
    /// Name, number, protocol.
    port: (&'static str, i32, &'static str),
    /// The endpoints' port.
    target: i32,
    ips: &'static [&'static str],
}

const SERVICES: [Service; 4] = [
    Service {
        ns: "ovn-poc",
        name: "service-a",
        vip: "10.96.164.53",
        port: ("", 10001, "TCP"),
        target: 80,
        ips: &["10.244.0.11"],
    },
    Service {
        ns: "ovn-poc",
        name: "service-b",
        vip: "10.96.67.152",
        port: ("", 10001, "TCP"),
        target: 80,
        ips: &["10.144.219.69"],
    },
    Service {
        ns: "default",
        name: "ngx-svc",
        vip: "10.43.120.124",
        port: ("http", 80, "TCP"),
        target: 80,
        ips: &["10.42.0.148", "10.42.0.149"],
    },
    Service {
        ns: "kube-system",
        name: "kube-dns",
        vip: "10.96.0.10",
        port: ("dns", 53, "UDP"),
        target: 53,
        ips: &["10.42.0.20", "10.42.0.21"],
    },
];

fn manifest() -> String {
    yaml(SERVICES.iter().flat_map(|s| {
        let (port, number, proto) = s.port;
        [
            Object::from(
                Svc::new(s.ns, s.name)
                    .cluster_ip(s.vip)
                    .port(port, number, proto),
            ),
            Object::from(
                Slice::new(s.ns, &format!("{}-x1", s.name))
                    .service(s.name)
                    .port(port, s.target, proto)
                    .ready(s.ips),
            ),
        ]
    }))
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

    // Services with two endpoints: spread over both, the replies from the VIP.
    let spread = |r: &Report, ids: [&str; 2]| {
        ids.iter()
            .all(|id| r.replies.get(*id).copied().unwrap_or(0) >= REQUESTS / 4)
    };
    for (name, vip, proto, ids, from_vip) in [
        (
            "ngx-svc",
            "10.43.120.124:80",
            "TCP",
            ["ngx-148", "ngx-149"],
            "getpeername() returns the ClusterIP",
        ),
        (
            "kube-dns",
            "10.96.0.10:53",
            "UDP",
            ["coredns-1", "coredns-2"],
            "every reply comes from 10.96.0.10:53",
        ),
    ] {
        let r = if proto == "TCP" {
            bed.tcp(vip, REQUESTS)?
        } else {
            bed.udp(vip, REQUESTS, false)?
        };
        show(name, &format!("{vip}/{proto}"), &r);
        expect(
            r.ok() == REQUESTS && spread(&r, ids),
            "spread over both endpoints".into(),
        );
        expect(r.peers.keys().eq([vip]), from_vip.into());
        check()?;
    }

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
