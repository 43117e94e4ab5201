//! Everything that touches the kernel's BPF objects: loading and attaching
//! the programs, adopting or migrating the pinned maps, the tables the
//! reconciler writes, grace periods, and the datapath counters.

mod batch;
pub mod bpffs;
#[cfg(feature = "fuzzing")]
pub use batch::Reader;
pub mod cgroup;
pub mod conntrack;
pub mod decode;
mod elem;
mod error;
pub mod grace;
pub mod kernel_conntrack;
pub mod layout;
mod link_detach;
pub mod loader;
pub mod migrate;
pub mod pins;
pub mod programs;
pub mod settings;
pub mod snat_ports;
pub mod sock_netns;
pub mod stats;
pub mod table;
pub mod takeover;
pub mod tc;
pub mod xdp;
pub mod xdp_generation;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use aya::maps::{Array, Map, MapData};
pub use error::Error;
use error::map_err;
use layout::Capacities;
use lb_common::{
    BACKENDS4, BACKENDS6, FE_STATE4, FE_STATE6, FRONTENDS4, FRONTENDS6, MAGLEV4, MAGLEV6, MEMBERS4,
    MEMBERS6, MapSpec, SLOTS4, SLOTS6,
};
use loader::{REVERSING, TRANSLATING};
use migrate::Leftover;
use pins::Pins;
use programs::Programs;
use table::{Bpf, BpfTable};

use crate::reconcile::{
    Family, LbTables, LbView, MapKey, MapValue, StoreError, Table as _, V4, V6, WriteMode,
};

/// How this build's maps relate to what was pinned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Nothing was pinned.
    Fresh,
    /// The pinned maps are this layout's, at the configured capacities.
    Adopted,
    /// The pinned maps differ (listed): new ones are built beside them and
    /// the programs switch once they are filled.
    Migrating(Vec<String>),
    /// An interrupted migration had already switched the programs.
    Resuming,
}

/// This build's programs and maps, loaded.
pub struct Datapath {
    pins: Pins,
    programs: Programs,
    /// Whether the programs are an earlier agent's of this build, adopted.
    adopted: bool,
    /// The XDP flow cache's generation.
    xdp_generation: xdp_generation::Generation,
    maps_dir: PathBuf,
    start: Start,
    /// The devices the tc programs are to be attached to.
    devices: BTreeSet<String>,
    /// How many of them lack the programs, attaching having failed there
    /// (retried at each sync).
    unattached: usize,
    /// How they are attached.
    tc_hook: tc::TcHook,
    /// Whether the XDP fast path goes beside them, and where it is.
    accel: xdp::Acceleration,
    xdp_attached: BTreeMap<String, (u32, xdp::Attached)>,
    /// Devices where native XDP failed at the last attempt (`Native`), and
    /// whether an attempt was made at all.
    xdp_failed: Vec<String>,
    xdp_tried: bool,
    /// The devices this agent attached them to, with their index then.
    attached: BTreeMap<String, u32>,
    /// The pods' host-side interfaces the pods' tc programs are to be on,
    /// those this agent attached them to (with their index then), and
    /// how many lack them.
    pod_devices: BTreeSet<String>,
    pod_attached: BTreeMap<String, u32>,
    pod_unattached: usize,
    /// Whether the previous-map slots are set: a migration is switching.
    prev: bool,
}

/// What [`Datapath::prepare_attach`] did.
#[derive(Debug)]
pub struct Prepared {
    carried: usize,
    prev_slots: usize,
}

/// What [`Datapath::attach`] did besides attaching.
#[derive(Debug)]
pub struct Attached {
    /// Entries of the stateful maps (socket reverse NAT, affinity,
    /// conntrack, SNAT, fragments) carried over from older maps.
    pub carried: usize,
    /// Previous-map slots the new programs read while they switched.
    pub prev_slots: usize,
    /// Pins of older maps removed.
    pub removed: Vec<PathBuf>,
    /// Whether the tc programs reached every device: a failure there
    /// leaves the socket programs serving, and is retried at each sync.
    pub tc: Result<(), Error>,
}

/// Both families' load-balancing tables.
pub struct DualTables {
    pub v4: LbTables<V4, Bpf>,
    pub v6: LbTables<V6, Bpf>,
}

/// Reading the pinned maps for `dump` failed.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("no maps of layout {} pinned under {}; is lb-agent running?", lb_common::LAYOUT_VERSION, .dir.display())]
    Open {
        dir: PathBuf,
        #[source]
        source: Box<StoreError>,
    },
    #[error("reading the pinned maps")]
    Read(#[source] Box<StoreError>),
}

/// This layout's load-balancing maps in `maps/`, read whole (`dump`).
pub fn read_view(pins: &Pins) -> Result<LbView, ViewError> {
    let dir = pins.maps_dir();
    let tables = open_tables(&dir).map_err(|e| ViewError::Open {
        dir,
        source: Box::new(e),
    })?;
    let read = |e| ViewError::Read(Box::new(e));
    Ok(family_view(&tables.v4)
        .map_err(read)?
        .merge(family_view(&tables.v6).map_err(read)?))
}

/// How many of `devices` an attach that ended in `done` left without
/// their programs.
fn unattached(done: &Result<(), Error>, devices: &BTreeSet<String>) -> usize {
    match done {
        Ok(()) => 0,
        Err(Error::Devices { devices, .. }) => devices.len(),
        Err(_) => devices.len(),
    }
}

/// One family's pinned maps, read whole.
fn family_view<F: Family>(tables: &LbTables<F, Bpf>) -> Result<LbView, StoreError> {
    Ok(LbView::of::<F>(
        &tables.frontends.read()?.into_iter().collect(),
        &tables.states.read()?.into_iter().collect(),
        &tables.slots.read()?.into_iter().collect(),
        &tables.members.read()?.into_iter().collect(),
        &tables.backends.read()?.into_iter().collect(),
    ))
}

/// The load-balancing tables pinned in `dir`.
fn open_tables(dir: &Path) -> Result<DualTables, StoreError> {
    Ok(DualTables {
        v4: open_family(
            dir,
            [
                &FRONTENDS4,
                &FE_STATE4,
                &SLOTS4,
                &MEMBERS4,
                &BACKENDS4,
                &MAGLEV4,
            ],
        )?,
        v6: open_family(
            dir,
            [
                &FRONTENDS6,
                &FE_STATE6,
                &SLOTS6,
                &MEMBERS6,
                &BACKENDS6,
                &MAGLEV6,
            ],
        )?,
    })
}

/// One family's tables: its frontends, states, slots, members, backends
/// and Maglev maps, in this order.
fn open_family<F: Family>(
    dir: &Path,
    specs: [&MapSpec; 6],
) -> Result<LbTables<F, Bpf>, StoreError> {
    fn open<K: MapKey, V: MapValue>(
        dir: &Path,
        spec: &MapSpec,
        mode: WriteMode,
    ) -> Result<BpfTable<K, V>, StoreError> {
        BpfTable::open(&dir.join(spec.pin), spec, mode)
    }
    let [frontends, states, slots, members, backends, maglev] = specs;
    Ok(LbTables {
        frontends: open(dir, frontends, WriteMode::Insert)?,
        states: open(dir, states, WriteMode::Locked)?,
        slots: open(dir, slots, WriteMode::Insert)?,
        members: open(dir, members, WriteMode::Insert)?,
        backends: open(dir, backends, WriteMode::Insert)?,
        maglev: open(dir, maglev, WriteMode::Insert)?,
    })
}

impl Datapath {
    /// Recovers from an interrupted migration, compares the pinned maps with
    /// what `caps` asks for, and loads the object: against the pinned maps
    /// when they match, else against new maps pinned beside them.
    pub fn open(
        pins: &Pins,
        caps: &Capacities,
        tc_hook: tc::TcHook,
        accel: xdp::Acceleration,
    ) -> Result<Self, Error> {
        let (maps_dir, start) = match migrate::recover(pins)? {
            Leftover::Switched => (pins.next_dir(), Start::Resuming),
            Leftover::None => {
                let found = layout::inspect(&pins.maps_dir(), caps)?;
                if found.empty() {
                    (pins.maps_dir(), Start::Fresh)
                } else if found.adoptable() {
                    (pins.maps_dir(), Start::Adopted)
                } else {
                    migrate::share_kept(pins, &found)?;
                    (pins.next_dir(), Start::Migrating(found.differences()))
                }
            }
        };
        let ebpf = loader::load(&maps_dir, caps)?;
        // All of them now, while the first lists are read: a device's tc
        // programs then attach as soon as the device is known.
        let names: Vec<&'static str> = tc::FUNCTIONS
            .into_iter()
            .chain(tc::POD_FUNCTIONS)
            .chain(TRANSLATING.iter().chain(&REVERSING).map(|p| p.function))
            .collect();
        // XDP's, loaded only once a device wants it, must have been
        // pinned too where it may be wanted: its maps stand in for ours.
        let lazy: &[&str] = match accel {
            xdp::Acceleration::Disabled => &[],
            _ => &[xdp::FUNCTION],
        };
        let (mut programs, adopted) =
            Programs::start(ebpf, pins, &maps_dir, &names, lazy, start == Start::Adopted)?;
        let xdp_generation =
            xdp_generation::Generation::new(programs.take_map(xdp_generation::MAP))?;
        Ok(Self {
            pins: pins.clone(),
            programs,
            adopted,
            xdp_generation,
            maps_dir,
            start,
            // Until told otherwise, the devices an earlier agent attached
            // to: replacing its programs there leaves no gap.
            devices: tc::linked_devices(pins)?,
            unattached: 0,
            tc_hook,
            accel,
            xdp_attached: BTreeMap::new(),
            xdp_failed: Vec::new(),
            xdp_tried: false,
            attached: BTreeMap::new(),
            // As the node's devices: an earlier agent's pods keep theirs
            // (those whose interface is still there).
            pod_devices: tc::linked_pod_devices(pins)?
                .into_iter()
                .filter(|d| tc::if_index(d) != 0)
                .collect(),
            pod_attached: BTreeMap::new(),
            pod_unattached: 0,
            prev: false,
        })
    }

    /// The UDP socket iterator, loaded at the first call.
    pub fn udp_iter(&mut self) -> Result<crate::sockets::UdpIter, Error> {
        loader::udp_iter(self.programs.object_mut())
    }

    /// Whether the programs were adopted from an earlier agent of this
    /// build instead of loaded.
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    /// The XDP flow cache's generation, for those who bump it.
    pub fn xdp_generation(&self) -> xdp_generation::Generation {
        self.xdp_generation.clone()
    }

    pub fn start(&self) -> &Start {
        &self.start
    }

    /// Whether the programs may be attached before the maps are filled:
    /// not during a migration, where the old programs keep serving from the
    /// old maps until the new ones hold the whole state.
    pub fn attach_early(&self) -> bool {
        !matches!(self.start, Start::Migrating(_))
    }

    /// Attaches the tc programs to `devices` (and detaches them from the
    /// others) if that changes anything, if a device failed last time, or
    /// if one was deleted or created again since.
    /// Before [`Self::attach`], only remembers them: the programs must not
    /// use maps still being filled.
    pub fn set_devices(
        &mut self,
        devices: BTreeSet<String>,
        attached: bool,
    ) -> Result<bool, Error> {
        if devices == self.devices && !self.devices_stale() {
            return Ok(false);
        }
        self.devices = devices;
        if attached {
            self.attach_tc()?;
        }
        Ok(true)
    }

    /// How many devices the tc programs should be on but are not.
    pub fn unattached_devices(&self) -> usize {
        self.unattached
    }

    /// Whether a device lacks the tc programs it should have: attaching
    /// failed there, or it was deleted or created again since.
    pub fn devices_stale(&self) -> bool {
        self.unattached > 0 || tc::moved(&self.attached)
    }

    /// Puts the pods' tc programs on `wanted` (the interfaces of the pods
    /// that opted out, found), and keeps them on every interface they are
    /// on that still exists: a pod that opts in again keeps translating
    /// the flows it started per packet, and its sockets, balanced again,
    /// send nothing else its way. A pod's interface goes with the pod.
    /// Before [`Self::attach`], only remembers them. Returns the wanted
    /// interfaces that have the programs now.
    pub fn set_pod_devices(
        &mut self,
        wanted: &BTreeSet<String>,
        attached: bool,
    ) -> BTreeSet<String> {
        let mut devices: BTreeSet<String> = self
            .pod_devices
            .iter()
            .filter(|d| tc::if_index(d) != 0)
            .cloned()
            .collect();
        devices.extend(wanted.iter().cloned());
        let stale = self.pod_unattached > 0 || tc::moved(&self.pod_attached);
        if devices != self.pod_devices || stale {
            self.pod_devices = devices;
            if attached {
                self.attach_pods();
            }
        }
        wanted
            .iter()
            .filter(|d| self.pod_attached.contains_key(*d))
            .cloned()
            .collect()
    }

    /// How many pods' interfaces should have the pods' tc programs but do
    /// not.
    pub fn unattached_pod_devices(&self) -> usize {
        self.pod_unattached
    }

    fn attach_pods(&mut self) {
        let done = tc::attach_pods(
            &mut self.programs,
            &self.pins,
            self.tc_hook,
            &self.pod_devices,
            &mut self.pod_attached,
        );
        self.pod_unattached = unattached(&done, &self.pod_devices);
        if let Err(e) = done {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "attaching the pods' tc programs failed; retrying at the next sync"
            );
        }
    }

    /// Makes `LB_SOCK_NETNS` hold exactly `entries`: the namespaces of the
    /// opted-out pods whose interfaces have the pods' tc programs, and the
    /// addresses namespaces send from.
    pub fn write_sock_netns(
        &self,
        entries: &BTreeMap<u64, lb_common::SockNetns>,
    ) -> Result<bool, Error> {
        sock_netns::write(&self.maps_dir, entries)
    }

    fn attach_tc(&mut self) -> Result<(), Error> {
        self.attach_pods();
        let done = tc::attach(
            &mut self.programs,
            &self.pins,
            self.tc_hook,
            &self.devices,
            &mut self.attached,
        );
        self.unattached = unattached(&done, &self.devices);
        done?;
        // XDP only where tc is: it passes what it does not forward to tc.
        let fast = xdp::sync(
            &mut self.programs,
            &self.pins,
            self.accel,
            &self.devices,
            &mut self.xdp_attached,
        );
        self.xdp_tried = true;
        self.xdp_failed = match &fast {
            Err(Error::Devices { devices, .. }) => devices.clone(),
            _ => Vec::new(),
        };
        self.unattached = self.xdp_failed.len();
        // What the flow cache learned of sending by the devices before is
        // stale: a device may have got XDP, or lost it.
        self.xdp_generation.bump().map_err(|source| Error::Global {
            section: "LB_XDP_GENERATION",
            source,
        })?;
        fast
    }

    /// `--bpf-lb-acceleration`.
    pub fn acceleration(&self) -> xdp::Acceleration {
        self.accel
    }

    /// The devices native XDP failed on at the last attempt; `None` before
    /// the first.
    pub fn xdp_failed(&self) -> Option<&[String]> {
        self.xdp_tried.then_some(self.xdp_failed.as_slice())
    }

    /// The devices the XDP fast path was tried on: attached natively, or
    /// left on tc only.
    pub fn xdp_devices(&self) -> impl Iterator<Item = (&str, xdp::Attached)> {
        self.xdp_attached.iter().map(|(d, (_, a))| (d.as_str(), *a))
    }

    /// Writes `LB_CONFIG`: `config` with what only the datapath knows:
    /// whether the programs are to read the previous-map slots
    /// (`CFG_F_PREV`, while a migration switches), whether XDP's marks are
    /// to be read (`CFG_F_XDP`), and the ports replies are looked up for
    /// (the SNAT range widened to the ports earlier flows hold). Its part
    /// changes in [`Self::prepare_attach`] and [`Self::attach`]: write it
    /// again after each.
    pub fn write_settings(&self, mut config: lb_common::DatapathConfig) -> Result<(), Error> {
        if self.prev {
            config.flags |= lb_common::CFG_F_PREV;
        }
        if self.acceleration() != xdp::Acceleration::Disabled {
            config.flags |= lb_common::CFG_F_XDP;
        }
        let range = (config.nat_port_min, config.nat_port_max);
        (config.nat_reply_min, config.nat_reply_max) =
            migrate::reply_ports(&self.pins, &self.maps_dir, range);
        let path = self.maps_dir.join(lb_common::CONFIG.pin);
        let data = MapData::from_pin(&path).map_err(map_err(&path))?;
        let mut map: Array<MapData, lb_common::DatapathConfig> =
            Array::try_from(Map::Array(data)).map_err(map_err(&path))?;
        map.set(0, config, 0).map_err(map_err(&path))
    }

    /// Where the reconciler writes the tc programs' settings: the maps this
    /// build's programs use.
    pub fn settings_store(&self) -> Result<settings::BpfSettings, StoreError> {
        settings::BpfSettings::open(&self.maps_dir)
    }

    /// Leaves the kernel's NATed flows to our external frontends to the
    /// kernel (see [`takeover`]), in the maps this build's programs use;
    /// `config` gives the SNAT ports.
    pub fn seed_kernel_flows(
        &self,
        kernel: &[kernel_conntrack::KernelFlow],
        is_frontend: impl Fn(std::net::SocketAddr, u8) -> bool,
        config: &lb_common::DatapathConfig,
        now: u32,
    ) -> Result<takeover::Seeded, Error> {
        takeover::seed(&self.maps_dir, kernel, is_frontend, config, now)
    }

    /// The load-balancing tables this build's programs read.
    pub fn tables(&self) -> Result<DualTables, StoreError> {
        open_tables(&self.maps_dir)
    }

    /// The first half of attaching (see [`Self::attach`]): the stateful
    /// maps' entries are carried into the new maps, and during a migration
    /// the old maps are put in the new ones' previous-map slots, so that
    /// the new programs find what they lack there. The settings (now with
    /// `CFG_F_PREV`, see [`Self::settings`]) are to be written before
    /// [`Self::attach`].
    pub fn prepare_attach(&mut self) -> Result<Prepared, Error> {
        let mut prepared = Prepared {
            carried: migrate::carry_stateful(&self.pins)?,
            prev_slots: 0,
        };
        if self.switching() {
            prepared.prev_slots = migrate::set_prev(&self.pins)?;
            self.prev = prepared.prev_slots > 0;
        } else {
            // An earlier agent that died switching may have left them set.
            migrate::clear_prev(&self.maps_dir)?;
        }
        Ok(prepared)
    }

    /// Whether attaching switches from a migration's old maps.
    fn switching(&self) -> bool {
        !matches!(self.start, Start::Fresh | Start::Adopted)
    }

    /// Attaches the programs to `cgroup`, replacing whatever is attached
    /// through our links, make-before-break, and finishes a migration
    /// without losing what the old programs wrote: after
    /// [`Self::prepare_attach`], the new programs are attached; once a
    /// grace period has passed (no old program runs any more), what the
    /// old programs wrote meanwhile is carried too and the slots are
    /// emptied. Older pins go last. The settings are to be written again
    /// afterwards (`CFG_F_PREV` cleared, the reply ports of the new maps).
    pub fn attach(&mut self, cgroup: &Path, prepared: Prepared) -> Result<Attached, Error> {
        let switching = self.switching();
        let Prepared {
            mut carried,
            prev_slots,
        } = prepared;
        // The reversing programs first: from then on a socket the old
        // programs translated (into the old map) is reversed through the
        // previous-map slot, and one the new ones translate through the new
        // map. The other way round, the old reversing programs would miss
        // every socket the new ones translated in between.
        cgroup::attach(&mut self.programs, &self.pins, cgroup, &REVERSING)?;
        cgroup::attach(&mut self.programs, &self.pins, cgroup, &TRANSLATING)?;
        let tc = self.attach_tc();
        if switching {
            grace::wait_for_readers();
            carried += migrate::carry_stateful(&self.pins)?;
            migrate::clear_prev(&self.maps_dir)?;
            self.prev = false;
        }
        let removed = migrate::finish(&self.pins)?;
        self.maps_dir = self.pins.maps_dir();
        self.start = Start::Adopted;
        Ok(Attached {
            carried,
            prev_slots,
            removed,
            tc,
        })
    }
}
