//! The pinned BTF maps. Types, byte order and writers are documented in
//! `lb-common`; capacities here are defaults that the agent overrides at
//! load time (`--bpf-lb-*-map-max`).

use aya_ebpf::{
    btf_maps::{Array, HashMap, LruHashMap, PerCpuArray},
    macros::btf_map,
};
use lb_common::{
    Affinity4Key, AffinityValue, BPF_F_NO_PREALLOC, Backend4, DEFAULT_AFFINITY_MAX,
    DEFAULT_BACKENDS_MAX, DEFAULT_FRONTENDS_MAX, DEFAULT_REVNAT_MAX, DEFAULT_SLOTS_MAX,
    Frontend4Key, Frontend4State, FrontendId, Member, MemberKey, RevNat4Key, RevNat4Value,
    STATS_COUNT, Slot, SlotKey,
};

const NO_PREALLOC: usize = BPF_F_NO_PREALLOC as usize;

/// Frontend -> its id. Entries are written once and never updated.
#[btf_map]
pub static LB4_FRONTENDS: HashMap<
    Frontend4Key,
    FrontendId,
    { DEFAULT_FRONTENDS_MAX as usize },
    NO_PREALLOC,
> = HashMap::new();

/// Frontend id -> current revision and count, changed only under its lock.
#[btf_map]
pub static LB4_FE_STATE: Array<Frontend4State, { DEFAULT_FRONTENDS_MAX as usize + 1 }> =
    Array::new();

/// (frontend id, revision, slot) -> backend id. Written once per revision.
#[btf_map]
pub static LB4_SLOTS: HashMap<SlotKey, Slot, { DEFAULT_SLOTS_MAX as usize }, NO_PREALLOC> =
    HashMap::new();

/// Backend id -> address. An id keeps its address while it exists.
#[btf_map]
pub static LB4_BACKENDS: HashMap<u32, Backend4, { DEFAULT_BACKENDS_MAX as usize }, NO_PREALLOC> =
    HashMap::new();

/// (frontend id, revision, backend id) -> slot, for affinity frontends.
/// Written once per revision, like the slots.
#[btf_map]
pub static LB4_MEMBERS: HashMap<MemberKey, Member, { DEFAULT_SLOTS_MAX as usize }, NO_PREALLOC> =
    HashMap::new();

/// (client netns, frontend id) -> backend and last use. Written by
/// connect4/sendmsg4; LRU, so a full map evicts the oldest clients.
#[btf_map]
pub static LB4_AFFINITY: LruHashMap<
    Affinity4Key,
    AffinityValue,
    { DEFAULT_AFFINITY_MAX as usize },
> = LruHashMap::new();

/// (socket cookie, backend) -> frontend. Written by connect4/sendmsg4, read
/// by recvmsg4/getpeername4; LRU, so closed sockets age out on their own.
#[btf_map]
pub static LB4_REVNAT: LruHashMap<RevNat4Key, RevNat4Value, { DEFAULT_REVNAT_MAX as usize }> =
    LruHashMap::new();

/// Per-CPU counters indexed by `lb_common::stats`.
#[btf_map]
pub static LB_STATS: PerCpuArray<u64, { STATS_COUNT as usize }> = PerCpuArray::new();
