//! `cargo xtask bench --scale`: the agent's cold programming, one-endpoint
//! change latency and memory at 1,000 to 100,000 Services x 10 endpoints,
//! from a file and from the stand-in apiserver.

use std::time::Instant;

use lb_tests::{apiserver::ApiServer, kubeproxy, scenario::Bed};

use super::{
    control, datapath,
    results::scale::{API, ENDPOINTS, FILE, Row, UPDATES},
    stats::percentile,
};

/// Services measured.
pub(super) const SCALES: [usize; 4] = [1_000, 10_000, 50_000, 100_000];

/// Capacities for `n` Services of one port and `endpoints` endpoints each:
/// two frontends each (the port and the ClusterIP's wildcard), a slot and a
/// distinct backend per endpoint, and room for revisions in flight; never
/// below the defaults.
pub(super) fn capacity_flags(n: usize, endpoints: usize) -> Vec<String> {
    let fe = (2 * n + 1024).max(65_536);
    let be = (n * endpoints + 1024).max(131_072);
    let slots = (2 * n * endpoints).max(262_144);
    vec![
        format!("--bpf-lb-service-map-max={fe}"),
        format!("--bpf-lb-service-backend-map-max={be}"),
        format!("--bpf-lb-slot-map-max={slots}"),
    ]
}

/// Each of `scales`, from a file and from the apiserver.
pub(super) fn measure(scales: &[usize]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in scales {
        let specs = kubeproxy::filler_services(n, ENDPOINTS);
        let yaml = datapath::manifests(&[&specs]);
        let flags = capacity_flags(n, ENDPOINTS);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        eprintln!("== scale, {n} x {ENDPOINTS}");
        {
            let mut bed = Bed::new()?;
            bed.write_manifest(&yaml)?;
            let start = Instant::now();
            let agent = bed.spawn_agent(&flags)?;
            let c = control::ours_cold("ours, --from-file", start, agent, n)?;
            rows.push(Row {
                n,
                source: FILE,
                cold: c.wall,
                phases: c.phases,
                rss: c.rss.expect("ours"),
                changes: Vec::new(),
            });
        }
        {
            let mut bed = Bed::new()?;
            let api = ApiServer::start()?;
            lb_tests::scenario::apply_yaml(&api, &yaml)?;
            let start = Instant::now();
            let agent = bed.spawn_agent_kube(&api, &flags)?;
            let c = control::ours_cold("ours, apiserver watch", start, agent, n)?;
            let mut changes = control::lone_changes(&mut bed, &api, &specs, UPDATES)?;
            changes.sort_unstable();
            let rss = control::rss(bed.agent().pid())?;
            eprintln!(
                "   {n}: change p50 {:?} p99 {:?}, RSS after the changes {} MiB",
                percentile(&changes, 50.0),
                percentile(&changes, 99.0),
                rss.current >> 20
            );
            rows.push(Row {
                n,
                source: API,
                cold: c.wall,
                phases: c.phases,
                rss: c.rss.expect("ours"),
                changes,
            });
        }
    }
    Ok(rows)
}
