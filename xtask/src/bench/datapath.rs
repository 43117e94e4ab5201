//! Datapath figures: the same client load against the same backends through
//! each mode, at one scale N.

use std::{net::Ipv4Addr, process::Command};

use anyhow::Context as _;
use lb_tests::{
    agent::agent_bin,
    kubeproxy::{self, Proto, SvcSpec},
    netns,
    probe::{self, BenchReport},
    scenario::{Bed, service, slice},
};

use super::Plan;

/// The pod network of the layouts: the client (10.0.0.2) is a pod, so
/// neither layout masquerades, as for pod-to-Service traffic in a cluster.
pub const CLUSTER_CIDR: &str = "10.0.0.0/16";
/// The measured Service's VIP: TCP 80 and UDP 53, after all filler Services.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Direct,
    Ours,
    Iptables,
    Nftables,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Direct, Mode::Ours, Mode::Iptables, Mode::Nftables];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Ours => "ours",
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
        }
    }
}

/// One mode at one N.
pub struct Row {
    pub mode: Mode,
    pub n: usize,
    pub tcp: Vec<BenchReport>,
    pub udp: Vec<BenchReport>,
}

impl Row {
    pub fn tcp_rate(&self) -> f64 {
        mean(self.tcp.iter().map(|r| r.rate))
    }
    pub fn udp_rate(&self) -> f64 {
        mean(self.udp.iter().map(|r| r.rate))
    }
    pub fn connect_p50(&self) -> f64 {
        mean(self.tcp.iter().filter_map(BenchReport::p50_us))
    }
    pub fn connect_p99(&self) -> f64 {
        mean(self.tcp.iter().filter_map(BenchReport::p99_us))
    }
    pub fn failed(&self) -> u64 {
        self.tcp.iter().chain(&self.udp).map(|r| r.failed).sum()
    }
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { sum / f64::from(n) }
}

/// N Services: N-1 fillers, then the measured UDP and TCP ports (TCP last,
/// the worst case for kube-proxy's linear iptables chains).
pub fn services(n: usize, pods: &[Ipv4Addr], filler_endpoints: usize) -> Vec<SvcSpec> {
    let mut all = kubeproxy::filler_services(n.saturating_sub(1), filler_endpoints);
    for (name, port, target, proto) in
        [("dns", 53, 5353, Proto::Udp), ("web", 80, 8080, Proto::Tcp)]
    {
        all.push(SvcSpec {
            namespace: "bench".into(),
            name: name.into(),
            port_name: name.into(),
            vip: VIP,
            port,
            proto,
            endpoints: pods.iter().map(|ip| (*ip, target)).collect(),
        });
    }
    all
}

/// The same Services as v1 Service + EndpointSlice manifests.
pub fn manifests(specs: &[SvcSpec]) -> String {
    let mut out = String::with_capacity(specs.len() * 600);
    for s in specs {
        let proto = match s.proto {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        };
        // Each port its own Service keeps the mapping one to one.
        let name = format!("{}-{}", s.name, s.port_name);
        out += &service(
            &s.namespace,
            &name,
            &s.vip.to_string(),
            &[(&s.port_name, u32::from(s.port), proto)],
        );
        let ips: Vec<String> = s.endpoints.iter().map(|(ip, _)| ip.to_string()).collect();
        let eps: Vec<(&str, bool)> = ips.iter().map(|ip| (ip.as_str(), true)).collect();
        let target = s.endpoints.first().map_or(1, |(_, p)| *p);
        out += &slice(
            &s.namespace,
            &format!("{name}-1"),
            &name,
            &[(&s.port_name, target, proto)],
            &eps,
        );
    }
    out
}

pub fn measure(plan: &Plan, n: usize) -> anyhow::Result<Vec<Row>> {
    let mut bed = Bed::new()?;
    let pods: Vec<Ipv4Addr> = (0..plan.endpoints)
        .map(|i| Ipv4Addr::new(10, 42, 0, i as u8 + 1))
        .collect();
    for (i, ip) in pods.iter().enumerate() {
        bed.backend(&format!("p{i}"), *ip, &[8080], &[5353])?;
    }
    let specs = services(n, &pods, plan.endpoints);
    bed.write_manifest(&manifests(&specs))?;
    let iptables = kubeproxy::iptables_restore(&specs, CLUSTER_CIDR);
    let nft = kubeproxy::nft_ruleset(&specs, CLUSTER_CIDR);

    let mut rows: Vec<Row> = Mode::ALL
        .iter()
        .map(|&mode| Row {
            mode,
            n,
            tcp: Vec::new(),
            udp: Vec::new(),
        })
        .collect();
    // Two rounds in ABBA order, so drift over the run favours no mode.
    let order: Vec<Mode> = Mode::ALL
        .iter()
        .chain(Mode::ALL.iter().rev())
        .copied()
        .collect();
    for mode in order {
        let (tcp_to, udp_to) = match mode {
            Mode::Direct => (
                pods.iter()
                    .map(|p| format!("{p}:8080"))
                    .collect::<Vec<_>>()
                    .join(","),
                pods.iter()
                    .map(|p| format!("{p}:5353"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => (format!("{VIP}:80"), format!("{VIP}:53")),
        };
        match mode {
            Mode::Direct => {}
            Mode::Ours => {
                bed.start_agent(&[])?;
            }
            Mode::Iptables => kubeproxy::load_iptables(&bed.client_ns, &iptables)?,
            Mode::Nftables => kubeproxy::load_nft(&bed.client_ns, &nft)?,
        }
        let c = plan.concurrency.to_string();
        let t = plan.seconds.to_string();
        let tcp = probe::bench(
            &bed.client_ns,
            bed.cgroup.path(),
            &["bench-tcp", "--to", &tcp_to, "-c", &c, "--seconds", &t],
        )?;
        let udp = probe::bench(
            &bed.client_ns,
            bed.cgroup.path(),
            &["bench-udp", "--to", &udp_to, "-c", &c, "--seconds", &t],
        )?;
        eprintln!(
            "   {:<9} N={n:<6} TCP {:>8.0} conn/s (p50 {:>6.1} us, p99 {:>7.1} us, {} failed)   UDP {:>8.0} req/s ({} failed)",
            mode.name(),
            tcp.rate,
            tcp.p50_us().unwrap_or(f64::NAN),
            tcp.p99_us().unwrap_or(f64::NAN),
            tcp.failed,
            udp.rate,
            udp.failed,
        );
        anyhow::ensure!(
            tcp.ok > 0 && udp.ok > 0,
            "{} at N={n} answered nothing",
            mode.name()
        );
        match mode {
            Mode::Direct => {}
            Mode::Ours => {
                // Detach: the next mode must not go through our programs.
                bed.agent = None;
                let ok = Command::new(agent_bin())
                    .args(["cleanup", "--bpffs-dir"])
                    .arg(bed.pins_path())
                    .output()?
                    .status
                    .success();
                anyhow::ensure!(ok, "lb-agent cleanup failed");
            }
            Mode::Iptables | Mode::Nftables => {
                // iptables-nft keeps its tables in nftables too.
                netns::exec(&bed.client_ns, &["nft", "flush", "ruleset"])
                    .context("flushing rules")?;
            }
        }
        let row = rows
            .iter_mut()
            .find(|r| r.mode == mode)
            .expect("every mode has a row");
        row.tcp.push(tcp);
        row.udp.push(udp);
    }
    Ok(rows)
}
