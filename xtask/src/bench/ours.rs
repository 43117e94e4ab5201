//! Our agent measured in a bed: a cold start to programmed (with its
//! health endpoints probed meanwhile), lone endpoint changes through the
//! stand-in apiserver, and its memory. The control-plane section and
//! `--scale` measure ours alike.

use std::{
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use lb_tests::{agent::Agent, apiserver::ApiServer, kubeproxy::SvcSpec, scenario::Bed};

use super::{
    health,
    manifests::slice,
    results::control::{Cold, Phases, Rss},
    stats::percentile,
};

/// Applies `count` one-endpoint slice changes to `api` one at a time, each
/// once the previous is written; returns each one's latency from watch
/// event to map write, as the agent logged it.
pub(super) fn lone_changes(
    bed: &mut Bed,
    api: &ApiServer,
    specs: &[SvcSpec],
    count: usize,
) -> anyhow::Result<Vec<Duration>> {
    let before = bed.agent().syncs();
    for u in 0..count {
        bed.kube_apply(api, &changed_slice(specs, u))?;
    }
    let log = bed.agent().log_text();
    let samples: Vec<Duration> = log
        .lines()
        .filter(|l| l.contains("sync complete"))
        .skip(before)
        .filter_map(|l| field(l, "latency_us="))
        .map(Duration::from_micros)
        .collect();
    anyhow::ensure!(samples.len() == count, "expected one sync per change");
    Ok(samples)
}

/// The `u`-th change: which Service, and the address its first endpoint
/// moves to. kube-proxy's partial syncs ([`super::control`]) make the
/// same changes.
pub(super) fn change(n: usize, u: usize) -> (usize, Ipv4Addr) {
    (
        (u * 37) % n,
        Ipv4Addr::new(10, 200, (u / 250) as u8, (u % 250) as u8 + 1),
    )
}

/// The `u`-th change as the Service's new EndpointSlice.
fn changed_slice(specs: &[SvcSpec], u: usize) -> String {
    let (i, ip) = change(specs.len(), u);
    let s = &specs[i];
    let mut ips: Vec<String> = s.endpoints.iter().map(|(ip, _)| ip.to_string()).collect();
    ips[0] = ip.to_string();
    let eps: Vec<(&str, bool)> = ips.iter().map(|ip| (ip.as_str(), true)).collect();
    let name = format!("{}-{}", s.name, s.port_name);
    let port = s.endpoints[0].1;
    slice(
        &s.namespace,
        &format!("{name}-1"),
        &name,
        &[(&s.port_name, port, "TCP")],
        &eps,
    )
}

/// A cold start of ours begun at `start`: probes its health endpoints until
/// a while after the first sync, then reads its memory. Fails unless all
/// `services` (one port and one cluster IP each) were programmed: two
/// frontends each, the port and the IP's refusing wildcard (one, the port,
/// for an older agent measured with `--agent-bin`).
pub(super) fn ours_cold(
    what: &'static str,
    start: Instant,
    agent: &mut Agent,
    services: usize,
) -> anyhow::Result<Cold> {
    let run = health::probe_cold_start(agent, start)?;
    let frontends = agent.metric("lbagent_frontends_programmed")?;
    let want = 2 * services;
    anyhow::ensure!(
        frontends == want as f64 || frontends == services as f64,
        "{what}: {frontends} frontends programmed, expected {want} (or {services} before the \
         wildcards)"
    );
    // Probing goes on for a while after the first sync, which is also enough
    // for what the agent returns after its initial list to land.
    let rss = rss(agent.pid())?;
    let wall = run.programmed;
    let phases = Phases::from_log(&agent.log_text());
    eprintln!(
        "   {what}: {wall:?}, RSS {} MiB (peak {} MiB); timeline {phases:?}",
        rss.current >> 20,
        rss.peak >> 20
    );
    for p in &run.probes {
        eprintln!(
            "   {what}: {} x{} max {:?}, p99 {:?}, no answer {}, skipped {}",
            p.path,
            p.latencies.len(),
            p.latencies.last().copied().unwrap_or_default(),
            percentile(&p.latencies, 99.0),
            p.failed,
            p.skipped
        );
    }
    Ok(Cold {
        what,
        wall,
        phases,
        rss: Some(rss),
        health: run.probes,
    })
}

/// The number after `key` in a log line.
fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.parse().ok())
}

/// The memory of process `pid`: resident now, and at its peak.
pub(super) fn rss(pid: u32) -> anyhow::Result<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> anyhow::Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .map(|kb: u64| kb * 1024)
            .ok_or_else(|| anyhow::anyhow!("no {key} for pid {pid}"))
    };
    Ok(Rss {
        current: kib("VmRSS:")?,
        peak: kib("VmHWM:")?,
    })
}
