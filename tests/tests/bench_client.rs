//! The load-generating clients (`lbt bench-tcp` / `lbt bench-udp`) against
//! two identity backends, direct to the pod IPs (no agent). Needs root; fails
//! loudly without it. Prints the numbers; asserts no speed.

use lb_tests::{
    cgroup::TestCgroup,
    netns::Topology,
    probe::{self, BenchReport, Server},
    require_root, unique,
};

const PA: &str = "10.42.7.1";
const PB: &str = "10.42.7.2";

/// The checks every run must pass; `what` labels the printout.
fn check(what: &str, r: &BenchReport) {
    eprintln!(
        "{what}: ok {} failed {} in {:.3} s = {:.0}/s, p50 {:?} µs, p99 {:?} µs, \
         replies {:?}, errors {:?}",
        r.ok,
        r.failed,
        r.seconds,
        r.rate,
        r.p50_us(),
        r.p99_us(),
        r.replies,
        r.errors
    );
    assert!(r.ok > 0, "{what}: nothing succeeded: {r:?}");
    assert_eq!(r.failed, 0, "{what}: {r:?}");
    assert_eq!(r.errors.values().sum::<u64>(), r.failed, "{what}: {r:?}");
    assert_eq!(r.replies.values().sum::<u64>(), r.ok, "{what}: {r:?}");
    for id in ["pa", "pb"] {
        assert!(
            r.replies.get(id).copied().unwrap_or(0) > 0,
            "{what}: backend {id} never replied: {r:?}"
        );
    }
    // Round-robin over two targets: neither side gets much more than half
    // (each of the 4 workers is at most one request ahead on one side).
    let pa = r.replies["pa"] as i64;
    let pb = r.replies["pb"] as i64;
    assert!((pa - pb).abs() <= 4, "{what}: uneven round-robin: {r:?}");
    let (p50, p99) = (r.p50_us().expect("p50"), r.p99_us().expect("p99"));
    assert!(0.0 < p50 && p50 <= p99, "{what}: {r:?}");
    // The run lasts at least --seconds, and the rate is ok / seconds.
    assert!(r.seconds >= 1.0, "{what}: {r:?}");
    let rate = r.ok as f64 / r.seconds;
    assert!((r.rate - rate).abs() <= 1e-6 * rate, "{what}: {r:?}");
}

#[test]
fn bench_clients_load_both_backends_without_failures() -> anyhow::Result<()> {
    require_root();
    let name = unique("bc");
    let mut topo = Topology::new(&name)?;
    let client = topo.add_host("cl", "10.0.0.2".parse()?)?;
    let mut servers = Vec::new();
    for (id, ip) in [("pa", PA), ("pb", PB)] {
        let ns = topo.add_host(id, ip.parse()?)?;
        servers.push(Server::start(&ns, id, &[8080], &[5353])?);
    }
    let cgroup = TestCgroup::new(&name)?;

    let run = |cmd: &str, port: u16| {
        let to = format!("{PA}:{port},{PB}:{port}");
        let args = [cmd, "--to", &to, "--concurrency", "4", "--seconds", "1"];
        probe::bench(&client, cgroup.path(), &args)
    };
    check("bench-tcp", &run("bench-tcp", 8080)?);
    check("bench-udp", &run("bench-udp", 5353)?);
    Ok(())
}
