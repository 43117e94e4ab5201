//! The pinned BTF maps. Types, byte order and writers are documented in
//! `lb-common`; capacities here are defaults that the agent overrides at
//! load time (`--bpf-lb-*-map-max`).

use aya_ebpf::{
    btf_maps::{Array, ArrayOfMaps, HashMap, LpmTrie, LruHashMap, PerCpuArray, SkStorage},
    macros::btf_map,
};
use lb_common::{
    ADDR_WORDS, AffinityKey, AffinityValue, BPF_F_NO_PREALLOC, Backend4, Ct4Key, Ct4Value,
    DEFAULT_AFFINITY_MAX, DEFAULT_BACKENDS_MAX, DEFAULT_CT_MAX, DEFAULT_FRAG_MAX,
    DEFAULT_FRONTENDS_MAX, DEFAULT_MAGLEV_MAX, DEFAULT_NAT_MAX, DEFAULT_REVNAT_MAX,
    DEFAULT_SLOTS_MAX, DEFAULT_SOCK_NETNS_MAX, DEFAULT_SOURCE_RANGES_MAX, DatapathConfig, Frag4Key,
    Frag4Value, Frontend4Key, Frontend4State, FrontendId, MaglevChunk, MaglevKey, Member,
    MemberKey, Nat4Key, Nat4Value, REJECTS_MAX, RejectBucket, RevNat4Key, RevNat4Value,
    STATS_COUNT, Slot, SlotKey, SockNetns, SockRevNat, SourceRange4, SynBucket,
};
use lb_common::{
    Backend, CtKey, CtValue, DEFAULT_DSR_EPS_MAX, DEFAULT_NODE_NETS_MAX, DsrEndpointKey, Frag6Key,
    FrontendKey, FrontendState, NatKey, NatValue, NodeNet, RevNatKey, RevNatValue, SourceRange,
};

use crate::addr::Addr6;

/// `LB6_REVNAT`'s key and value, with the programs' [`Addr6`].
pub type RevNat6Key = RevNatKey<Addr6, [u8; 6]>;
pub type RevNat6Value = RevNatValue<Addr6>;

pub const NO_PREALLOC: usize = BPF_F_NO_PREALLOC as usize;
pub const FRONTENDS_MAX: usize = DEFAULT_FRONTENDS_MAX as usize;
pub const FE_STATE_MAX: usize = DEFAULT_FRONTENDS_MAX as usize + 1;
pub const SLOTS_MAX: usize = DEFAULT_SLOTS_MAX as usize;
pub const BACKENDS_MAX: usize = DEFAULT_BACKENDS_MAX as usize;
pub const AFFINITY_MAX: usize = DEFAULT_AFFINITY_MAX as usize;
pub const MAGLEV_MAX: usize = DEFAULT_MAGLEV_MAX as usize;
pub const FRAG_MAX: usize = DEFAULT_FRAG_MAX as usize;

/// Frontend -> its id. Entries are written once and never updated.
#[btf_map]
pub static LB4_FRONTENDS: HashMap<Frontend4Key, FrontendId, FRONTENDS_MAX, NO_PREALLOC> =
    HashMap::new();

/// Frontend id -> current revision and count, changed only under its lock.
#[btf_map]
pub static LB4_FE_STATE: Array<Frontend4State, FE_STATE_MAX> = Array::new();

/// (frontend id, revision, slot) -> backend id. Written once per revision.
#[btf_map]
pub static LB4_SLOTS: HashMap<SlotKey, Slot, SLOTS_MAX, NO_PREALLOC> = HashMap::new();

/// Backend id -> address. An id keeps its address while it exists.
#[btf_map]
pub static LB4_BACKENDS: HashMap<u32, Backend4, BACKENDS_MAX, NO_PREALLOC> = HashMap::new();

/// (frontend id, revision, backend id) -> slot, for affinity frontends.
/// Written once per revision, like the slots.
#[btf_map]
pub static LB4_MEMBERS: HashMap<MemberKey, Member, SLOTS_MAX, NO_PREALLOC> = HashMap::new();

/// (frontend id, revision, chunk) -> backend ids: the Maglev tables of
/// frontends with `FE_F_MAGLEV`. Written once per revision, like the slots.
#[btf_map]
pub static LB4_MAGLEV: HashMap<MaglevKey, MaglevChunk, MAGLEV_MAX, NO_PREALLOC> = HashMap::new();

/// (client netns, frontend id) -> backend and last use. Written by
/// connect4/sendmsg4; LRU, so a full map evicts the oldest clients.
#[btf_map]
pub static LB4_AFFINITY: LruHashMap<AffinityKey, AffinityValue, AFFINITY_MAX> = LruHashMap::new();

/// (socket cookie, backend) -> frontend of an unconnected socket's
/// datagrams, which may go to several frontends (a connected socket's is
/// in `LB_SOCK_REVNAT`). Written by sendmsg4, read by
/// recvmsg4/getpeername4; LRU, so closed sockets age out on their own.
#[btf_map]
pub static LB4_REVNAT: LruHashMap<RevNat4Key, RevNat4Value, { DEFAULT_REVNAT_MAX as usize }> =
    LruHashMap::new();

/// Which addresses have frontends, one bit per address hash (see
/// `lb_common::addrs`). Written by the agent.
#[btf_map]
pub static LB_ADDRS: Array<u64, { ADDR_WORDS as usize }> = Array::new();

/// Whether the address whose bit is `(word, mask)` may have a frontend: a
/// clear bit in `LB_ADDRS` rules it out without a lookup.
#[inline(always)]
pub fn maybe_frontend((word, mask): (u32, u64)) -> bool {
    LB_ADDRS.get(word).is_some_and(|w| w & mask != 0)
}

/// Network namespace cookie -> what the socket programs know of it
/// (`lb_common::sock_netns`): whether its pod opted out of socket load
/// balancing, the address its sockets send from. Written by the agent.
#[btf_map]
pub static LB_SOCK_NETNS: HashMap<
    u64,
    SockNetns,
    { DEFAULT_SOCK_NETNS_MAX as usize },
    NO_PREALLOC,
> = HashMap::new();

/// Socket -> the backend it was sent to and the frontend addressed, in the
/// socket's own storage. Written by connect*/sendmsg*, read by
/// recvmsg*/getpeername* and `lb_iter_udp`; freed with the socket.
#[btf_map]
pub static LB_SOCK_REVNAT: SkStorage<SockRevNat> = SkStorage::new();

/// The IPv6 twins of the maps above, with ids of their own.
#[btf_map]
pub static LB6_FRONTENDS: HashMap<FrontendKey<Addr6>, FrontendId, FRONTENDS_MAX, NO_PREALLOC> =
    HashMap::new();

#[btf_map]
pub static LB6_FE_STATE: Array<FrontendState<Addr6>, FE_STATE_MAX> = Array::new();

#[btf_map]
pub static LB6_SLOTS: HashMap<SlotKey, Slot, SLOTS_MAX, NO_PREALLOC> = HashMap::new();

#[btf_map]
pub static LB6_BACKENDS: HashMap<u32, Backend<Addr6>, BACKENDS_MAX, NO_PREALLOC> = HashMap::new();

#[btf_map]
pub static LB6_MEMBERS: HashMap<MemberKey, Member, SLOTS_MAX, NO_PREALLOC> = HashMap::new();

#[btf_map]
pub static LB6_MAGLEV: HashMap<MaglevKey, MaglevChunk, MAGLEV_MAX, NO_PREALLOC> = HashMap::new();

#[btf_map]
pub static LB6_AFFINITY: LruHashMap<AffinityKey, AffinityValue, AFFINITY_MAX> = LruHashMap::new();

/// (socket cookie, backend) -> frontend for AF_INET6 sockets reaching IPv6
/// frontends; a v4-mapped frontend's entry is in `LB4_REVNAT`.
#[btf_map]
pub static LB6_REVNAT: LruHashMap<RevNat6Key, RevNat6Value, { DEFAULT_REVNAT_MAX as usize }> =
    LruHashMap::new();

/// Per-CPU counters indexed by `lb_common::stats`.
#[btf_map]
pub static LB_STATS: PerCpuArray<u64, { STATS_COUNT as usize }> = PerCpuArray::new();

/// Both directions of every flow the tc programs translated. Written by
/// them; aged out by the agent; LRU, so a full map evicts the oldest flows.
#[btf_map]
pub static LB4_CT: LruHashMap<Ct4Key, Ct4Value, { DEFAULT_CT_MAX as usize }> = LruHashMap::new();

/// (backend, node address, SNAT port) -> client, for replies of SNATed
/// flows. Written by tc egress; aged out by the agent; LRU.
#[btf_map]
pub static LB4_NAT: LruHashMap<Nat4Key, Nat4Value, { DEFAULT_NAT_MAX as usize }> =
    LruHashMap::new();

/// The tc programs' settings, one entry. Written by the agent.
#[btf_map]
pub static LB_CONFIG: Array<DatapathConfig, 1> = Array::new();

/// Each CPU's budget of unconfirmed TCP flows (`lb_common::syn_budget`).
/// Written by the tc and XDP programs.
#[btf_map]
pub static LB_SYN_BUDGET: PerCpuArray<SynBucket, 1> = PerCpuArray::new();

/// `loadBalancerSourceRanges` of external frontends. Written by the agent.
#[btf_map]
pub static LB4_SRC_RANGES: LpmTrie<SourceRange4, u32, { DEFAULT_SOURCE_RANGES_MAX as usize }> =
    LpmTrie::new();

/// Fragments of datagrams the tc programs saw the first fragment of:
/// (addresses, IP id, protocol) -> the first fragment's ports. LRU.
#[btf_map]
pub static LB4_FRAG: LruHashMap<Frag4Key, Frag4Value, FRAG_MAX> = LruHashMap::new();

/// Reject rate limits of external frontends. LRU.
#[btf_map]
pub static LB4_REJECTS: LruHashMap<Frontend4Key, RejectBucket, { REJECTS_MAX as usize }> =
    LruHashMap::new();

/// The capacity of a previous-map slot's template: the kernel checks an
/// inner map's type, key and value sizes and flags, not its capacity.
pub const PREV_TEMPLATE: usize = 64;

/// During a migration, the reverse-NAT map `LB4_REVNAT` replaces (at index
/// 0), read where `LB4_REVNAT` has no entry; empty otherwise.
#[btf_map]
pub static LB4_REVNAT_PREV: ArrayOfMaps<LruHashMap<RevNat4Key, RevNat4Value, PREV_TEMPLATE>, 1> =
    ArrayOfMaps::new();

/// As `LB4_REVNAT_PREV`, for `LB6_REVNAT`.
#[btf_map]
pub static LB6_REVNAT_PREV: ArrayOfMaps<LruHashMap<RevNat6Key, RevNat6Value, PREV_TEMPLATE>, 1> =
    ArrayOfMaps::new();

/// As `LB4_REVNAT_PREV`, for `LB4_CT` (an older layout's entries too: the
/// value has kept its size and fields).
#[btf_map]
pub static LB4_CT_PREV: ArrayOfMaps<LruHashMap<Ct4Key, Ct4Value, PREV_TEMPLATE>, 1> =
    ArrayOfMaps::new();

/// As `LB4_CT_PREV`, for `LB4_NAT`.
#[btf_map]
pub static LB4_NAT_PREV: ArrayOfMaps<LruHashMap<Nat4Key, Nat4Value, PREV_TEMPLATE>, 1> =
    ArrayOfMaps::new();

/// The IPv6 twins of the tc programs' maps above. Their addresses are
/// [`Addr6`] words: the layouts of `lb_common`'s `Ct6Key`, `Ct6Value`,
/// `Nat6Key`, `Nat6Value` and `SourceRange6`.
#[btf_map]
pub static LB6_CT: LruHashMap<CtKey<Addr6>, CtValue<Addr6>, { DEFAULT_CT_MAX as usize }> =
    LruHashMap::new();

#[btf_map]
pub static LB6_NAT: LruHashMap<NatKey<Addr6>, NatValue<Addr6>, { DEFAULT_NAT_MAX as usize }> =
    LruHashMap::new();

#[btf_map]
pub static LB6_SRC_RANGES: LpmTrie<
    SourceRange<Addr6>,
    u32,
    { DEFAULT_SOURCE_RANGES_MAX as usize },
> = LpmTrie::new();

#[btf_map]
pub static LB6_FRAG: LruHashMap<Frag6Key, Frag4Value, FRAG_MAX> = LruHashMap::new();

#[btf_map]
pub static LB6_REJECTS: LruHashMap<FrontendKey<Addr6>, RejectBucket, { REJECTS_MAX as usize }> =
    LruHashMap::new();

#[btf_map]
pub static LB6_CT_PREV: ArrayOfMaps<LruHashMap<CtKey<Addr6>, CtValue<Addr6>, PREV_TEMPLATE>, 1> =
    ArrayOfMaps::new();

#[btf_map]
pub static LB6_NAT_PREV: ArrayOfMaps<LruHashMap<NatKey<Addr6>, NatValue<Addr6>, PREV_TEMPLATE>, 1> =
    ArrayOfMaps::new();

/// The endpoints on this node of external DSR frontends (`lb_common::dsr`):
/// a packet carrying a frontend is trusted only if it is to one of them.
/// Written by the agent.
#[btf_map]
pub static LB4_DSR_EPS: HashMap<
    DsrEndpointKey<[u8; 4]>,
    u32,
    { DEFAULT_DSR_EPS_MAX as usize },
    NO_PREALLOC,
> = HashMap::new();

#[btf_map]
pub static LB6_DSR_EPS: HashMap<
    DsrEndpointKey<Addr6>,
    u32,
    { DEFAULT_DSR_EPS_MAX as usize },
    NO_PREALLOC,
> = HashMap::new();

/// Which node an address belongs to (`lb_common::dsr`): a client on its
/// backend's node is SNATed rather than sent by DSR. Written by the agent.
#[btf_map]
pub static LB4_NODE_NETS: LpmTrie<[u8; 4], NodeNet, { DEFAULT_NODE_NETS_MAX as usize }> =
    LpmTrie::new();

#[btf_map]
pub static LB6_NODE_NETS: LpmTrie<Addr6, NodeNet, { DEFAULT_NODE_NETS_MAX as usize }> =
    LpmTrie::new();

// The agent reads and writes these maps with `lb_common`'s byte types.
const _: () = assert!(size_of::<FrontendKey<Addr6>>() == size_of::<lb_common::Frontend6Key>());
const _: () = assert!(size_of::<FrontendState<Addr6>>() == size_of::<lb_common::Frontend6State>());
const _: () = assert!(size_of::<Backend<Addr6>>() == size_of::<lb_common::Backend6>());
const _: () = assert!(size_of::<RevNat6Key>() == size_of::<lb_common::RevNat6Key>());
const _: () = assert!(size_of::<RevNat6Value>() == size_of::<lb_common::RevNat6Value>());
const _: () = assert!(size_of::<CtKey<Addr6>>() == size_of::<lb_common::Ct6Key>());
const _: () = assert!(size_of::<CtValue<Addr6>>() == size_of::<lb_common::Ct6Value>());
const _: () = assert!(size_of::<NatKey<Addr6>>() == size_of::<lb_common::Nat6Key>());
const _: () = assert!(size_of::<NatValue<Addr6>>() == size_of::<lb_common::Nat6Value>());
const _: () = assert!(size_of::<SourceRange<Addr6>>() == size_of::<lb_common::SourceRange6>());
const _: () =
    assert!(size_of::<DsrEndpointKey<Addr6>>() == size_of::<lb_common::DsrEndpoint6Key>());
