//! Control-plane figures: cold programming of N x E, the time until one
//! changed endpoint is in the dataplane, and the agent's memory.

use std::{
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use lb_tests::{
    apiserver::ApiServer,
    kubeproxy::{self, SvcSpec},
    netns,
    scenario::{Bed, apply_yaml, slice},
};

use super::{Plan, datapath};

/// One way of programming, with its timings.
pub struct Cold {
    pub what: &'static str,
    /// Until the dataplane holds everything, from the start of the step.
    pub wall: Duration,
    /// The part spent computing and writing (ours: the first full sync).
    pub write: Option<Duration>,
}

/// Per-change latencies until the dataplane reflects one endpoint change.
pub struct Update {
    pub what: &'static str,
    pub samples: Vec<Duration>,
}

pub struct Control {
    pub services: usize,
    pub endpoints: usize,
    pub cold: Vec<Cold>,
    pub updates: Vec<Update>,
    /// Agent RSS after programming everything from the apiserver, in bytes.
    pub rss: u64,
}

pub fn measure(plan: &Plan) -> anyhow::Result<Control> {
    let (n, e) = plan.cold;
    let specs = kubeproxy::filler_services(n, e);
    let yaml = datapath::manifests(&specs);
    let mut cold = Vec::new();
    let mut updates = Vec::new();

    // Ours, from a file.
    {
        let mut bed = Bed::new()?;
        bed.write_manifest(&yaml)?;
        let start = Instant::now();
        bed.start_agent(&[])?;
        let wall = start.elapsed();
        cold.push(Cold {
            what: "ours, --from-file",
            wall,
            write: first_sync(&bed.agent().log_text()),
        });
        eprintln!("   ours (file): {wall:?}");
    }

    // Ours, from the stand-in apiserver; then lone endpoint changes.
    let rss;
    {
        let mut bed = Bed::new()?;
        let api = ApiServer::start()?;
        apply_yaml(&api, &yaml)?;
        let start = Instant::now();
        bed.start_agent_kube(&api, &[])?;
        let wall = start.elapsed();
        cold.push(Cold {
            what: "ours, apiserver watch",
            wall,
            write: first_sync(&bed.agent().log_text()),
        });
        rss = rss_bytes(bed.agent().pid())?;
        eprintln!("   ours (apiserver): {wall:?}, RSS {} MiB", rss >> 20);
        let before = bed.agent().syncs();
        for u in 0..plan.updates {
            let s = &specs[(u * 37) % n];
            bed.kube_apply(&api, &changed_slice(s, u))?;
        }
        let log = bed.agent().log_text();
        let samples: Vec<Duration> = log
            .lines()
            .filter(|l| l.contains("sync complete"))
            .skip(before)
            .filter_map(|l| field(l, "latency_us="))
            .map(Duration::from_micros)
            .collect();
        anyhow::ensure!(
            samples.len() == plan.updates,
            "expected one sync per change"
        );
        updates.push(Update {
            what: "ours (watch event -> map write)",
            samples,
        });
    }

    // kube-proxy's layouts: a full restore, cold and after one change.
    for (what, change_what, load) in [
        (
            "iptables-restore",
            "iptables-restore of the changed ruleset",
            load_iptables as Loader,
        ),
        (
            "nft -f",
            "nft -f of the changed ruleset",
            load_nft as Loader,
        ),
    ] {
        let bed = Bed::new()?;
        let ns = &bed.client_ns;
        let start = Instant::now();
        load(ns, &specs)?;
        let wall = start.elapsed();
        cold.push(Cold {
            what,
            wall,
            write: None,
        });
        eprintln!("   {what}: {wall:?}");
        let mut samples = Vec::new();
        let mut changed = specs.clone();
        for u in 0..plan.restores {
            let i = (u * 37) % n;
            changed[i].endpoints[0].0 =
                Ipv4Addr::new(10, 200, (u / 250) as u8, (u % 250) as u8 + 1);
            let start = Instant::now();
            load(ns, &changed)?;
            samples.push(start.elapsed());
        }
        netns::exec(ns, &["nft", "flush", "ruleset"])?;
        updates.push(Update {
            what: change_what,
            samples,
        });
    }

    for u in &mut updates {
        u.samples.sort_unstable();
    }
    Ok(Control {
        services: n,
        endpoints: e,
        cold,
        updates,
        rss,
    })
}

type Loader = fn(&str, &[SvcSpec]) -> anyhow::Result<()>;

fn load_iptables(ns: &str, specs: &[SvcSpec]) -> anyhow::Result<()> {
    kubeproxy::load_iptables(
        ns,
        &kubeproxy::iptables_restore(specs, datapath::CLUSTER_CIDR),
    )
}

fn load_nft(ns: &str, specs: &[SvcSpec]) -> anyhow::Result<()> {
    kubeproxy::load_nft(ns, &kubeproxy::nft_ruleset(specs, datapath::CLUSTER_CIDR))
}

/// The Service's slice with its first endpoint moved to a new address.
fn changed_slice(s: &SvcSpec, u: usize) -> String {
    let mut ips: Vec<String> = s.endpoints.iter().map(|(ip, _)| ip.to_string()).collect();
    ips[0] = Ipv4Addr::new(10, 200, (u / 250) as u8, (u % 250) as u8 + 1).to_string();
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

/// `took_us` of the first (full) sync in an agent log.
fn first_sync(log: &str) -> Option<Duration> {
    let line = log.lines().find(|l| l.contains("sync complete"))?;
    field(line, "took_us=").map(Duration::from_micros)
}

fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.parse().ok())
}

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for pid {pid}"))?;
    Ok(kb * 1024)
}
