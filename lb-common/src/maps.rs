//! The maps of this layout: symbol names, pin names, kernel properties and
//! default capacities.
//!
//! A map's symbol name (the `#[btf_map]` static in `lb-ebpf`) stays the same
//! across layouts; its pin name carries [`LAYOUT_VERSION`]. The agent adopts
//! pinned maps only when every property in [`MapSpec`] matches and the
//! capacity is the configured one; anything else is a migration.

use crate::{
    AffinityKey, AffinityValue, Backend4, Backend6, Ct4Key, Ct4Value, DatapathConfig, Frontend4Key,
    Frontend4State, Frontend6Key, Frontend6State, FrontendId, Member, MemberKey, Nat4Key,
    Nat4Value, RevNat4Key, RevNat4Value, RevNat6Key, RevNat6Value, Slot, SlotKey, SourceRange4,
};

/// Version of the map layout; part of every pin name. Layout 1 (pins without
/// a version: `LB4_SERVICES`, `LB4_BACKENDS`, `LB4_REVNAT`) kept frontends
/// and backend slots in one hash map updated in place. Layout 2 had no
/// affinity, members or policy bits, and a 20-byte frontend state. Layout 3
/// had no IPv6 maps. Layout 4 gained the tc programs' maps (`LB4_CT`,
/// `LB4_NAT`, `LB_CONFIG`, `LB4_SRC_RANGES`) and counters later: an agent that finds them
/// missing or `LB_STATS` of another size migrates, as for a capacity change.
pub const LAYOUT_VERSION: u32 = 4;

/// `BPF_MAP_TYPE_HASH`.
pub const MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`.
pub const MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `BPF_MAP_TYPE_LRU_HASH`.
pub const MAP_TYPE_LRU_HASH: u32 = 9;
/// `BPF_MAP_TYPE_LPM_TRIE`.
pub const MAP_TYPE_LPM_TRIE: u32 = 11;
/// `BPF_F_NO_PREALLOC`: elements are allocated on insert, so a large
/// capacity costs no memory until it is used.
pub const BPF_F_NO_PREALLOC: u32 = 1;

/// What the agent checks of a pinned map before adopting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// Symbol name in the eBPF object (at most 15 bytes: the kernel's name).
    pub name: &'static str,
    /// File name under the pin directory's `maps/`.
    pub pin: &'static str,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub flags: u32,
}

const fn spec<K, V>(name: &'static str, pin: &'static str, map_type: u32, flags: u32) -> MapSpec {
    MapSpec {
        name,
        pin,
        map_type,
        key_size: size_of::<K>() as u32,
        value_size: size_of::<V>() as u32,
        flags,
    }
}

/// Frontends: [`Frontend4Key`] -> [`FrontendId`]. Written by the agent.
pub const FRONTENDS4: MapSpec = spec::<Frontend4Key, FrontendId>(
    "LB4_FRONTENDS",
    "LB4_FRONTENDS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Frontend state, an array indexed by frontend id: [`Frontend4State`].
/// Written by the agent with `BPF_F_LOCK`.
pub const FE_STATE4: MapSpec =
    spec::<u32, Frontend4State>("LB4_FE_STATE", "LB4_FE_STATE_V4", MAP_TYPE_ARRAY, 0);
/// Backend slots of every revision: [`SlotKey`] -> [`Slot`]. Written by the agent.
pub const SLOTS4: MapSpec = spec::<SlotKey, Slot>(
    "LB4_SLOTS",
    "LB4_SLOTS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Backends: id (`u32`) -> [`Backend4`]. Written by the agent.
pub const BACKENDS4: MapSpec = spec::<u32, Backend4>(
    "LB4_BACKENDS",
    "LB4_BACKENDS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Revision members: [`MemberKey`] -> [`Member`]. Written by the agent,
/// for frontends with session affinity.
pub const MEMBERS4: MapSpec = spec::<MemberKey, Member>(
    "LB4_MEMBERS",
    "LB4_MEMBERS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Session affinity: [`AffinityKey`] -> [`AffinityValue`]. Written by the
/// programs; LRU, so a full map evicts the oldest clients.
pub const AFFINITY4: MapSpec =
    spec::<AffinityKey, AffinityValue>("LB4_AFFINITY", "LB4_AFFINITY_V4", MAP_TYPE_LRU_HASH, 0);
/// Socket reverse NAT: [`RevNat4Key`] -> [`RevNat4Value`]. Written by the
/// programs; LRU, so entries of closed sockets age out on their own.
pub const REVNAT4: MapSpec =
    spec::<RevNat4Key, RevNat4Value>("LB4_REVNAT", "LB4_REVNAT_V4", MAP_TYPE_LRU_HASH, 0);
/// IPv6 frontends: [`Frontend6Key`] -> [`FrontendId`], ids of their own.
pub const FRONTENDS6: MapSpec = spec::<Frontend6Key, FrontendId>(
    "LB6_FRONTENDS",
    "LB6_FRONTENDS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 frontend state: [`Frontend6State`], as [`FE_STATE4`].
pub const FE_STATE6: MapSpec =
    spec::<u32, Frontend6State>("LB6_FE_STATE", "LB6_FE_STATE_V4", MAP_TYPE_ARRAY, 0);
/// IPv6 backend slots, as [`SLOTS4`].
pub const SLOTS6: MapSpec = spec::<SlotKey, Slot>(
    "LB6_SLOTS",
    "LB6_SLOTS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 backends: id (`u32`) -> [`Backend6`].
pub const BACKENDS6: MapSpec = spec::<u32, Backend6>(
    "LB6_BACKENDS",
    "LB6_BACKENDS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 revision members, as [`MEMBERS4`].
pub const MEMBERS6: MapSpec = spec::<MemberKey, Member>(
    "LB6_MEMBERS",
    "LB6_MEMBERS_V4",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 session affinity, as [`AFFINITY4`].
pub const AFFINITY6: MapSpec =
    spec::<AffinityKey, AffinityValue>("LB6_AFFINITY", "LB6_AFFINITY_V4", MAP_TYPE_LRU_HASH, 0);
/// IPv6 socket reverse NAT: [`RevNat6Key`] -> [`RevNat6Value`], as [`REVNAT4`].
pub const REVNAT6: MapSpec =
    spec::<RevNat6Key, RevNat6Value>("LB6_REVNAT", "LB6_REVNAT_V4", MAP_TYPE_LRU_HASH, 0);
/// Datapath counters, per CPU: index (`u32`, see [`crate::stats`]) -> `u64`.
pub const STATS: MapSpec = spec::<u32, u64>("LB_STATS", "LB_STATS_V4", MAP_TYPE_PERCPU_ARRAY, 0);

/// Connection tracking of flows from outside the node: [`Ct4Key`] ->
/// [`Ct4Value`]. Written by the tc programs, aged out by the agent; LRU.
pub const CT4: MapSpec = spec::<Ct4Key, Ct4Value>("LB4_CT", "LB4_CT_V4", MAP_TYPE_LRU_HASH, 0);
/// Source NAT of those flows, reply side: [`Nat4Key`] -> [`Nat4Value`].
/// Written by tc egress, aged out by the agent; LRU.
pub const NAT4: MapSpec = spec::<Nat4Key, Nat4Value>("LB4_NAT", "LB4_NAT_V4", MAP_TYPE_LRU_HASH, 0);
/// Settings of the tc programs, an array of one: [`DatapathConfig`].
/// Written by the agent.
pub const CONFIG: MapSpec =
    spec::<u32, DatapathConfig>("LB_CONFIG", "LB_CONFIG_V4", MAP_TYPE_ARRAY, 0);

/// `loadBalancerSourceRanges` of external frontends: an LPM trie of
/// `{u32 prefix length, SourceRange4}` -> `u32` (1). Written by the agent.
pub const SOURCE_RANGES4: MapSpec = MapSpec {
    name: "LB4_SRC_RANGES",
    pin: "LB4_SRC_RANGES_V4",
    map_type: MAP_TYPE_LPM_TRIE,
    key_size: 4 + size_of::<SourceRange4>() as u32,
    value_size: 4,
    flags: BPF_F_NO_PREALLOC,
};

/// Every map of this layout.
pub const ALL_MAPS: [MapSpec; 19] = [
    FRONTENDS4,
    FE_STATE4,
    SLOTS4,
    BACKENDS4,
    MEMBERS4,
    AFFINITY4,
    REVNAT4,
    FRONTENDS6,
    FE_STATE6,
    SLOTS6,
    BACKENDS6,
    MEMBERS6,
    AFFINITY6,
    REVNAT6,
    STATS,
    CT4,
    NAT4,
    CONFIG,
    SOURCE_RANGES4,
];

/// Older layouts' reverse-NAT maps: their entries are byte-identical to
/// [`REVNAT4`]'s, so a migration carries them over.
pub const OLD_REVNAT4_PINS: [&str; 3] = ["LB4_REVNAT", "LB4_REVNAT_V2", "LB4_REVNAT_V3"];

/// Default capacity of `LB4_FRONTENDS` and `LB6_FRONTENDS` (each `FE_STATE` array has one entry more:
/// id 0 is never used).
pub const DEFAULT_FRONTENDS_MAX: u32 = 65_536;
/// Default capacity of `LB4_SLOTS` and `LB6_SLOTS`: the backends of every frontend, plus
/// the old revision of those changing at the moment.
pub const DEFAULT_SLOTS_MAX: u32 = 262_144;
/// Default capacity of `LB4_BACKENDS` and `LB6_BACKENDS`.
pub const DEFAULT_BACKENDS_MAX: u32 = 131_072;
/// Default capacity of `LB4_AFFINITY` and `LB6_AFFINITY` (Cilium's `--bpf-lb-affinity-map-max`).
pub const DEFAULT_AFFINITY_MAX: u32 = 65_536;
/// Default capacity of `LB4_REVNAT` and `LB6_REVNAT` (Cilium's `--bpf-sock-rev-map-max`).
pub const DEFAULT_REVNAT_MAX: u32 = 262_144;

/// IP protocol numbers as stored in `proto` fields.
pub const PROTO_TCP: u8 = 6;
/// See [`PROTO_TCP`].
pub const PROTO_UDP: u8 = 17;
/// ICMP, whose errors about translated flows the tc programs translate.
pub const PROTO_ICMP: u8 = 1;
