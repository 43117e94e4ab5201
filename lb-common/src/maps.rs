//! The maps of this layout: symbol names, pin names, kernel properties and
//! default capacities.
//!
//! A map's symbol name (the `#[btf_map]` static in `lb-ebpf`) stays the same
//! across layouts; its pin name carries [`LAYOUT_VERSION`]. The agent adopts
//! pinned maps only when every property in [`MapSpec`] matches and the
//! capacity is the configured one; anything else is a migration.

use crate::{
    AffinityKey, AffinityValue, Backend4, Backend6, Ct4Key, Ct4Value, Ct6Key, Ct6Value,
    DatapathConfig, DsrEndpoint4Key, DsrEndpoint6Key, Frag4Key, Frag4Value, Frag6Key, Frontend4Key,
    Frontend4State, Frontend6Key, Frontend6State, FrontendId, MaglevChunk, MaglevKey, Member,
    MemberKey, Nat4Key, Nat4Value, Nat6Key, Nat6Value, NodeNet, RejectBucket, RevNat4Key,
    RevNat4Value, RevNat6Key, RevNat6Value, Slot, SlotKey, SockRevNat, SourceRange4, SourceRange6,
    SynBucket,
};

/// Version of the map layout; part of every pin name. Layout 1 (pins without
/// a version: `LB4_SERVICES`, `LB4_BACKENDS`, `LB4_REVNAT`) kept frontends
/// and backend slots in one hash map updated in place. Layout 2 had no
/// affinity, members or policy bits, and a 20-byte frontend state. Layout 3
/// had no IPv6 maps. Layout 4 had no fragment, reject or previous-map
/// maps, kept each direction's TCP state apart in conntrack entries, and a
/// shorter `LB_CONFIG`. Layout 5 kept every socket's reverse-NAT entry in
/// the LRU `LB4_REVNAT` (no `LB_SOCK_REVNAT`) and had no `LB_ADDRS`. Layout
/// 6 had no IPv6 maps for the tc programs (`LB6_CT`, `LB6_NAT`, ...), no
/// IPv6 tc counters and a shorter `LB_CONFIG`. Layout 7 had no Maglev
/// tables (`LB4_MAGLEV`, `LB6_MAGLEV`), a frontend state without
/// `maglev_size`, an `LB_CONFIG` without `maglev_seed`, and no XDP
/// counters (29 `LB_STATS` entries). Layout 8 had no budget of unconfirmed
/// TCP flows (`LB_SYN_BUDGET`, its two `LB_CONFIG` fields and four
/// counters), no DSR and mid-flow counters and no count of what XDP told
/// tc: 39 `LB_STATS` entries. Layout 9 had no maps of DSR frontends'
/// endpoints (`LB4_DSR_EPS`, `LB6_DSR_EPS`) or of the nodes' networks
/// (`LB4_NODE_NETS`, `LB6_NODE_NETS`), and 48 `LB_STATS` entries. Layout
/// 10 counted in a flat `LB_STATS` of 55 entries, each family and hook
/// apart by name (`tc6_new_flow`), not by [`crate::StatKey`]. Layout 11
/// had no `LB_SOCK_NETNS` (no pod opted out of socket load balancing) and
/// no counters of the pods' tc programs.
pub const LAYOUT_VERSION: u32 = 12;

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
/// `BPF_MAP_TYPE_ARRAY_OF_MAPS`.
pub const MAP_TYPE_ARRAY_OF_MAPS: u32 = 12;
/// `BPF_MAP_TYPE_SK_STORAGE`.
pub const MAP_TYPE_SK_STORAGE: u32 = 24;
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
    "LB4_FRONTENDS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Frontend state, an array indexed by frontend id: [`Frontend4State`].
/// Written by the agent with `BPF_F_LOCK`.
pub const FE_STATE4: MapSpec =
    spec::<u32, Frontend4State>("LB4_FE_STATE", "LB4_FE_STATE_V12", MAP_TYPE_ARRAY, 0);
/// Backend slots of every revision: [`SlotKey`] -> [`Slot`]. Written by the agent.
pub const SLOTS4: MapSpec = spec::<SlotKey, Slot>(
    "LB4_SLOTS",
    "LB4_SLOTS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Backends: id (`u32`) -> [`Backend4`]. Written by the agent.
pub const BACKENDS4: MapSpec = spec::<u32, Backend4>(
    "LB4_BACKENDS",
    "LB4_BACKENDS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Revision members: [`MemberKey`] -> [`Member`]. Written by the agent,
/// for frontends with session affinity.
pub const MEMBERS4: MapSpec = spec::<MemberKey, Member>(
    "LB4_MEMBERS",
    "LB4_MEMBERS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Session affinity: [`AffinityKey`] -> [`AffinityValue`]. Written by the
/// programs; LRU, so a full map evicts the oldest clients.
pub const AFFINITY4: MapSpec =
    spec::<AffinityKey, AffinityValue>("LB4_AFFINITY", "LB4_AFFINITY_V12", MAP_TYPE_LRU_HASH, 0);
/// Socket reverse NAT: [`RevNat4Key`] -> [`RevNat4Value`], for what
/// [`SOCK_REVNAT`] cannot hold (an unconnected socket's second frontend).
/// Written by the programs; LRU, so entries of closed sockets age out on
/// their own.
pub const REVNAT4: MapSpec =
    spec::<RevNat4Key, RevNat4Value>("LB4_REVNAT", "LB4_REVNAT_V12", MAP_TYPE_LRU_HASH, 0);
/// Socket-local reverse NAT: the socket -> [`SockRevNat`], in the socket's
/// own storage, which lives and dies with it (no capacity, no eviction).
/// Written by the programs. Its entries cannot be read without the socket
/// (or a `SOCK_DIAG` dump), so a migration cannot carry them: a later
/// layout keeps this map, its pin name and its value as they are.
pub const SOCK_REVNAT: MapSpec = spec::<i32, SockRevNat>(
    "LB_SOCK_REVNAT",
    "LB_SOCK_REVNAT_V6",
    MAP_TYPE_SK_STORAGE,
    BPF_F_NO_PREALLOC,
);
/// Which addresses have frontends: a bitmap of [`crate::ADDR_WORDS`] `u64`
/// words, see [`crate::addrs`]. Written by the agent.
pub const ADDRS: MapSpec = spec::<u32, u64>("LB_ADDRS", "LB_ADDRS_V12", MAP_TYPE_ARRAY, 0);
/// IPv6 frontends: [`Frontend6Key`] -> [`FrontendId`], ids of their own.
pub const FRONTENDS6: MapSpec = spec::<Frontend6Key, FrontendId>(
    "LB6_FRONTENDS",
    "LB6_FRONTENDS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 frontend state: [`Frontend6State`], as [`FE_STATE4`].
pub const FE_STATE6: MapSpec =
    spec::<u32, Frontend6State>("LB6_FE_STATE", "LB6_FE_STATE_V12", MAP_TYPE_ARRAY, 0);
/// IPv6 backend slots, as [`SLOTS4`].
pub const SLOTS6: MapSpec = spec::<SlotKey, Slot>(
    "LB6_SLOTS",
    "LB6_SLOTS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 backends: id (`u32`) -> [`Backend6`].
pub const BACKENDS6: MapSpec = spec::<u32, Backend6>(
    "LB6_BACKENDS",
    "LB6_BACKENDS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 revision members, as [`MEMBERS4`].
pub const MEMBERS6: MapSpec = spec::<MemberKey, Member>(
    "LB6_MEMBERS",
    "LB6_MEMBERS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 session affinity, as [`AFFINITY4`].
pub const AFFINITY6: MapSpec =
    spec::<AffinityKey, AffinityValue>("LB6_AFFINITY", "LB6_AFFINITY_V12", MAP_TYPE_LRU_HASH, 0);
/// IPv6 socket reverse NAT: [`RevNat6Key`] -> [`RevNat6Value`], as [`REVNAT4`].
pub const REVNAT6: MapSpec =
    spec::<RevNat6Key, RevNat6Value>("LB6_REVNAT", "LB6_REVNAT_V12", MAP_TYPE_LRU_HASH, 0);
/// Datapath counters, per CPU: [`crate::StatKey::index`] (`u32`) -> `u64`,
/// host order. Written by every program.
pub const STATS: MapSpec = spec::<u32, u64>("LB_STATS", "LB_STATS_V12", MAP_TYPE_PERCPU_ARRAY, 0);

/// Connection tracking of flows from outside the node: [`Ct4Key`] ->
/// [`Ct4Value`]. Written by the tc programs, aged out by the agent; LRU.
pub const CT4: MapSpec = spec::<Ct4Key, Ct4Value>("LB4_CT", "LB4_CT_V12", MAP_TYPE_LRU_HASH, 0);
/// Source NAT of those flows, reply side: [`Nat4Key`] -> [`Nat4Value`].
/// Written by tc egress, aged out by the agent; LRU.
pub const NAT4: MapSpec =
    spec::<Nat4Key, Nat4Value>("LB4_NAT", "LB4_NAT_V12", MAP_TYPE_LRU_HASH, 0);
/// Settings of the tc programs, an array of one: [`DatapathConfig`].
/// Written by the agent.
pub const CONFIG: MapSpec =
    spec::<u32, DatapathConfig>("LB_CONFIG", "LB_CONFIG_V12", MAP_TYPE_ARRAY, 0);

/// `loadBalancerSourceRanges` of external frontends: an LPM trie of
/// `{u32 prefix length, SourceRange4}` -> `u32` (1). Written by the agent.
pub const SOURCE_RANGES4: MapSpec = MapSpec {
    name: "LB4_SRC_RANGES",
    pin: "LB4_SRC_RANGES_V12",
    map_type: MAP_TYPE_LPM_TRIE,
    key_size: 4 + size_of::<SourceRange4>() as u32,
    value_size: 4,
    flags: BPF_F_NO_PREALLOC,
};

/// Fragments of translated datagrams: [`Frag4Key`] -> [`Frag4Value`].
/// Written by the tc programs; LRU.
pub const FRAG4: MapSpec =
    spec::<Frag4Key, Frag4Value>("LB4_FRAG", "LB4_FRAG_V12", MAP_TYPE_LRU_HASH, 0);
/// Reject rate limits of external frontends: [`Frontend4Key`] ->
/// [`RejectBucket`]. Written by the tc programs; LRU.
pub const REJECTS4: MapSpec =
    spec::<Frontend4Key, RejectBucket>("LB4_REJECTS", "LB4_REJECTS_V12", MAP_TYPE_LRU_HASH, 0);

/// The IPv6 twins of the tc programs' maps: [`Ct6Key`] -> [`Ct6Value`], as
/// [`CT4`].
pub const CT6: MapSpec = spec::<Ct6Key, Ct6Value>("LB6_CT", "LB6_CT_V12", MAP_TYPE_LRU_HASH, 0);
/// [`Nat6Key`] -> [`Nat6Value`], as [`NAT4`].
pub const NAT6: MapSpec =
    spec::<Nat6Key, Nat6Value>("LB6_NAT", "LB6_NAT_V12", MAP_TYPE_LRU_HASH, 0);
/// `{u32 prefix length, SourceRange6}` -> `u32`, as [`SOURCE_RANGES4`].
pub const SOURCE_RANGES6: MapSpec = MapSpec {
    name: "LB6_SRC_RANGES",
    pin: "LB6_SRC_RANGES_V12",
    map_type: MAP_TYPE_LPM_TRIE,
    key_size: 4 + size_of::<SourceRange6>() as u32,
    value_size: 4,
    flags: BPF_F_NO_PREALLOC,
};
/// [`Frag6Key`] -> [`Frag4Value`], as [`FRAG4`].
pub const FRAG6: MapSpec =
    spec::<Frag6Key, Frag4Value>("LB6_FRAG", "LB6_FRAG_V12", MAP_TYPE_LRU_HASH, 0);
/// [`Frontend6Key`] -> [`RejectBucket`], as [`REJECTS4`].
pub const REJECTS6: MapSpec =
    spec::<Frontend6Key, RejectBucket>("LB6_REJECTS", "LB6_REJECTS_V12", MAP_TYPE_LRU_HASH, 0);

/// A previous-map slot: an array of maps of one entry, which during a
/// migration holds the map a stateful map replaces, so that the programs
/// find there what their own map lacks until the agent has carried it
/// over (see [`STATEFUL`]). Empty otherwise.
const fn prev(name: &'static str, pin: &'static str) -> MapSpec {
    MapSpec {
        name,
        pin,
        map_type: MAP_TYPE_ARRAY_OF_MAPS,
        key_size: 4,
        value_size: 4,
        flags: 0,
    }
}
/// The slot for [`REVNAT4`]'s previous map.
pub const REVNAT4_PREV: MapSpec = prev("LB4_REVNAT_PREV", "LB4_REVNAT_PREV_V12");
/// The slot for [`REVNAT6`]'s previous map.
pub const REVNAT6_PREV: MapSpec = prev("LB6_REVNAT_PREV", "LB6_REVNAT_PREV_V12");
/// The slot for [`CT4`]'s previous map.
pub const CT4_PREV: MapSpec = prev("LB4_CT_PREV", "LB4_CT_PREV_V12");
/// The slot for [`NAT4`]'s previous map.
pub const NAT4_PREV: MapSpec = prev("LB4_NAT_PREV", "LB4_NAT_PREV_V12");
/// The slot for [`CT6`]'s previous map.
pub const CT6_PREV: MapSpec = prev("LB6_CT_PREV", "LB6_CT_PREV_V12");
/// The slot for [`NAT6`]'s previous map.
pub const NAT6_PREV: MapSpec = prev("LB6_NAT_PREV", "LB6_NAT_PREV_V12");

/// Maglev tables: [`MaglevKey`] -> [`MaglevChunk`]. Written by the agent
/// with the revisions of frontends with [`crate::FE_F_MAGLEV`].
pub const MAGLEV4: MapSpec = spec::<MaglevKey, MaglevChunk>(
    "LB4_MAGLEV",
    "LB4_MAGLEV_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 Maglev tables, as [`MAGLEV4`].
pub const MAGLEV6: MapSpec = spec::<MaglevKey, MaglevChunk>(
    "LB6_MAGLEV",
    "LB6_MAGLEV_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);

/// The budget of unconfirmed TCP flows, per CPU: key 0 -> [`SynBucket`].
/// Written by the tc and XDP programs; not carried by migrations (a new
/// layout's buckets start full).
pub const SYN_BUDGET: MapSpec = spec::<u32, SynBucket>(
    "LB_SYN_BUDGET",
    "LB_SYN_BUDGET_V12",
    MAP_TYPE_PERCPU_ARRAY,
    0,
);

/// The endpoints on this node of external DSR frontends:
/// [`DsrEndpoint4Key`] -> `u32` (1). Written by the agent.
pub const DSR_EPS4: MapSpec = spec::<DsrEndpoint4Key, u32>(
    "LB4_DSR_EPS",
    "LB4_DSR_EPS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// IPv6 endpoints of DSR frontends: [`DsrEndpoint6Key`] -> `u32`, as
/// [`DSR_EPS4`].
pub const DSR_EPS6: MapSpec = spec::<DsrEndpoint6Key, u32>(
    "LB6_DSR_EPS",
    "LB6_DSR_EPS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);
/// Which node an IPv4 address belongs to: an LPM trie of `{u32 prefix
/// length, [u8; 4]}` -> [`NodeNet`]. Written by the agent.
pub const NODE_NETS4: MapSpec = MapSpec {
    name: "LB4_NODE_NETS",
    pin: "LB4_NODE_NETS_V12",
    map_type: MAP_TYPE_LPM_TRIE,
    key_size: 4 + 4,
    value_size: size_of::<NodeNet>() as u32,
    flags: BPF_F_NO_PREALLOC,
};
/// `{u32 prefix length, [u8; 16]}` -> [`NodeNet`], as [`NODE_NETS4`].
pub const NODE_NETS6: MapSpec = MapSpec {
    name: "LB6_NODE_NETS",
    pin: "LB6_NODE_NETS_V12",
    map_type: MAP_TYPE_LPM_TRIE,
    key_size: 4 + 16,
    value_size: size_of::<NodeNet>() as u32,
    flags: BPF_F_NO_PREALLOC,
};
/// What the socket programs know of network namespaces (see
/// [`crate::sock_netns`]): `u64` cookie -> [`crate::SockNetns`]. Written by
/// the agent.
pub const SOCK_NETNS: MapSpec = spec::<u64, crate::SockNetns>(
    "LB_SOCK_NETNS",
    "LB_SOCK_NETNS_V12",
    MAP_TYPE_HASH,
    BPF_F_NO_PREALLOC,
);

/// Every map of this layout.
pub const ALL_MAPS: [MapSpec; 42] = [
    FRONTENDS4,
    FE_STATE4,
    SLOTS4,
    BACKENDS4,
    MEMBERS4,
    AFFINITY4,
    REVNAT4,
    SOCK_REVNAT,
    ADDRS,
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
    FRAG4,
    REJECTS4,
    REVNAT4_PREV,
    REVNAT6_PREV,
    CT4_PREV,
    NAT4_PREV,
    CT6,
    NAT6,
    SOURCE_RANGES6,
    FRAG6,
    REJECTS6,
    CT6_PREV,
    NAT6_PREV,
    MAGLEV4,
    MAGLEV6,
    SYN_BUDGET,
    DSR_EPS4,
    DSR_EPS6,
    NODE_NETS4,
    NODE_NETS6,
    SOCK_NETNS,
];

/// Older layouts' `LB_CONFIG` pins. Every layout's value starts as
/// [`DatapathConfig`] does (SNAT address, port range): a migration keeps
/// the replies of flows on an older range's ports found.
pub const OLD_CONFIG_PINS: [&str; 8] = [
    "LB_CONFIG_V4",
    "LB_CONFIG_V5",
    "LB_CONFIG_V6",
    "LB_CONFIG_V7",
    "LB_CONFIG_V8",
    "LB_CONFIG_V9",
    "LB_CONFIG_V10",
    "LB_CONFIG_V11",
];

/// A map the programs write, whose entries live with flows and sockets: a
/// migration carries them into the new map (before the programs switch,
/// and again after, for what the old programs wrote meanwhile).
#[derive(Clone, Copy, Debug)]
pub struct Stateful {
    pub spec: MapSpec,
    /// Pins of older layouts' maps whose entries are this map's (same key
    /// and value sizes and meaning), oldest first.
    pub older: &'static [&'static str],
    /// The slot where the programs find the map this one replaces during a
    /// migration: those whose miss would break a connection (a reply shown
    /// from the backend's address, a flow reset). The others (affinity,
    /// fragments) only lose a choice or a datagram in flight.
    pub prev: Option<MapSpec>,
}

/// Maps a migration keeps as they are instead of replacing them, when the
/// pinned one matches: their entries cannot be copied (a socket's storage
/// is reached only through the socket), so the new maps share them.
pub const KEPT: [MapSpec; 1] = [SOCK_REVNAT];

/// Every stateful map of this layout.
pub const STATEFUL: [Stateful; 10] = [
    Stateful {
        spec: REVNAT4,
        older: &[
            "LB4_REVNAT",
            "LB4_REVNAT_V2",
            "LB4_REVNAT_V3",
            "LB4_REVNAT_V4",
            "LB4_REVNAT_V5",
            "LB4_REVNAT_V6",
            "LB4_REVNAT_V7",
            "LB4_REVNAT_V8",
            "LB4_REVNAT_V9",
            "LB4_REVNAT_V10",
            "LB4_REVNAT_V11",
        ],
        prev: Some(REVNAT4_PREV),
    },
    Stateful {
        spec: REVNAT6,
        older: &[
            "LB6_REVNAT_V4",
            "LB6_REVNAT_V5",
            "LB6_REVNAT_V6",
            "LB6_REVNAT_V7",
            "LB6_REVNAT_V8",
            "LB6_REVNAT_V9",
            "LB6_REVNAT_V10",
            "LB6_REVNAT_V11",
        ],
        prev: Some(REVNAT6_PREV),
    },
    Stateful {
        spec: AFFINITY4,
        older: &[
            "LB4_AFFINITY_V3",
            "LB4_AFFINITY_V4",
            "LB4_AFFINITY_V5",
            "LB4_AFFINITY_V6",
            "LB4_AFFINITY_V7",
            "LB4_AFFINITY_V8",
            "LB4_AFFINITY_V9",
            "LB4_AFFINITY_V10",
            "LB4_AFFINITY_V11",
        ],
        prev: None,
    },
    Stateful {
        spec: AFFINITY6,
        older: &[
            "LB6_AFFINITY_V4",
            "LB6_AFFINITY_V5",
            "LB6_AFFINITY_V6",
            "LB6_AFFINITY_V7",
            "LB6_AFFINITY_V8",
            "LB6_AFFINITY_V9",
            "LB6_AFFINITY_V10",
            "LB6_AFFINITY_V11",
        ],
        prev: None,
    },
    Stateful {
        spec: CT4,
        older: &[
            "LB4_CT_V4",
            "LB4_CT_V5",
            "LB4_CT_V6",
            "LB4_CT_V7",
            "LB4_CT_V8",
            "LB4_CT_V9",
            "LB4_CT_V10",
            "LB4_CT_V11",
        ],
        prev: Some(CT4_PREV),
    },
    Stateful {
        spec: NAT4,
        older: &[
            "LB4_NAT_V4",
            "LB4_NAT_V5",
            "LB4_NAT_V6",
            "LB4_NAT_V7",
            "LB4_NAT_V8",
            "LB4_NAT_V9",
            "LB4_NAT_V10",
            "LB4_NAT_V11",
        ],
        prev: Some(NAT4_PREV),
    },
    Stateful {
        spec: FRAG4,
        older: &[
            "LB4_FRAG_V5",
            "LB4_FRAG_V6",
            "LB4_FRAG_V7",
            "LB4_FRAG_V8",
            "LB4_FRAG_V9",
            "LB4_FRAG_V10",
            "LB4_FRAG_V11",
        ],
        prev: None,
    },
    Stateful {
        spec: CT6,
        older: &[
            "LB6_CT_V7",
            "LB6_CT_V8",
            "LB6_CT_V9",
            "LB6_CT_V10",
            "LB6_CT_V11",
        ],
        prev: Some(CT6_PREV),
    },
    Stateful {
        spec: NAT6,
        older: &[
            "LB6_NAT_V7",
            "LB6_NAT_V8",
            "LB6_NAT_V9",
            "LB6_NAT_V10",
            "LB6_NAT_V11",
        ],
        prev: Some(NAT6_PREV),
    },
    Stateful {
        spec: FRAG6,
        older: &[
            "LB6_FRAG_V7",
            "LB6_FRAG_V8",
            "LB6_FRAG_V9",
            "LB6_FRAG_V10",
            "LB6_FRAG_V11",
        ],
        prev: None,
    },
];

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
/// ICMPv6, likewise.
pub const PROTO_ICMPV6: u8 = 58;
