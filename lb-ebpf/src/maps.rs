//! The pinned BTF maps. Types and byte order are documented in `lb-common`;
//! the agent pins each map under its bpffs directory by symbol name.

use aya_ebpf::{
    btf_maps::{HashMap, LruHashMap},
    macros::btf_map,
};
use lb_common::{
    BACKENDS4_MAX, Backend4, REVNAT4_MAX, RevNat4Key, RevNat4Value, SERVICES4_MAX, Service4Key,
    ServiceValue,
};

/// Frontends (slot 0) and their backend slots (1..=count). Written by the agent.
#[btf_map]
pub static LB4_SERVICES: HashMap<Service4Key, ServiceValue, { SERVICES4_MAX as usize }> =
    HashMap::new();

/// Backend id (host order) -> backend address. Written by the agent.
#[btf_map]
pub static LB4_BACKENDS: HashMap<u32, Backend4, { BACKENDS4_MAX as usize }> = HashMap::new();

/// (socket cookie, backend) -> VIP. Written by connect4/sendmsg4, read by
/// recvmsg4/getpeername4; LRU so that closed sockets age out on their own.
#[btf_map]
pub static LB4_REVNAT: LruHashMap<RevNat4Key, RevNat4Value, { REVNAT4_MAX as usize }> =
    LruHashMap::new();
