//! `cargo xtask bench --scale`: the agent's cold programming, one-endpoint
//! change latency and memory at 1,000 to 100,000 Services x 10 endpoints,
//! from a file and from the stand-in apiserver.

use std::time::Instant;

use lb_tests::{apiserver::ApiServer, kubeproxy, scenario::Bed};

use super::{
    cluster::capacity_flags,
    manifests::manifests,
    ours::{lone_changes, ours_cold, rss},
    results::scale::{API, ENDPOINTS, FILE, Row, UPDATES},
    stats::percentile,
};

/// Services measured.
pub(super) const SCALES: [usize; 4] = [1_000, 10_000, 50_000, 100_000];

/// Each of `scales`, from a file and from the apiserver.
pub(super) fn measure(scales: &[usize]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in scales {
        let specs = kubeproxy::filler_services(n, ENDPOINTS);
        let yaml = manifests(&[&specs]);
        let flags = capacity_flags(n, ENDPOINTS);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        eprintln!("== scale, {n} x {ENDPOINTS}");
        {
            let mut bed = Bed::new()?;
            bed.write_manifest(&yaml)?;
            let start = Instant::now();
            let agent = bed.spawn_agent(&flags)?;
            let c = ours_cold("ours, --from-file", start, agent, n)?;
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
            let c = ours_cold("ours, apiserver watch", start, agent, n)?;
            let mut changes = lone_changes(&mut bed, &api, &specs, UPDATES)?;
            changes.sort_unstable();
            let rss = rss(bed.agent().pid())?;
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
