//! The map layouts of earlier releases, installed as their agents installed
//! them, for the upgrade tests (`tests/tests/upgrade.rs`) and layout 4's
//! flows from outside (`tests/tests/flows.rs`). Each layout is a row of
//! [`LAYOUTS`]: its eBPF object (`fixtures/lb-ebpf-layout<n>.o`, see
//! `fixtures/README.md`), the maps it added, how its frontends were
//! written; [`Layout::install`] is the one loader.
//!
//! * Layout 1 (commit `bd85fb1`): `LB4_SERVICES` (slot 0 the frontend,
//!   1..=count its backends), its maps pinned under `maps/` by symbol name.
//! * Layouts 2 to 11: the maps pinned with `_V<n>` pin names (and
//!   `LB_SOCK_REVNAT_V6`, which layouts 7 to 11 kept from 6), the frontends
//!   written with layout 2's write protocol (`write`, unchanged since) in
//!   the layout's frontend state (`State`). Layout 3 added the state's
//!   affinity timeout (`LB4_MEMBERS` and `LB4_AFFINITY` are left empty
//!   here: no frontend has affinity), layout 8 the size of a Maglev table.
//!   From layout 6 on, `LB_ADDRS` names the frontends' addresses, which
//!   their connect4 tests first.
//! * Layout 4, the first with the tc programs, is installed on a node
//!   ([`Layout::install_on_node`]): its tc programs attached to a device of
//!   the node's namespace through links pinned under `links/`
//!   (`tc-in-<dev>`, `tc-out-<dev>`), and its `LB_CONFIG`.
//!
//! Every layout's socket programs are attached to the cgroup through links
//! pinned under `links/` ([`crate::install::attach`]). The types are the
//! layouts' own, copied here: `lb-common` follows the current layout.

use std::{fs, net::Ipv4Addr, path::Path};

use anyhow::{Context as _, bail};
use aya::{
    Ebpf, EbpfLoader, Pod,
    maps::{Array, HashMap, Map, MapData},
    programs::{LinkOrder, SchedClassifier, TcAttachType, links::FdLink, tc::TcAttachOptions},
};

pub use crate::install::Frontend;
use crate::netns;

/// One earlier map layout.
pub struct Layout {
    pub version: u8,
    /// The commit of the agent that installed it.
    pub commit: &'static str,
    /// Its eBPF object as built then (at its default capacities, which that
    /// agent also set at load time unless flagged otherwise).
    object: &'static [u8],
    /// The maps (symbol names) it added to the layout before; layout 1's
    /// are its own (layout 2 replaced them), and since layout 2 none went.
    added: &'static [&'static str],
    /// How it wrote its frontends.
    frontends: Writes,
    /// Whether its `LB_ADDRS` names the frontends' addresses.
    addrs: bool,
}

/// How a layout's agent wrote its frontends.
enum Writes {
    /// Layout 1: `LB4_SERVICES`.
    Services,
    /// Layout 2's protocol ([`write`]), in layout 2's [`State`].
    Slots,
    /// Layout 2's protocol in layout 3's state: layout 2's and the
    /// affinity timeout.
    SlotsAffinity,
    /// Layout 2's protocol in layout 8's state: layout 3's and the size of
    /// a Maglev table.
    SlotsMaglev,
}

/// Layouts 1 to 11, in order.
pub static LAYOUTS: [Layout; 11] = [
    Layout {
        version: 1,
        commit: "bd85fb1",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout1.o"),
        added: &["LB4_SERVICES", "LB4_BACKENDS", "LB4_REVNAT"],
        frontends: Writes::Services,
        addrs: false,
    },
    Layout {
        version: 2,
        commit: "8d1d4ae",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout2.o"),
        added: &[
            "LB4_FRONTENDS",
            "LB4_FE_STATE",
            "LB4_SLOTS",
            "LB4_BACKENDS",
            "LB4_REVNAT",
            "LB_STATS",
        ],
        frontends: Writes::Slots,
        addrs: false,
    },
    Layout {
        version: 3,
        commit: "3a6996e",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout3.o"),
        added: &["LB4_MEMBERS", "LB4_AFFINITY"],
        frontends: Writes::SlotsAffinity,
        addrs: false,
    },
    Layout {
        version: 4,
        commit: "e79df86",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout4.o"),
        added: &[
            "LB6_FRONTENDS",
            "LB6_FE_STATE",
            "LB6_SLOTS",
            "LB6_BACKENDS",
            "LB6_MEMBERS",
            "LB6_AFFINITY",
            "LB6_REVNAT",
            "LB4_CT",
            "LB4_NAT",
            "LB_CONFIG",
            "LB4_SRC_RANGES",
        ],
        frontends: Writes::SlotsAffinity,
        addrs: false,
    },
    Layout {
        version: 5,
        commit: "a961124",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout5.o"),
        added: &[
            "LB4_FRAG",
            "LB4_REJECTS",
            "LB4_REVNAT_PREV",
            "LB6_REVNAT_PREV",
            "LB4_CT_PREV",
            "LB4_NAT_PREV",
        ],
        frontends: Writes::SlotsAffinity,
        addrs: false,
    },
    Layout {
        version: 6,
        commit: "9d1a17e",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout6.o"),
        added: &["LB_SOCK_REVNAT", "LB_ADDRS"],
        frontends: Writes::SlotsAffinity,
        addrs: true,
    },
    Layout {
        version: 7,
        commit: "e11544a",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout7.o"),
        added: &[
            "LB6_CT",
            "LB6_NAT",
            "LB6_SRC_RANGES",
            "LB6_FRAG",
            "LB6_REJECTS",
            "LB6_CT_PREV",
            "LB6_NAT_PREV",
        ],
        frontends: Writes::SlotsAffinity,
        addrs: true,
    },
    Layout {
        version: 8,
        commit: "d53209a",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout8.o"),
        added: &["LB4_MAGLEV", "LB6_MAGLEV"],
        frontends: Writes::SlotsMaglev,
        addrs: true,
    },
    Layout {
        version: 9,
        commit: "b73fe3b",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout9.o"),
        added: &["LB_SYN_BUDGET"],
        frontends: Writes::SlotsMaglev,
        addrs: true,
    },
    Layout {
        version: 10,
        commit: "d8e9301",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout10.o"),
        added: &[
            "LB4_DSR_EPS",
            "LB6_DSR_EPS",
            "LB4_NODE_NETS",
            "LB6_NODE_NETS",
        ],
        frontends: Writes::SlotsMaglev,
        addrs: true,
    },
    Layout {
        version: 11,
        commit: "12ccf72",
        object: aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout11.o"),
        // Layout 11 changed `LB_STATS`'s size and keys, no map's name.
        added: &[],
        frontends: Writes::SlotsMaglev,
        addrs: true,
    },
];

/// Pins that a later layout kept with an earlier layout's name.
const KEPT_PINS: [(&str, &str); 1] = [("LB_SOCK_REVNAT", "LB_SOCK_REVNAT_V6")];

/// Layout `version` (1 to 11).
pub fn layout(version: u8) -> &'static Layout {
    let layout = &LAYOUTS[usize::from(version) - 1];
    assert_eq!(layout.version, version, "LAYOUTS is in order");
    layout
}

impl Layout {
    /// Its maps: symbol name in the object, pin name under `maps/`.
    pub fn maps(&self) -> Vec<(&'static str, String)> {
        if self.version == 1 {
            return self.added.iter().map(|m| (*m, (*m).to_owned())).collect();
        }
        LAYOUTS[1..usize::from(self.version)]
            .iter()
            .flat_map(|l| l.added)
            .map(|m| {
                let kept = KEPT_PINS.iter().find(|(name, _)| name == m);
                let pin = kept.map_or_else(|| format!("{m}_V{}", self.version), |k| k.1.to_owned());
                (*m, pin)
            })
            .collect()
    }

    fn what(&self) -> String {
        format!("layout {}", self.version)
    }

    /// Loads the object with its maps pinned under `pins`' `maps/` and
    /// writes `frontends`; `ebpf` is then ready for its programs.
    fn load(&self, pins: &Path, frontends: &[Frontend]) -> anyhow::Result<Ebpf> {
        let dir = pins.join("maps");
        fs::create_dir_all(&dir)?;
        let mut loader = EbpfLoader::new();
        for (name, pin) in self.maps() {
            loader.map_pin_path(name, dir.join(pin));
        }
        let mut ebpf = loader
            .load(self.object)
            .with_context(|| format!("loading {}", self.what()))?;
        match self.frontends {
            Writes::Services => write_services(&mut ebpf, frontends)?,
            Writes::Slots => write(&mut ebpf, frontends, state::<0>)?,
            Writes::SlotsAffinity => write(&mut ebpf, frontends, state::<1>)?,
            Writes::SlotsMaglev => write(&mut ebpf, frontends, state::<2>)?,
        }
        Ok(ebpf)
    }

    /// Installs the layout under the pin directory `pins`, programs
    /// `frontends` (and names their addresses in `LB_ADDRS` where the
    /// layout has it), and attaches its socket programs to `cgroup`.
    pub fn install(
        &self,
        pins: &Path,
        cgroup: &Path,
        frontends: &[Frontend],
    ) -> anyhow::Result<()> {
        let mut ebpf = self.load(pins, frontends)?;
        crate::install::attach(&mut ebpf, pins, cgroup, &self.what())?;
        drop(ebpf);
        if self.addrs {
            mark_addrs(pins, &format!("LB_ADDRS_V{}", self.version), frontends)?;
        }
        Ok(())
    }

    /// Installs layout 4 on a node under the pin directory `pins`:
    /// `frontends` (each of its scope; an external one is eTP Cluster,
    /// SNATed to `snat`), the socket programs attached to `cgroup`, the tc
    /// programs to `device` of network namespace `ns`, and its
    /// `LB_CONFIG`: `snat` and the SNAT ports 61000-65535. Layout 4 kept
    /// each direction's TCP state apart in its conntrack entries and had no
    /// fragment, reject or previous-map maps.
    pub fn install_on_node(
        &self,
        pins: &Path,
        cgroup: &Path,
        frontends: &[Frontend],
        ns: &str,
        device: &str,
        snat: Ipv4Addr,
    ) -> anyhow::Result<()> {
        if self.version != 4 {
            bail!("only layout 4 is installed on a node, not {}", self.what());
        }
        let links = pins.join("links");
        fs::create_dir_all(&links)?;
        // In the node's namespace: the tc programs attach to its device.
        netns::within(ns, || {
            let mut ebpf = self.load(pins, frontends)?;
            let mut config: Array<_, Config4> =
                Array::try_from(ebpf.map_mut("LB_CONFIG").context("LB_CONFIG")?)?;
            let value = Config4 {
                snat4_be: snat.octets(),
                nat_port_min: 61_000,
                nat_port_max: 65_535,
            };
            config.set(0, value, 0)?;
            crate::install::attach(&mut ebpf, pins, cgroup, &self.what())?;
            // Egress first, as that agent attached them.
            for (function, hook, prefix) in [
                ("lb_tc_egress", TcAttachType::Egress, "tc-out-"),
                ("lb_tc_ingress", TcAttachType::Ingress, "tc-in-"),
            ] {
                let program: &mut SchedClassifier = ebpf
                    .program_mut(function)
                    .with_context(|| format!("{function} in {}", self.what()))?
                    .try_into()?;
                program.load()?;
                let id = program.attach_with_options(
                    device,
                    hook,
                    TcAttachOptions::TcxOrder(LinkOrder::default()),
                )?;
                let link: FdLink = program.take_link(id)?.try_into()?;
                link.pin(links.join(format!("{prefix}{device}")))?;
            }
            Ok(())
        })
    }

    /// Creates map `name` of the layout's object, which no program uses,
    /// and pins it at `path`: what a migration cut short before the switch
    /// leaves.
    pub fn pin_unused_map(&self, name: &str, path: &Path) -> anyhow::Result<()> {
        EbpfLoader::new()
            .map_pin_path(name, path)
            .load(self.object)
            .with_context(|| format!("loading {}", self.what()))?;
        Ok(())
    }
}

/// `BPF_F_LOCK`: the state is written in place under its spin lock, so a
/// program reading it under the lock sees all of the write or none of it.
const BPF_F_LOCK: u64 = 4;

/// The revision every frontend starts at (the agent's first).
const FIRST_REV: u16 = 1;

/// Layout 1's key of `LB4_SERVICES`: slot 0 is the frontend, 1..=count its
/// backends.
#[repr(C)]
#[derive(Clone, Copy)]
struct ServiceKey {
    vip_be: [u8; 4],
    port_be: u16,
    proto: u8,
    _pad0: u8,
    slot: u16,
    _pad1: [u8; 2],
}

/// Layout 1's value of `LB4_SERVICES`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ServiceValue {
    backend_id: u32,
    svc_id: u32,
    count: u16,
    flags: u8,
    _pad0: u8,
}

/// Key of `LB4_FRONTENDS` (layouts 2 on), also the state's `owner`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Frontend4Key {
    addr_be: [u8; 4],
    port_be: u16,
    proto: u8,
    /// 0: the frontend as seen from inside the cluster.
    scope: u8,
}

/// Value of `LB4_FRONTENDS`: the index in `LB4_FE_STATE`, never 0.
#[repr(C)]
#[derive(Clone, Copy)]
struct FrontendId {
    id: u32,
}

/// Value of `LB4_FE_STATE`: the current revision and its slot count, and
/// `N` fields later layouts added (layout 3: `affinity_timeout`; layout 8:
/// `maglev_size`), written as 0.
#[repr(C)]
#[derive(Clone, Copy)]
struct State<const N: usize> {
    /// The `bpf_spin_lock`; written as 0.
    lock: u32,
    owner: Frontend4Key,
    rev: u16,
    count: u16,
    flags: u16,
    _pad0: [u8; 2],
    added: [u32; N],
}

/// Key of `LB4_SLOTS`: one slot of one revision.
#[repr(C)]
#[derive(Clone, Copy)]
struct SlotKey {
    fe_id: u32,
    rev: u16,
    slot: u16,
}

/// Value of `LB4_SLOTS`: a key of `LB4_BACKENDS`, never 0.
#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    backend_id: u32,
}

/// Value of `LB4_BACKENDS` (key: backend id), layout 1's too.
#[repr(C)]
#[derive(Clone, Copy)]
struct Backend4 {
    addr_be: [u8; 4],
    port_be: u16,
    proto: u8,
    /// 0: active.
    state: u8,
}

/// Value of layout 4's `LB_CONFIG`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Config4 {
    snat4_be: [u8; 4],
    nat_port_min: u16,
    nat_port_max: u16,
}

const _: () = assert!(size_of::<ServiceKey>() == 12);
const _: () = assert!(size_of::<ServiceValue>() == 12);
const _: () = assert!(size_of::<Frontend4Key>() == 8);
const _: () = assert!(size_of::<FrontendId>() == 4);
const _: () = assert!(size_of::<State<0>>() == 20);
const _: () = assert!(size_of::<State<1>>() == 24);
const _: () = assert!(size_of::<State<2>>() == 28);
const _: () = assert!(size_of::<SlotKey>() == 8);
const _: () = assert!(size_of::<Slot>() == 4);
const _: () = assert!(size_of::<Backend4>() == 8);
const _: () = assert!(size_of::<Config4>() == 8);

// SAFETY: each is repr(C) with its padding spelled out as fields (the size
// asserts above equal the sums of the fields; a `State`'s 20 bytes of
// fields are a multiple of its alignment, 4, and so are its added `u32`s),
// and any bit pattern is a valid value.
unsafe impl Pod for ServiceKey {}
// SAFETY: as above.
unsafe impl Pod for ServiceValue {}
// SAFETY: as above.
unsafe impl Pod for Frontend4Key {}
// SAFETY: as above.
unsafe impl Pod for FrontendId {}
// SAFETY: as above.
unsafe impl<const N: usize> Pod for State<N> {}
// SAFETY: as above.
unsafe impl Pod for SlotKey {}
// SAFETY: as above.
unsafe impl Pod for Slot {}
// SAFETY: as above.
unsafe impl Pod for Backend4 {}
// SAFETY: as above.
unsafe impl Pod for Config4 {}

/// The state of a frontend `owner` with `count` backends in its first
/// revision, as the agents of layouts 2 to 10 wrote it.
fn state<const N: usize>(owner: Frontend4Key, count: u16) -> State<N> {
    State {
        lock: 0,
        owner,
        rev: FIRST_REV,
        count,
        flags: 0,
        _pad0: [0; 2],
        added: [0; N],
    }
}

/// Writes `frontends` as layout 1's agent did: the backends, then each
/// frontend's backend slots and last its slot 0.
fn write_services(ebpf: &mut Ebpf, frontends: &[Frontend]) -> anyhow::Result<()> {
    {
        let mut backends = hash::<u32, Backend4>(ebpf, "LB4_BACKENDS")?;
        let mut id = 0;
        for f in frontends {
            for (ip, port) in &f.backends {
                id += 1;
                let b = Backend4 {
                    addr_be: ip.octets(),
                    port_be: port.to_be(),
                    proto: f.proto,
                    state: 0,
                };
                backends.insert(id, b, 0)?;
            }
        }
    }
    let mut services = hash::<ServiceKey, ServiceValue>(ebpf, "LB4_SERVICES")?;
    let mut backend_id = 0;
    for (svc_id, f) in (1u32..).zip(frontends) {
        let key = |slot| ServiceKey {
            vip_be: f.vip.octets(),
            port_be: f.port.to_be(),
            proto: f.proto,
            _pad0: 0,
            slot,
            _pad1: [0; 2],
        };
        for slot in 1..=f.backends.len() as u16 {
            backend_id += 1;
            let v = ServiceValue {
                backend_id,
                svc_id,
                count: 0,
                flags: 0,
                _pad0: 0,
            };
            services.insert(key(slot), v, 0)?;
        }
        let v = ServiceValue {
            backend_id: 0,
            svc_id,
            count: f.backends.len() as u16,
            flags: 0,
            _pad0: 0,
        };
        services.insert(key(0), v, 0)?;
    }
    Ok(())
}

/// Writes `frontends` as the agents of layouts 2 on did, make before
/// break, one map at a time: the backends, the slots of each frontend's
/// first revision, the states naming it, and last the entries naming the
/// states.
fn write<S: Pod>(
    ebpf: &mut Ebpf,
    frontends: &[Frontend],
    state: impl Fn(Frontend4Key, u16) -> S,
) -> anyhow::Result<()> {
    let key = |f: &Frontend| Frontend4Key {
        addr_be: f.vip.octets(),
        port_be: f.port.to_be(),
        proto: f.proto,
        scope: f.scope,
    };
    let mut backends = hash::<u32, Backend4>(ebpf, "LB4_BACKENDS")?;
    for (_, f, first) in ids(frontends) {
        for (id, (ip, port)) in (first..).zip(&f.backends) {
            let b = Backend4 {
                addr_be: ip.octets(),
                port_be: port.to_be(),
                proto: f.proto,
                state: 0,
            };
            backends.insert(id, b, 0)?;
        }
    }
    let mut slots = hash::<SlotKey, Slot>(ebpf, "LB4_SLOTS")?;
    for (fe_id, f, first) in ids(frontends) {
        for (slot, backend_id) in (0..).zip(first..).take(f.backends.len()) {
            let k = SlotKey {
                fe_id,
                rev: FIRST_REV,
                slot,
            };
            slots.insert(k, Slot { backend_id }, 0)?;
        }
    }
    let map = ebpf.map_mut("LB4_FE_STATE").context("LB4_FE_STATE")?;
    let mut states: Array<_, S> = Array::try_from(map)?;
    for (id, f, _) in ids(frontends) {
        let value = state(key(f), u16::try_from(f.backends.len())?);
        states.set(id, value, BPF_F_LOCK)?;
    }
    let mut entries = hash::<Frontend4Key, FrontendId>(ebpf, "LB4_FRONTENDS")?;
    for (id, f, _) in ids(frontends) {
        entries.insert(key(f), FrontendId { id }, 0)?;
    }
    Ok(())
}

/// Each frontend with its id and its first backend's id. Both count from 1
/// (0 is never an id); a frontend's backends take consecutive ids, in slot
/// order.
fn ids(frontends: &[Frontend]) -> impl Iterator<Item = (u32, &Frontend, u32)> {
    let mut next = 1;
    (1..).zip(frontends).map(move |(id, f)| {
        let first = next;
        next += f.backends.len() as u32;
        (id, f, first)
    })
}

/// The hash map `name` of `ebpf`, typed. Borrowed, not taken out: the
/// programs, loaded afterwards, are relocated against the maps' fds.
fn hash<'a, K: Pod, V: Pod>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> anyhow::Result<HashMap<&'a mut MapData, K, V>> {
    let map = ebpf.map_mut(name).with_context(|| name.to_owned())?;
    Ok(HashMap::try_from(map)?)
}

/// Sets the bits of `frontends`' addresses in the `LB_ADDRS` map pinned as
/// `pin`, as the agents of layouts 6 on wrote them.
fn mark_addrs(pins: &Path, pin: &str, frontends: &[Frontend]) -> anyhow::Result<()> {
    let data = MapData::from_pin(pins.join("maps").join(pin))?;
    let mut words: Array<MapData, u64> = Array::try_from(Map::Array(data))?;
    for f in frontends {
        let (index, bit) = lb_common::addr_bit4(f.vip.octets());
        let word = words.get(&index, 0)?;
        words.set(index, word | bit, 0)?;
    }
    Ok(())
}
