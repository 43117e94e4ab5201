//! Datapath figures: the same client load against the same backends through
//! each mode, at one scale N.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::{Ipv4Addr, Ipv6Addr},
    time::Instant,
};

use anyhow::Context as _;
use lb_tests::{
    cgroup::TestCgroup,
    kubeproxy::{self, Proto, SvcSpec},
    netns, probe,
    progstats::{Runs, StatsOn},
    scenario::Bed,
    snmp::Snapshot,
    unique,
};

use super::{
    cluster::{CLUSTER_CIDR, capacity_flags},
    manifests::manifests,
    plan::Plan,
    results::datapath::{KUBE_PROXY_MAX, Load, Mode, Row},
    rounds,
};

/// The measured Service's VIP: TCP 80 and UDP 53, after all filler Services.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 1);
/// The same TCP Service with `sessionAffinity: ClientIP`, and with
/// `internalTrafficPolicy: Local` (every endpoint on this node), for ours
/// only: two Services more in our maps than in kube-proxy's rules.
const AFFINITY_VIP: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 2);
const LOCAL_VIP: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 3);
/// The same TCP Service over IPv6 (an IPv6-only Service whose endpoints are
/// the pods' IPv6 addresses), against the pods reached directly over IPv6.
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x100, 0, 0, 0, 0, 0, 1);
/// The agent's node name, which the Local Service's endpoints name.
const NODE: &str = "bench-node";

impl Load {
    fn args(self) -> &'static [&'static str] {
        match self {
            Load::Tcp => &["bench-tcp"],
            Load::UdpFresh => &["bench-udp", "--socket-per-request"],
            Load::UdpLong => &["bench-udp"],
            Load::Connect => &["bench-connect"],
        }
    }
}

/// Our programs whose cost per call the bench reports (their link pins):
/// every socket program; those a load does not run are left out.
const PROGRAMS: [&str; 8] = [
    "connect4",
    "sendmsg4",
    "recvmsg4",
    "getpeername4",
    "connect6",
    "sendmsg6",
    "recvmsg6",
    "getpeername6",
];

/// Each of [`PROGRAMS`]' counters now, as attached by the agent pinned in
/// `pins`.
fn program_runs(pins: &std::path::Path) -> anyhow::Result<Vec<(&'static str, Runs)>> {
    PROGRAMS
        .iter()
        .map(|p| Ok((*p, Runs::of_link(&pins.join("links").join(p))?)))
        .collect()
}

/// N Services: N-1 fillers, then the measured UDP and TCP ports (TCP last,
/// the worst case for kube-proxy's linear iptables chains).
fn services(n: usize, pods: &[Ipv4Addr], filler_endpoints: usize) -> Vec<SvcSpec> {
    let mut all = kubeproxy::filler_services(n.saturating_sub(1), filler_endpoints);
    for (name, port, target, proto) in
        [("dns", 53, 5353, Proto::Udp), ("web", 80, 8080, Proto::Tcp)]
    {
        all.push(SvcSpec {
            namespace: "bench".into(),
            name: name.into(),
            port_name: name.into(),
            vip: VIP.into(),
            port,
            proto,
            endpoints: pods.iter().map(|&ip| (ip.into(), target)).collect(),
            node_port: None,
        });
    }
    all
}

pub(super) fn measure(plan: &Plan, n: usize) -> anyhow::Result<Vec<Row>> {
    let mut bed = Bed::new()?;
    let pods: Vec<Ipv4Addr> = (0..plan.endpoints)
        .map(|i| Ipv4Addr::new(10, 42, 0, i as u8 + 1))
        .collect();
    for (i, ip) in pods.iter().enumerate() {
        bed.backend(&format!("p{i}"), *ip, &[8080], &[5353])?;
    }
    let specs = services(n, &pods, plan.endpoints);
    bed.write_manifest(&(manifests(&[&specs]) + &semantics_manifests(&pods)))?;

    // Each mode keeps its own client namespace (pods 10.0.0.2-4) and its
    // rules or programs for the whole run, so rounds alternate without
    // reloading. direct shares ours' namespace but not its cgroup: only
    // clients in `bed.cgroup` go through our programs.
    let ipt_ns = bed.topo.add_host("ipt", Ipv4Addr::new(10, 0, 0, 3))?;
    let nft_ns = bed.topo.add_host("nft", Ipv4Addr::new(10, 0, 0, 4))?;
    let plain = TestCgroup::new(&unique("plain"))?;
    // At 100,000 Services the default capacities hold too few frontends.
    let mut flags = capacity_flags(n, plan.endpoints);
    flags.push(format!("--hostname-override={NODE}"));
    bed.start_agent(&flags.iter().map(String::as_str).collect::<Vec<_>>())?;
    let modes: Vec<Mode> = Mode::EVERY
        .into_iter()
        .filter(|m| m.measured_at(n))
        .collect();
    if modes.contains(&Mode::Nftables) {
        kubeproxy::load_iptables(&ipt_ns, &kubeproxy::iptables_restore(&specs, CLUSTER_CIDR))?;
        let t = Instant::now();
        kubeproxy::load_nft(&nft_ns, &kubeproxy::nft_ruleset(&specs, CLUSTER_CIDR))?;
        eprintln!("   (nft -f of the N={n} layout took {:.2?})", t.elapsed());
    } else {
        eprintln!("   (kube-proxy's layouts are not loaded above N={KUBE_PROXY_MAX})");
    }

    let targets = |mode: Mode, port: u16, pod_port: u16| match mode {
        Mode::Direct => pods
            .iter()
            .map(|p| format!("{p}:{pod_port}"))
            .collect::<Vec<_>>()
            .join(","),
        Mode::Direct6 => pods
            .iter()
            .map(|p| format!("[{}]:{pod_port}", netns::v6_of(*p)))
            .collect::<Vec<_>>()
            .join(","),
        Mode::Ours6 => format!("[{VIP6}]:{port}"),
        Mode::OursAffinity => format!("{AFFINITY_VIP}:{port}"),
        Mode::OursLocal => format!("{LOCAL_VIP}:{port}"),
        Mode::Ours | Mode::Iptables | Mode::Nftables => format!("{VIP}:{port}"),
    };
    // Ours: what each of [`PROGRAMS`] ran during each load, over all rounds.
    let mut programs: Vec<(Mode, Load, &'static str, Runs)> = Vec::new();
    let (c, t) = (plan.concurrency.to_string(), plan.seconds.to_string());
    let modes = rounds::drive(plan.rounds, n, "", &modes, |mode: Mode, load| {
        let (ns, cgroup) = match mode {
            Mode::Direct | Mode::Direct6 => (&bed.client_ns, plain.path()),
            Mode::Ours | Mode::OursAffinity | Mode::OursLocal | Mode::Ours6 => {
                (&bed.client_ns, bed.cgroup.path())
            }
            Mode::Iptables => (&ipt_ns, plain.path()),
            Mode::Nftables => (&nft_ns, plain.path()),
        };
        if matches!(mode, Mode::Iptables | Mode::Nftables) {
            // Each measurement starts from an empty conntrack table:
            // new flows by the 100,000 would otherwise fill it.
            netns::exec(ns, &["conntrack", "-F"]).context("flushing conntrack")?;
        }
        let to = match load {
            Load::Tcp => targets(mode, 80, 8080),
            Load::UdpFresh | Load::UdpLong => targets(mode, 53, 5353),
            // The pods' discard port: no Service, and a UDP connect sends
            // nothing.
            Load::Connect => targets(Mode::Direct, 9, 9),
        };
        let mut args = load.args().to_vec();
        args.extend(["--to", &to, "-c", &c, "--seconds", &t]);
        // The kernel times our programs during our runs only: the
        // two clock reads per call it adds stay out of the others.
        let stats = mode
            .is_ours()
            .then(|| -> anyhow::Result<_> {
                let on = StatsOn::enable()?;
                Ok((on, program_runs(bed.pins.path())?))
            })
            .transpose()?;
        let counted = Counted::before(ns, &bed.backend_nss)?;
        let mut r = probe::bench(ns, cgroup, &args)?;
        r.kernel_drops = counted.drops()?;
        if let Some((_on, before)) = stats {
            let after = program_runs(bed.pins.path())?;
            for ((prog, a), (_, b)) in after.into_iter().zip(before) {
                add_runs(&mut programs, (mode, load, prog), a.since(b));
            }
        }
        Ok(r)
    })?;
    Ok(modes
        .into_iter()
        .map(|(mode, runs)| Row {
            mode,
            n,
            runs,
            programs: programs
                .iter()
                .filter(|(m, ..)| *m == mode)
                .map(|&(_, load, prog, r)| (load, prog, r))
                .collect(),
        })
        .collect())
}

/// The kernel's counters of a run's client namespace and of the pods',
/// read before it: a request the kernel dropped (a full receive buffer,
/// no socket on the port) shows as a rise of its drop counters there.
struct Counted<'a> {
    client: &'a str,
    pods: &'a [String],
    before: (Snapshot, Snapshot),
}

impl<'a> Counted<'a> {
    fn before(client: &'a str, pods: &'a [String]) -> anyhow::Result<Self> {
        Ok(Self {
            client,
            pods,
            before: (Snapshot::read(&[client])?, Snapshot::read(pods)?),
        })
    }

    /// The drop counters that rose since, by group (`client`, `pods`),
    /// the groups with none left out.
    fn drops(&self) -> anyhow::Result<BTreeMap<String, BTreeMap<String, u64>>> {
        let client = Snapshot::read(&[self.client])?.since(&self.before.0);
        let pods = Snapshot::read(self.pods)?.since(&self.before.1);
        Ok([("client", client), ("pods", pods)]
            .into_iter()
            .map(|(group, rose)| {
                let drops = rose.total().drops();
                (
                    group.to_owned(),
                    drops.into_iter().map(|(k, n)| (k.to_owned(), n)).collect(),
                )
            })
            .filter(|(_, d): &(String, BTreeMap<String, u64>)| !d.is_empty())
            .collect())
    }
}

/// Adds `ran` to the total of `(mode, load, program)`.
fn add_runs(
    totals: &mut Vec<(Mode, Load, &'static str, Runs)>,
    (mode, load, prog): (Mode, Load, &'static str),
    ran: Runs,
) {
    match totals
        .iter_mut()
        .find(|(m, l, p, _)| (*m, *l, *p) == (mode, load, prog))
    {
        Some((.., total)) => {
            total.time += ran.time;
            total.count += ran.count;
        }
        None => totals.push((mode, load, prog, ran)),
    }
}

/// The TCP Service on [`AFFINITY_VIP`] with `sessionAffinity: ClientIP`
/// (the default timeout), on [`LOCAL_VIP`] with `internalTrafficPolicy:
/// Local` and every endpoint on this node, and on [`VIP6`] over IPv6: all
/// on `pods`' port 8080.
fn semantics_manifests(pods: &[Ipv4Addr]) -> String {
    let mut out = String::new();
    let eps: Vec<String> = pods
        .iter()
        .map(|ip| format!("{{addresses: [\"{ip}\"], nodeName: \"{NODE}\"}}"))
        .collect();
    for (name, vip, spec) in [
        ("web-affinity", AFFINITY_VIP, "sessionAffinity: ClientIP"),
        ("web-local", LOCAL_VIP, "internalTrafficPolicy: Local"),
    ] {
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: bench}}\n\
             spec:\n  type: ClusterIP\n  clusterIP: \"{vip}\"\n  {spec}\n  \
             ports: [{{name: web, port: 80, protocol: TCP}}]\n\
             ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata: {{name: {name}-1, namespace: bench, labels: {{kubernetes.io/service-name: {name}}}}}\n\
             addressType: IPv4\nports: [{{name: web, port: 8080, protocol: TCP}}]\nendpoints: [{}]\n",
            eps.join(", ")
        );
    }
    let eps6: Vec<String> = pods
        .iter()
        .map(|ip| format!("{{addresses: [\"{}\"]}}", netns::v6_of(*ip)))
        .collect();
    let _ = write!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: web6, namespace: bench}}\n\
         spec:\n  type: ClusterIP\n  clusterIP: \"{VIP6}\"\n  ipFamilies: [IPv6]\n  \
         ports: [{{name: web, port: 80, protocol: TCP}}]\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: web6-1, namespace: bench, labels: {{kubernetes.io/service-name: web6}}}}\n\
         addressType: IPv6\nports: [{{name: web, port: 8080, protocol: TCP}}]\nendpoints: [{}]\n",
        eps6.join(", ")
    );
    out
}
