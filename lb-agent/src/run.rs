//! `lb-agent run`: serve metrics and health, start the sync thread, and
//! stop on SIGTERM or SIGINT.
//!
//! Threads: the main thread's tokio runtime (current-thread) serves HTTP
//! and waits for signals; it never runs anything that takes long. The sync
//! thread has a runtime of its own: it watches the apiserver (or polls and
//! parses the file), owns the model and the maps, and applies each change
//! as it is read, so a lone change is written without a hand-off between
//! threads and the objects are parsed where the model keeps them. The
//! programs load on a blocking thread meanwhile.

use std::{
    collections::{BTreeSet, HashSet},
    future::Future,
    net::{IpAddr, SocketAddr, SocketAddrV4},
    path::PathBuf,
    sync::{
        Arc,
        mpsc::{RecvTimeoutError, SyncSender},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::{FutureExt as _, StreamExt as _, stream::BoxStream};
use lb_agent::{
    config::Conntrack,
    datapath::{kernel_conntrack, snat_ports},
};
use lb_agent::{
    config::{RunConfig, Source},
    datapath::{
        Datapath, Start, cgroup, conntrack, grace::MembarrierGrace, pins::Pins, table::Bpf,
        tc::TcHook,
    },
    http::{self, Endpoints, Role},
    memory,
    metrics::Gauge,
    model::{ExcludedCidrs, Frontend, NodeContext, Proto, Scope},
    reconcile::DualReconciler,
    service_health,
    sockets::{NetnsSources, Serving, SocketReaper, StaleUdp},
    source::{Change, NodeFacts, file, interfaces::Interfaces, kube},
    syncer::{SyncStats, Syncer},
};
use lb_common::DatapathConfig;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::oneshot,
    time::{Interval, MissedTickBehavior},
};
use tracing::{debug, error, info, warn};

/// How often the source files are checked for edits.
const FILE_POLL: Duration = Duration::from_millis(200);
/// How often retired revisions are checked for a passed grace period.
const REAP: Duration = Duration::from_millis(50);
/// How long a prune that had to wait (revisions in their grace period)
/// waits before trying again.
const PRUNE_RETRY: Duration = Duration::from_secs(1);
/// How often the interface addresses are re-read for `--nodeport-addresses`.
const INTERFACES_POLL: Duration = Duration::from_secs(5);
/// The most changes taken in one go before a sync: a burst becomes one
/// sync, but a source that never pauses cannot postpone syncs forever.
const BATCH: usize = 1024;

pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    for field in &config.ignored {
        warn!(%field, "config field has no effect on the eBPF proxy; ignored");
    }
    let endpoints = Arc::new(Endpoints::default());
    let metrics = http::serve(config.metrics_addr, Role::Metrics, endpoints.clone())
        .await
        .with_context(|| format!("binding the metrics address {}", config.metrics_addr))?;
    let healthz = http::serve(config.healthz_addr, Role::Healthz, endpoints.clone())
        .await
        .with_context(|| format!("binding the healthz address {}", config.healthz_addr))?;
    info!(%metrics, %healthz, node = %config.node_name, "serving /metrics, /proxyMode, /healthz, /livez");
    tokio::spawn(service_health::listeners::serve(endpoints.clone()));

    let (stop_tx, stop_rx) = oneshot::channel();
    let (ended_tx, ended) = oneshot::channel();
    let sync_thread = thread::Builder::new()
        .name("sync".into())
        .spawn(move || {
            let result = sync_thread(&config, endpoints, stop_rx);
            let _ = ended_tx.send(result);
        })
        .context("starting the sync thread")?;

    let stop = shutdown()?;
    let outcome = tokio::select! {
        () = stop => {
            info!("signal received");
            Ok(())
        }
        r = ended => r.unwrap_or_else(|_| Err(anyhow::anyhow!("the sync thread panicked"))),
    };
    let _ = stop_tx.send(());
    let _ = sync_thread.join();
    info!("stopping; leaving programs and maps in place");
    outcome
}

/// Resolves on SIGTERM or SIGINT.
fn shutdown() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// The sync thread: runs [`sync_loop`] on a runtime of its own.
fn sync_thread(
    config: &RunConfig,
    endpoints: Arc<Endpoints>,
    stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the sync thread's runtime")?
        .block_on(sync_loop(config, endpoints, stop))
}

/// Loads the programs while the source lists, then applies changes and
/// writes the maps until told to stop.
async fn sync_loop(
    config: &RunConfig,
    endpoints: Arc<Endpoints>,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let mut loading = {
        let config = config.clone();
        let endpoints = endpoints.clone();
        tokio::task::spawn_blocking(move || Agent::start(&config, endpoints))
    };
    let mut changes = Changes::open(config, endpoints.clone()).await?;
    let mut early = Vec::new();
    let mut agent = loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            r = &mut loading => break r.context("loading the programs panicked")??,
            batch = changes.next() => early.extend(batch?),
        }
    };
    for (change, received) in early {
        agent.syncer.apply(change, received);
    }

    let mut next_prune = config.prune_interval.map(|d| Instant::now() + d);
    let mut interfaces = Interfaces::default();
    let mut next_interfaces = Instant::now();
    loop {
        if next_interfaces <= Instant::now() {
            if let Some(ips) = interfaces.changed() {
                agent
                    .syncer
                    .apply(Change::LocalAddresses(ips), Instant::now());
            }
            // A device named but missing may have appeared, or one been
            // created again (without our programs).
            if agent.attached && agent.datapath.devices_stale() {
                agent.sync_tc();
            }
            next_interfaces = Instant::now() + INTERFACES_POLL;
        }
        if !agent.syncer.ready() && !agent.waiting_logged {
            agent.waiting_logged = true;
            info!("waiting for both initial lists before the first sync");
        }
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_prune, config.prune_interval)
            && at <= now
        {
            next_prune = Some(match agent.syncer.prune(now) {
                Some(s) => {
                    agent.after_sync(&s, true);
                    now + every
                }
                None => now + PRUNE_RETRY.min(every),
            });
        }
        if let Some(s) = agent.syncer.sync(now) {
            agent.after_sync(&s, false);
        }
        if agent.syncer.retiring() {
            agent.syncer.reap();
        }

        let now = Instant::now();
        let wake = [
            agent.syncer.next_retry(),
            next_prune,
            Some(next_interfaces),
            agent.syncer.retiring().then(|| now + REAP),
        ]
        .into_iter()
        .flatten()
        .min();
        let timer = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = &mut stop => return Ok(()),
            batch = changes.next() => {
                // Take what is already read as well: a burst becomes one
                // sync, while a lone change is written at once.
                let mut batch = batch?;
                while batch.len() < BATCH
                    && let Some(more) = changes.next().now_or_never()
                {
                    batch.extend(more?);
                }
                for (change, received) in batch {
                    agent.syncer.apply(change, received);
                }
            }
            () = timer => {}
        }
    }
}

/// Where the changes come from: the apiserver's watch streams, or the
/// files, polled.
enum Changes {
    Kube {
        events: BoxStream<'static, kube::Event>,
        /// What the model has of the Node (nothing until one arrives): a
        /// Node update that leaves it (taints, heartbeats) is no change for
        /// the model.
        node: NodeFacts,
        endpoints: Arc<Endpoints>,
    },
    File {
        path: PathBuf,
        poll: Interval,
        seen: Option<file::Fingerprint>,
        /// The file may hold this node's Node, for its zone label and addresses.
        node_name: String,
        endpoints: Arc<Endpoints>,
    },
}

impl Changes {
    async fn open(config: &RunConfig, endpoints: Arc<Endpoints>) -> anyhow::Result<Self> {
        Ok(match &config.source {
            Source::Kube { kubeconfig, master } => {
                let client = kube::client(kubeconfig.as_deref(), master.as_deref()).await?;
                info!(node = %config.node_name, "watching Services, EndpointSlices and this Node");
                Self::Kube {
                    events: kube::watch(client, &config.node_name),
                    node: NodeFacts::default(),
                    endpoints,
                }
            }
            Source::File(path) => {
                let mut poll = tokio::time::interval(FILE_POLL);
                poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
                Self::File {
                    path: path.clone(),
                    poll,
                    seen: None,
                    node_name: config.node_name.clone(),
                    endpoints,
                }
            }
        })
    }

    /// The next changes, each with the moment it was read. Cancel-safe:
    /// it only waits on the stream or the poll timer.
    async fn next(&mut self) -> anyhow::Result<Vec<(Change, Instant)>> {
        match self {
            Self::Kube {
                events,
                node,
                endpoints,
            } => loop {
                match events.next().await {
                    Some(kube::Event::Change(c)) => {
                        // Pending from here: a sync thread that stops
                        // keeping up shows on /healthz.
                        endpoints.health.queued();
                        return Ok(vec![(c, Instant::now())]);
                    }
                    Some(kube::Event::Node { eligible, facts }) => {
                        endpoints.health.set_node_eligible(eligible);
                        if *node != facts {
                            node.clone_from(&facts);
                            endpoints.health.queued();
                            return Ok(vec![(Change::Node(facts), Instant::now())]);
                        }
                    }
                    Some(kube::Event::NodeDeleted) => endpoints.health.set_node_eligible(false),
                    None => anyhow::bail!("the watch streams ended"),
                }
            },
            Self::File {
                path,
                poll,
                seen,
                node_name,
                endpoints,
            } => loop {
                poll.tick().await;
                let now = file::fingerprint(path);
                if seen.as_ref() == Some(&now) {
                    continue;
                }
                *seen = Some(now);
                match file::load(path) {
                    Ok(objects) => {
                        for s in &objects.skipped {
                            warn!(document = %s.location, "skipping malformed document: {}", s.reason);
                            endpoints.metrics.skipped_documents.inc();
                        }
                        endpoints.health.queued();
                        let read = Instant::now();
                        let node = objects
                            .nodes
                            .iter()
                            .find(|n| n.metadata.name.as_deref() == Some(node_name.as_str()))
                            .map(NodeFacts::of)
                            .unwrap_or_default();
                        return Ok(vec![
                            (Change::AllServices(objects.services), read),
                            (Change::AllSlices(objects.slices), read),
                            (Change::Node(node), read),
                        ]);
                    }
                    // Keep the last programmed state; a half-written file
                    // is retried on the next edit.
                    Err(e) => error!(
                        error = &e as &dyn std::error::Error,
                        "keeping the current state"
                    ),
                }
            },
        }
    }
}

/// The sync thread's state: the syncer, and the programs it may still have
/// to switch to its maps.
struct Agent {
    syncer: Syncer<Bpf, MembarrierGrace>,
    datapath: Datapath,
    pins: Pins,
    /// Destroys connected UDP sockets sent to endpoints that stopped serving.
    reaper: SocketReaper,
    cgroup: PathBuf,
    attached: bool,
    waiting_logged: bool,
    /// `--devices`; empty: the devices holding the Node's primary addresses.
    devices: Vec<String>,
    /// What `LB_CONFIG` holds, once written.
    tc_config: Option<DatapathConfig>,
    /// Conntrack timeouts and SNAT ports.
    conntrack: Conntrack,
    /// Asks the conntrack collector to run now.
    collect_now: SyncSender<()>,
    /// See [`snat_ports::seed`].
    nat_seed: u32,
    /// Whether the kernel's flows were left to it (`take_over`), once,
    /// around the tc programs' first attachment.
    taken_over: bool,
    /// `lbagent_tc_devices_unattached`.
    tc_unattached: Gauge,
}

impl Agent {
    /// Loads the programs and maps (migrating older ones), and attaches
    /// the programs unless a migration must fill new maps first.
    fn start(config: &RunConfig, endpoints: Arc<Endpoints>) -> anyhow::Result<Self> {
        let tc_unattached = endpoints.metrics.tc_devices_unattached.clone();
        snat_ports::check(config.conntrack.snat_ports, snat_ports::ephemeral_range()?)?;
        let cgroup = match &config.cgroup {
            Some(p) => p.clone(),
            None => cgroup::cgroup2_mount()
                .context("finding the cgroup2 mount (or pass --cgroup-path)")?,
        };
        let pins = Pins::new(&config.bpffs_dir);
        let hook = TcHook::choose(config.enable_tcx);
        let datapath = Datapath::open(&pins, &config.capacities, hook).with_context(|| {
            format!(
                "loading the programs and maps under {}",
                pins.dir().display()
            )
        })?;
        match datapath.start() {
            Start::Fresh => {
                info!(bpffs = %pins.dir().display(), capacities = ?config.capacities, "no pinned maps; created them");
            }
            Start::Adopted => info!(bpffs = %pins.dir().display(), "adopted the pinned maps"),
            Start::Resuming => {
                warn!("finishing a migration that was interrupted after the programs switched");
            }
            Start::Migrating(why) => warn!(
                differences = ?why,
                "the pinned maps differ from this build's; building new maps beside them, \
                 the programs switch once they are filled"
            ),
        }
        let _ = endpoints.metrics.datapath_maps.set(pins.maps_dir());
        let grace = MembarrierGrace::start().context("starting the grace-period thread")?;
        if !MembarrierGrace::exact() {
            warn!(
                "membarrier(MEMBARRIER_CMD_GLOBAL) cannot wait for RCU readers here; deletions wait a fixed time instead"
            );
        }
        let tables = datapath.tables()?;
        let reconciler = DualReconciler::adopt(tables.v4, tables.v6, grace)?;
        let [v4, v6] = reconciler.entries();
        info!(
            ipv4_frontends = v4.frontends,
            ipv4_backends = v4.backends,
            ipv6_frontends = v6.frontends,
            ipv6_backends = v6.backends,
            "read the maps; only differences will be written"
        );
        let excluded: ExcludedCidrs = config.excluded.clone();
        let metrics = endpoints.clone();
        let endpoints_for_gc = endpoints.clone();
        let syncer = Syncer::new(
            reconciler,
            excluded,
            NodeContext::named(&config.node_name),
            config.node_port_addresses.clone(),
            endpoints,
        );
        let live = syncer.udp_serving();
        let reaper = SocketReaper::spawn(NetnsSources::default(), live, move |pass| {
            let m = &metrics.metrics;
            match pass {
                Ok(r) => {
                    m.udp_sockets_destroyed.inc_by(r.sockets_destroyed);
                    m.udp_socket_destroy_errors
                        .inc_by(r.destroy_failed + r.netns_failed);
                    if r.sockets_destroyed > 0 || r.destroy_failed > 0 {
                        info!(
                            destroyed = r.sockets_destroyed,
                            failed = r.destroy_failed,
                            namespaces = r.netns_visited,
                            "destroyed UDP sockets sent to endpoints that stopped serving"
                        );
                    }
                    if let Some(e) = r.first_failure {
                        debug!(
                            error = &e as &dyn std::error::Error,
                            "searching for stale UDP sockets"
                        );
                    }
                }
                Err(e) => {
                    m.udp_socket_destroy_errors.inc();
                    warn!(
                        error = &e as &dyn std::error::Error,
                        "searching for stale UDP sockets"
                    );
                }
            }
        })
        .context("starting the socket reaper thread")?;
        let collect_now =
            spawn_conntrack_gc(pins.maps_dir(), syncer.external_serving(), endpoints_for_gc)?;
        let mut agent = Agent {
            pins,
            reaper,
            syncer,
            datapath,
            cgroup,
            attached: false,
            waiting_logged: false,
            devices: config.devices.clone(),
            tc_config: None,
            conntrack: config.conntrack,
            collect_now,
            nat_seed: snat_ports::seed(),
            taken_over: false,
            tc_unattached,
        };
        if !agent.devices.is_empty() {
            let devices = agent.devices.iter().cloned().collect();
            agent.datapath.set_devices(devices, false)?;
        }
        if agent.datapath.attach_early() {
            agent.attach()?;
        }
        Ok(agent)
    }

    /// Hands the UDP frontends whose endpoints stopped serving to the
    /// reaper, now that the maps send new connects elsewhere, and asks the
    /// conntrack collector for the flows of external ones. Before the
    /// programs are attached, the sockets were translated by the old
    /// programs into older maps, which the next full sync's request would
    /// not find either: such a request is dropped.
    fn destroy_stale(&mut self) {
        let stale = self.syncer.take_stale();
        if stale.iter().any(|fe| fe.scope == Scope::External) {
            // A full channel already holds a request, which covers this one.
            let _ = self.collect_now.try_send(());
        }
        let udp: StaleUdp = stale
            .into_iter()
            .filter(|fe| fe.proto == Proto::Udp)
            .map(|fe| SocketAddr::new(fe.vip, fe.port))
            .collect();
        if udp.is_empty() || !self.attached {
            return;
        }
        if let Err(e) = self.reaper.submit(self.pins.maps_dir(), udp) {
            warn!(
                error = &e as &dyn std::error::Error,
                "stale UDP sockets left in place"
            );
        }
    }

    /// Attaches this build's programs (switching from a migration's old maps).
    fn attach(&mut self) -> anyhow::Result<()> {
        let done = self
            .datapath
            .attach(&self.cgroup)
            .with_context(|| format!("attaching to cgroup {}", self.cgroup.display()))?;
        self.attached = true;
        info!(
            cgroup = %self.cgroup.display(),
            carried = done.carried,
            prev_slots = done.prev_slots,
            old_pins_removed = done.removed.len(),
            "programs attached (links pinned; they stay when the agent exits)"
        );
        if let Err(e) = done.tc {
            error!(
                error = &e as &dyn std::error::Error,
                "attaching the tc programs failed; retrying at the next sync"
            );
        }
        self.tc_unattached
            .set(self.datapath.unattached_devices() as f64);
        Ok(())
    }

    /// Points the tc programs at the devices wanted now (`--devices`, else
    /// those holding the Node's primary addresses), writes the guarded
    /// frontends' source ranges if they changed, and gives the programs
    /// the node's primary IPv4 address to SNAT to (else its first IPv4
    /// NodePort address); a failure is logged and retried at the next
    /// sync.
    fn sync_tc(&mut self) {
        self.write_tc_config();
        // Not the NodePort addresses: without a Node they fall back to
        // every address of the host, and the programs would land on
        // devices nobody chose.
        let devices: BTreeSet<String> = if self.devices.is_empty() {
            devices_holding(self.syncer.primary_ips())
        } else {
            self.devices.iter().cloned().collect()
        };
        let first = !self.taken_over;
        if first {
            self.take_over();
        }
        match self.datapath.set_devices(devices.clone(), self.attached) {
            Ok(true) if self.attached => {
                info!(?devices, "tc programs attached to these devices");
            }
            Ok(_) => {}
            Err(e) => error!(
                error = &e as &dyn std::error::Error,
                ?devices,
                "attaching the tc programs failed; retrying at the next sync"
            ),
        }
        if first {
            // Flows the kernel made while the programs were attaching.
            self.take_over();
            self.taken_over = true;
        }
        self.tc_unattached
            .set(self.datapath.unattached_devices() as f64);
        if let Some(guarded) = self.syncer.guarded() {
            match self.datapath.set_source_ranges(guarded) {
                Ok(()) => self.syncer.guarded_written(),
                Err(e) => error!(
                    error = &e as &dyn std::error::Error,
                    "writing loadBalancerSourceRanges failed (their frontends admit nobody \
                     meanwhile); retrying at the next sync"
                ),
            }
        }
    }

    /// Gives the tc programs the node's primary IPv4 address to SNAT to
    /// (else its first IPv4 NodePort address), the SNAT ports and the
    /// conntrack timeouts; a failure is logged and retried at the next
    /// sync.
    fn write_tc_config(&mut self) {
        let snat4_be = self
            .syncer
            .primary_ips()
            .iter()
            .chain(self.syncer.node_port_ips())
            .find_map(|ip| match ip {
                IpAddr::V4(v4) => Some(v4.octets()),
                IpAddr::V6(_) => None,
            })
            .unwrap_or_default();
        let (ct, t) = (&self.conntrack, &self.conntrack.timeouts);
        let config = DatapathConfig {
            snat4_be,
            nat_port_min: ct.snat_ports.0,
            nat_port_max: ct.snat_ports.1,
            nat_seed: self.nat_seed,
            flags: 0,
            timeout_tcp: t.tcp,
            timeout_tcp_syn: t.tcp_syn,
            timeout_tcp_fin: t.tcp_fin,
            timeout_any: t.any,
            // The datapath widens it to the ports earlier flows hold.
            nat_reply_min: 0,
            nat_reply_max: 0,
        };
        if self.tc_config == Some(config) {
            return;
        }
        match self.datapath.set_config(config) {
            Ok(()) => self.tc_config = Some(config),
            Err(e) => error!(
                error = &e as &dyn std::error::Error,
                "writing the tc programs' settings failed; retrying at the next sync"
            ),
        }
    }

    /// Leaves the UDP flows kube-proxy's rules made to our external
    /// frontends, and the SNAT ports of its flows, to the kernel, whose
    /// conntrack keeps translating them (`datapath/takeover.rs`): replacing
    /// kube-proxy on a live node keeps its connections. TCP needs nothing:
    /// a segment without SYN and without a flow of ours is the kernel's.
    fn take_over(&mut self) {
        let frontends: HashSet<(SocketAddrV4, u8)> = self
            .syncer
            .external_frontends()
            .filter_map(|fe| match fe.vip {
                IpAddr::V4(ip) => Some((SocketAddrV4::new(ip, fe.port), fe.proto.number())),
                IpAddr::V6(_) => None,
            })
            .collect();
        let flows = match kernel_conntrack::dump_ipv4() {
            Ok(flows) => flows,
            Err(e) => {
                warn!(
                    error = &e as &dyn std::error::Error,
                    "reading the kernel's conntrack: UDP flows another proxy made are balanced \
                     anew by the tc programs"
                );
                return;
            }
        };
        let is_frontend = |addr, proto| frontends.contains(&(addr, proto));
        match self
            .datapath
            .seed_kernel_flows(&flows, is_frontend, conntrack::now())
        {
            Ok(s) if s.flows + s.ports > 0 => info!(
                udp_flows = s.flows,
                snat_ports = s.ports,
                "left flows the kernel's conntrack translates (kube-proxy's) to it"
            ),
            Ok(_) => {}
            Err(e) => warn!(
                error = &e as &dyn std::error::Error,
                "leaving the kernel's flows to it"
            ),
        }
    }

    /// Logs a sync; during a migration, switches the programs once the new
    /// maps hold the whole state.
    fn after_sync(&mut self, s: &SyncStats, prune: bool) {
        self.destroy_stale();
        self.sync_tc();
        info!(
            prune,
            full = s.full,
            frontends = s.frontends,
            changed = s.outcome.changed(),
            failed = s.outcome.failed.len(),
            took_us = s.took.as_micros() as u64,
            latency_us = s.latency.as_micros() as u64,
            "sync complete"
        );
        if prune && s.outcome.changed() > 0 {
            warn!(
                changed = s.outcome.changed(),
                "the maps had drifted from the desired state; repaired"
            );
        }
        if s.full && !prune {
            // The (re)list it followed freed far more than the model keeps.
            memory::release_freed();
        }
        if self.attached {
            return;
        }
        if self.syncer.failing() > 0 {
            if s.full {
                error!(
                    failed = self.syncer.failing(),
                    "the new maps cannot hold the whole state; the old programs and maps \
                     stay in use until they can"
                );
            }
            return;
        }
        if let Err(e) = self.attach() {
            error!(
                error = e.as_ref() as &dyn std::error::Error,
                "switching the programs to the new maps failed; retrying"
            );
        }
    }
}

/// The devices that hold one of `ips`.
fn devices_holding(ips: &[IpAddr]) -> BTreeSet<String> {
    match if_addrs::get_if_addrs() {
        Ok(addrs) => addrs
            .into_iter()
            .filter(|a| ips.contains(&a.ip()))
            .map(|a| a.name)
            .collect(),
        Err(e) => {
            warn!(
                error = &e as &dyn std::error::Error,
                "listing the interfaces"
            );
            BTreeSet::new()
        }
    }
}

/// How often expired conntrack and SNAT entries are deleted, and the maps
/// counted.
const CONNTRACK_GC: Duration = Duration::from_secs(30);

/// Deletes expired entries of the tc programs' maps, and those of flows
/// whose endpoint stopped serving, every [`CONNTRACK_GC`] and whenever
/// asked through the returned sender (after a sync that stopped an
/// endpoint of an external frontend), on a thread of its own: a large
/// table takes a while to read, and nothing else waits for it.
fn spawn_conntrack_gc(
    maps_dir: PathBuf,
    serving: Arc<Serving<Frontend>>,
    endpoints: Arc<Endpoints>,
) -> anyhow::Result<SyncSender<()>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    thread::Builder::new()
        .name("conntrack-gc".into())
        .spawn(move || {
            let m = &endpoints.metrics;
            loop {
                if let Err(RecvTimeoutError::Disconnected) = rx.recv_timeout(CONNTRACK_GC) {
                    return;
                }
                let serves = |fe: &Frontend, ip| serving.serves(fe, ip);
                match conntrack::collect(&maps_dir, conntrack::now(), serves) {
                    Ok(c) => {
                        m.conntrack_entries.set(c.ct_left as f64);
                        m.nat_entries.set(c.nat_left as f64);
                        m.conntrack_collected.inc_by(c.ct as u64);
                        if c.ct + c.nat > 0 {
                            debug!(conntrack = c.ct, nat = c.nat, "deleted stale entries");
                        }
                    }
                    // During a migration from a layout without them, say.
                    Err(e) => debug!(
                        error = &e as &dyn std::error::Error,
                        "conntrack garbage collection"
                    ),
                }
            }
        })
        .context("starting the conntrack GC thread")?;
    Ok(tx)
}
