//! The connect hook on the most frequent Service connection: a socket,
//! `connect()` to a Service address, `close()`, as every DNS lookup does
//! (UDP) and every short-lived client starts (TCP, non-blocking: the SYN
//! leaves and `close()` aborts it); and the sendmsg hook on an unconnected
//! socket's datagrams. One thread cycles over the plan's Service addresses
//! (4,096), against the same loop with no programs attached and to
//! addresses that are no Service; the kernel's statistics give the
//! program's own time per call.

use std::net::IpAddr;

use anyhow::ensure;
use lb_tests::{
    cgroup::TestCgroup,
    kubeproxy::{self, Proto, SvcSpec},
    probe,
    progstats::{Runs, StatsOn},
    scenario::Bed,
    unique,
};

use super::{
    cluster::capacity_flags,
    manifests::manifests,
    plan::Plan,
    results::connect::{Call, Row, Target},
};

/// The N Services of one measurement: alternately UDP 53 and TCP 80, each
/// on its own cluster IP with the plan's endpoints (addresses nothing
/// answers on: a UDP connect sends nothing, and a TCP SYN is dropped in
/// the test's hub namespace).
fn services(n: usize, endpoints: usize) -> Vec<SvcSpec> {
    let mut all = kubeproxy::filler_services(n, endpoints);
    for (i, s) in all.iter_mut().enumerate() {
        if i % 2 == 0 {
            s.proto = Proto::Udp;
            s.port = 53;
            s.port_name = "dns".into();
            for e in &mut s.endpoints {
                e.1 = 5353;
            }
        }
    }
    all
}

/// The loops' targets of `proto`: Service addresses, and the first
/// endpoint of each of those Services (no Service).
fn targets(specs: &[SvcSpec], proto: Proto, addrs: usize) -> (String, String) {
    let of = |ip: IpAddr, port: u16| format!("{ip}:{port}");
    let chosen: Vec<&SvcSpec> = specs
        .iter()
        .filter(|s| s.proto == proto)
        .take(addrs)
        .collect();
    let services = chosen.iter().map(|s| of(s.vip, s.port)).collect::<Vec<_>>();
    let others = chosen
        .iter()
        .map(|s| of(s.endpoints[0].0, s.endpoints[0].1))
        .collect::<Vec<_>>();
    (services.join(","), others.join(","))
}

pub(super) fn measure(plan: &Plan, n: usize) -> anyhow::Result<Vec<Row>> {
    let addrs = plan.connect_addrs;
    ensure!(n >= 2 * addrs || plan.quick, "N={n} has too few Services");
    let mut bed = Bed::new()?;
    let specs = services(n, plan.endpoints);
    bed.write_manifest(&manifests(&[&specs]))?;
    let plain = TestCgroup::new(&unique("plain"))?;
    let flags = capacity_flags(n, plan.endpoints);
    bed.start_agent(&flags.iter().map(String::as_str).collect::<Vec<_>>())?;
    let mut rows: Vec<Row> = Vec::new();
    for call in Call::ALL {
        let (services, others) = targets(&specs, call.proto(), addrs);
        let link = bed.pins.path().join("links").join(call.program());
        for target in Target::ALL {
            rows.push(Row {
                n,
                call,
                target,
                addrs: services.split(',').count(),
                ns_per_loop: Vec::new(),
                ns_per_call: Vec::new(),
                failed: 0,
            });
        }
        for round in 0..plan.rounds {
            let mut order = Target::ALL.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for target in order {
                let (to, cgroup) = match target {
                    Target::Services => (&services, bed.cgroup.path()),
                    Target::NoPrograms => (&services, plain.path()),
                    Target::NotServices => (&others, bed.cgroup.path()),
                };
                let seconds = plan.seconds.to_string();
                let mut args = vec![
                    "bench-connect",
                    "--to",
                    to,
                    "-c",
                    "1",
                    "--seconds",
                    &seconds,
                ];
                match call {
                    Call::UdpConnect => {}
                    Call::TcpConnect => args.push("--tcp"),
                    Call::UdpSendto => args.push("--sendto"),
                }
                let ours = target != Target::NoPrograms;
                let stats = ours
                    .then(|| -> anyhow::Result<_> {
                        let on = StatsOn::enable()?;
                        Ok((on, Runs::of_link(&link)?))
                    })
                    .transpose()?;
                let r = probe::bench(&bed.client_ns, cgroup, &args)?;
                let row = rows
                    .iter_mut()
                    .find(|r| r.call == call && r.target == target)
                    .expect("a row per target");
                ensure!(
                    r.ok > 0,
                    "{} to {} succeeded never",
                    call.name(),
                    target.name()
                );
                row.failed += r.failed;
                row.ns_per_loop
                    .push(r.seconds * 1e9 / (r.ok + r.failed) as f64);
                if let Some((_on, before)) = stats {
                    let ran = Runs::of_link(&link)?.since(before);
                    row.ns_per_call
                        .push(ran.time.as_nanos() as f64 / ran.count.max(1) as f64);
                }
                eprintln!(
                    "   {:<25} {:<28} N={n:<6} {:>6.0} ns/loop{}",
                    call.name(),
                    target.name(),
                    row.ns_per_loop.last().copied().unwrap_or(f64::NAN),
                    row.ns_per_call
                        .last()
                        .filter(|_| ours)
                        .map(|c| format!(", {} {c:.0} ns/call", call.program()))
                        .unwrap_or_default()
                );
            }
        }
    }
    Ok(rows)
}
