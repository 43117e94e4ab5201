//! The maps this build wants (properties and capacities), and how the
//! pinned maps compare with them.

use std::path::{Path, PathBuf};

use aya::maps::MapInfo;
use lb_common::{
    ADDR_WORDS, ADDRS, AFFINITY4, AFFINITY6, ALL_MAPS, BACKENDS4, BACKENDS6, CONFIG, CT4, CT6,
    DEFAULT_AFFINITY_MAX, DEFAULT_BACKENDS_MAX, DEFAULT_CT_MAX, DEFAULT_DSR_EPS_MAX,
    DEFAULT_FRAG_MAX, DEFAULT_FRONTENDS_MAX, DEFAULT_MAGLEV_MAX, DEFAULT_NAT_MAX,
    DEFAULT_NODE_NETS_MAX, DEFAULT_REVNAT_MAX, DEFAULT_SLOTS_MAX, DEFAULT_SOCK_NETNS_MAX,
    DEFAULT_SOURCE_RANGES_MAX, DSR_EPS4, DSR_EPS6, FE_STATE4, FE_STATE6, FRAG4, FRAG6, FRONTENDS4,
    FRONTENDS6, MAGLEV4, MAGLEV6, MAP_TYPE_ARRAY_OF_MAPS, MEMBERS4, MEMBERS6, MapSpec, NAT4, NAT6,
    NODE_NETS4, NODE_NETS6, REJECTS_MAX, REJECTS4, REJECTS6, REVNAT4, REVNAT6, SLOTS4, SLOTS6,
    SOCK_NETNS, SOCK_REVNAT, SOURCE_RANGES4, SOURCE_RANGES6, STATS, STATS_COUNT, SYN_BUDGET,
};

use super::{
    error::{Error, map_err},
    pins::pinned,
};

/// Map capacities, set at load time (`--bpf-lb-*-map-max`), the same for
/// each family's map. A pinned map with another capacity is replaced by a
/// migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacities {
    /// `LB4_FRONTENDS`; `LB4_FE_STATE` holds one more (id 0 is unused).
    pub frontends: u32,
    /// `LB4_SLOTS`, and `LB4_MEMBERS` (at most one member per slot).
    pub slots: u32,
    pub backends: u32,
    pub revnat: u32,
    pub affinity: u32,
    /// `LB4_CT` and `LB6_CT`.
    pub ct: u32,
    /// `LB4_NAT` and `LB6_NAT`.
    pub nat: u32,
    /// `LB4_FRAG` and `LB6_FRAG`.
    pub frag: u32,
    /// `LB4_MAGLEV` and `LB6_MAGLEV`, in chunks of 256 entries.
    pub maglev: u32,
}

impl Default for Capacities {
    fn default() -> Self {
        Self {
            frontends: DEFAULT_FRONTENDS_MAX,
            slots: DEFAULT_SLOTS_MAX,
            backends: DEFAULT_BACKENDS_MAX,
            revnat: DEFAULT_REVNAT_MAX,
            affinity: DEFAULT_AFFINITY_MAX,
            ct: DEFAULT_CT_MAX,
            nat: DEFAULT_NAT_MAX,
            frag: DEFAULT_FRAG_MAX,
            maglev: DEFAULT_MAGLEV_MAX,
        }
    }
}

impl Capacities {
    /// The `max_entries` this build creates `spec` with.
    pub fn max_entries(&self, spec: &MapSpec) -> u32 {
        let is = |a: &MapSpec, b: &MapSpec| spec.name == a.name || spec.name == b.name;
        match spec {
            _ if is(&FRONTENDS4, &FRONTENDS6) => self.frontends,
            _ if is(&FE_STATE4, &FE_STATE6) => self.frontends.saturating_add(1),
            _ if is(&SLOTS4, &SLOTS6) || is(&MEMBERS4, &MEMBERS6) => self.slots,
            _ if is(&AFFINITY4, &AFFINITY6) => self.affinity,
            _ if is(&BACKENDS4, &BACKENDS6) => self.backends,
            _ if is(&REVNAT4, &REVNAT6) => self.revnat,
            _ if spec.name == STATS.name => STATS_COUNT,
            _ if is(&CT4, &CT6) => self.ct,
            _ if is(&NAT4, &NAT6) => self.nat,
            _ if spec.name == CONFIG.name || spec.name == SYN_BUDGET.name => 1,
            _ if is(&SOURCE_RANGES4, &SOURCE_RANGES6) => DEFAULT_SOURCE_RANGES_MAX,
            _ if is(&FRAG4, &FRAG6) => self.frag,
            _ if is(&MAGLEV4, &MAGLEV6) => self.maglev,
            _ if is(&REJECTS4, &REJECTS6) => REJECTS_MAX,
            _ if is(&DSR_EPS4, &DSR_EPS6) => DEFAULT_DSR_EPS_MAX,
            _ if is(&NODE_NETS4, &NODE_NETS6) => DEFAULT_NODE_NETS_MAX,
            _ if spec.name == SOCK_NETNS.name => DEFAULT_SOCK_NETNS_MAX,
            _ if spec.name == ADDRS.name => ADDR_WORDS,
            // Socket storage has no capacity: the kernel wants 0.
            _ if spec.name == SOCK_REVNAT.name => 0,
            // A previous-map slot: one map.
            _ if spec.map_type == MAP_TYPE_ARRAY_OF_MAPS => 1,
            other => unreachable!("map {} has no capacity", other.name),
        }
    }
}

/// How a pinned map compares with what this build wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    Missing,
    Matches,
    /// What differs, for the log: "max_entries 1024, want 65536".
    Differs(String),
}

/// The pinned maps of one directory against this build's.
#[derive(Debug)]
pub struct Inspection {
    pub maps: Vec<(MapSpec, Found)>,
    /// Pins this layout does not use: maps of an older layout.
    pub foreign: Vec<PathBuf>,
}

impl Inspection {
    /// Every map is there as wanted.
    pub fn adoptable(&self) -> bool {
        self.maps.iter().all(|(_, f)| *f == Found::Matches)
    }

    /// Nothing is pinned at all: a first install.
    pub fn empty(&self) -> bool {
        self.foreign.is_empty() && self.maps.iter().all(|(_, f)| *f == Found::Missing)
    }

    /// What is not as wanted, for the log.
    pub fn differences(&self) -> Vec<String> {
        let maps = self.maps.iter().filter_map(|(spec, found)| match found {
            Found::Matches => None,
            Found::Missing => Some(format!("{}: missing", spec.pin)),
            Found::Differs(why) => Some(format!("{}: {why}", spec.pin)),
        });
        let foreign = self
            .foreign
            .iter()
            .map(|p| format!("{}: older layout", p.display()));
        maps.chain(foreign).collect()
    }
}

/// Compares the maps pinned in `dir` with what `caps` asks for.
pub fn inspect(dir: &Path, caps: &Capacities) -> Result<Inspection, Error> {
    let mut maps = Vec::new();
    for spec in ALL_MAPS {
        let path = dir.join(spec.pin);
        let found = match MapInfo::from_pin(&path) {
            Ok(info) => compare(&info, &spec, caps.max_entries(&spec)),
            Err(_) if !path.exists() => Found::Missing,
            Err(source) => return Err(map_err(&path)(source)),
        };
        maps.push((spec, found));
    }
    let mut foreign = Vec::new();
    for name in pinned(dir)? {
        if !ALL_MAPS.iter().any(|s| s.pin == name) {
            foreign.push(dir.join(name));
        }
    }
    Ok(Inspection { maps, foreign })
}

/// Every property a program relies on: type, key and value size, flags and
/// capacity.
fn compare(info: &MapInfo, spec: &MapSpec, max_entries: u32) -> Found {
    let map_type = info.map_type().map_or(u32::MAX, |t| t as u32);
    let found = [
        ("type", map_type, spec.map_type),
        ("key_size", info.key_size(), spec.key_size),
        ("value_size", info.value_size(), spec.value_size),
        ("flags", info.map_flags(), spec.flags),
        ("max_entries", info.max_entries(), max_entries),
    ];
    let diffs: Vec<String> = found
        .iter()
        .filter(|(_, have, want)| have != want)
        .map(|(what, have, want)| format!("{what} {have}, want {want}"))
        .collect();
    if diffs.is_empty() {
        Found::Matches
    } else {
        Found::Differs(diffs.join(", "))
    }
}
