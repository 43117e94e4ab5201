//! The sync thread's state, its start (loading or migrating the programs
//! and maps, the helper threads) and what follows each sync.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    sync::mpsc::SyncSender,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use prometheus_client::metrics::family::Family;
use tracing::{debug, error, info, warn};

use super::{gc, pods_state::Pods, tc_settings::TcSettings};
use crate::{
    config::{RunConfig, Source},
    datapath::{
        Datapath, Start, cgroup, grace::MembarrierGrace, pins::Pins, settings::BpfSettings,
        table::Bpf, tc::TcHook,
    },
    log_budget::LogBudget,
    memory,
    metrics::{Gauge, XdpLabel},
    model::{NodeContext, Proto, Scope},
    reconcile::{DualReconciler, Found},
    shared::Shared,
    sockets::{NetnsSources, Report, SocketReaper, SocketsError, StaleUdp},
    syncer::{NODE_WAIT, NodeWait, SyncStats, Syncer},
};

/// The sync thread's state: the syncer, and the programs it may still have
/// to switch to its maps.
pub(super) struct Agent {
    pub(super) syncer: Syncer<Bpf, MembarrierGrace, BpfSettings>,
    pub(super) datapath: Datapath,
    pins: Pins,
    /// Destroys connected UDP sockets sent to endpoints that stopped serving.
    reaper: SocketReaper,
    cgroup: PathBuf,
    attached: bool,
    /// `--devices`; empty: the devices holding the Node's primary addresses.
    pub(super) devices: Vec<String>,
    /// What the tc programs are told, and whether the kernel's flows were
    /// left to it.
    pub(super) tc: TcSettings,
    /// Asks the conntrack collector to run now.
    collect_now: SyncSender<()>,
    /// `lbagent_tc_devices_unattached`.
    pub(super) tc_unattached: Gauge,
    /// `lbagent_xdp_attached`.
    pub(super) xdp_attached: Family<XdpLabel, Gauge>,
    /// `lbagent_xdp_veth_devices`.
    pub(super) xdp_veth: Gauge,
    /// `lbagent_xdp_attach_failures`.
    pub(super) xdp_failures: Gauge,
    /// Bounds the warnings that the UDP socket iterator cannot be loaded.
    iter_log: LogBudget,
    /// `--bpf-lb-acceleration=native` found a device without native XDP
    /// at the first attachment: the agent exits with this.
    pub(super) refused: Option<anyhow::Error>,
    /// The pods that opted out of socket load balancing.
    pub(super) pods: Pods,
}

impl Agent {
    /// Loads the programs and maps (migrating older ones), and attaches
    /// the programs unless a migration must fill new maps first.
    pub(super) fn start(config: &RunConfig, shared: Arc<Shared>) -> anyhow::Result<Self> {
        let mut tc = TcSettings::new(config.conntrack, config.maglev.seed, &config.capacities)?;
        let cgroup = match &config.cgroup {
            Some(p) => p.clone(),
            None => cgroup::cgroup2_mount()
                .context("finding the cgroup2 mount (or pass --cgroup-path)")?,
        };
        let pins = Pins::new(&config.bpffs_dir);
        let hook = TcHook::choose(config.enable_tcx);
        let datapath = Datapath::open(&pins, &config.capacities, hook, config.acceleration)
            .with_context(|| {
                format!(
                    "loading the programs and maps under {}",
                    pins.dir().display()
                )
            })?;
        log_start(datapath.start(), &pins, config);
        if datapath.adopted() {
            info!("adopted the programs an earlier agent of this build loaded and pinned");
        }
        // An earlier agent took over from kube-proxy when it started.
        tc.midflow = *datapath.start() != Start::Fresh;
        let _ = shared.metrics.datapath_maps.set(pins.maps_dir());
        // Each family's conntrack and SNAT maps hold this many (after a
        // migration too: the new maps have the configured capacities).
        let m = &shared.metrics;
        m.conntrack_max_entries.set(f64::from(config.capacities.ct));
        m.nat_max_entries.set(f64::from(config.capacities.nat));
        let grace = MembarrierGrace::start().context("starting the grace-period thread")?;
        if !MembarrierGrace::exact() {
            warn!(
                "membarrier(MEMBARRIER_CMD_GLOBAL) cannot wait for RCU readers here; deletions wait a fixed time instead"
            );
        }
        let tables = datapath.tables()?;
        let found = match datapath.start() {
            Start::Fresh => Found::Created,
            _ => Found::Pinned,
        };
        let reconciler = DualReconciler::adopt(tables.v4, tables.v6, grace, found, config.maglev)?;
        let [v4, v6] = reconciler.entries();
        info!(
            ipv4_frontends = v4.frontends,
            ipv4_backends = v4.backends,
            ipv6_frontends = v6.frontends,
            ipv6_backends = v6.backends,
            "read the maps; only differences will be written"
        );
        let syncer = Syncer::new(
            reconciler,
            datapath.settings_store()?,
            config.excluded.clone(),
            NodeContext {
                algorithm: config.lb_algorithm,
                lb_mode: config.lb_mode,
                source_range_all_types: config.source_range_all_types,
                ..NodeContext::named(&config.node_name)
            },
            match config.source {
                Source::Kube { .. } => NodeWait::new(NODE_WAIT),
                // The files are read whole, the Node (or none) with the rest.
                Source::File(_) => NodeWait::none(),
            },
            config.node_port_addresses.clone(),
            shared.clone(),
        );
        let reaper_shared = shared.clone();
        let reaper =
            SocketReaper::spawn(NetnsSources::default(), syncer.udp_serving(), move |pass| {
                count_reaped(&reaper_shared, pass);
            })
            .context("starting the socket reaper thread")?;
        let generation = datapath.xdp_generation();
        generation
            .watch_routes()
            .context("subscribing to route, neighbour, link and address notifications")?;
        let collect_now = gc::spawn(
            pins.maps_dir(),
            syncer.external_serving(),
            shared.clone(),
            generation,
        )?;
        let mut agent = Agent {
            pins,
            reaper,
            syncer,
            datapath,
            cgroup,
            attached: false,
            devices: config.devices.clone(),
            tc,
            collect_now,
            tc_unattached: shared.metrics.tc_devices_unattached.clone(),
            xdp_attached: shared.metrics.xdp_attached.clone(),
            xdp_veth: shared.metrics.xdp_veth_devices.clone(),
            xdp_failures: shared.metrics.xdp_attach_failures.clone(),
            iter_log: LogBudget::new(1, Duration::from_secs(600)),
            refused: None,
            pods: Pods::new(
                config.sock_hostns_only,
                config.source_range_all_types,
                &shared.metrics,
            ),
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

    /// Whether this build's programs are attached (they are not while a
    /// migration fills the new maps).
    pub(super) fn attached(&self) -> bool {
        self.attached
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
        let iter = self
            .datapath
            .udp_iter()
            .inspect_err(|e| {
                if let Some(suppressed) = self.iter_log.allow(Instant::now()) {
                    warn!(
                        error = e as &dyn std::error::Error,
                        suppressed,
                        "UDP socket iterator not loaded: connected UDP sockets to removed \
                         endpoints stay connected"
                    );
                }
            })
            .ok();
        if let Err(e) = self.reaper.submit(self.pins.maps_dir(), iter, udp) {
            warn!(
                error = &e as &dyn std::error::Error,
                "stale UDP sockets left in place"
            );
        }
    }

    /// Attaches this build's programs (switching from a migration's old
    /// maps), writing the tc programs' settings before and after, as
    /// [`Datapath::prepare_attach`] asks.
    fn attach(&mut self) -> anyhow::Result<()> {
        let prepared = self
            .datapath
            .prepare_attach()
            .context("preparing the maps for the new programs")?;
        self.rewrite_tc_config()
            .context("writing the tc programs' settings")?;
        let done = self
            .datapath
            .attach(&self.cgroup, prepared)
            .with_context(|| format!("attaching to cgroup {}", self.cgroup.display()))?;
        self.attached = true;
        if let Err(e) = self.rewrite_tc_config() {
            error!(
                error = &e as &dyn std::error::Error,
                "writing the tc programs' settings failed; retrying at the next sync"
            );
        }
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
        // The pods' programs are on their interfaces now: their
        // namespaces can be named.
        self.sync_pods();
        Ok(())
    }

    /// Logs a sync; during a migration, switches the programs once the new
    /// maps hold the whole state.
    pub(super) fn after_sync(&mut self, s: &SyncStats, prune: bool) {
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

/// Says how the pinned maps were found.
fn log_start(start: &Start, pins: &Pins, config: &RunConfig) {
    match start {
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
}

/// Counts and logs one pass of the socket reaper.
fn count_reaped(shared: &Shared, pass: Result<Report, SocketsError>) {
    let m = &shared.metrics;
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
}
