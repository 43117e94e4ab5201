//! The tc programs' connection state: lookups of `LB4_CT` and `LB4_NAT`
//! (falling back to a migration's previous maps), advancing a flow's state
//! and mirroring it into the flow's other entries, and SNAT port
//! allocation. The state machine itself is `lb_common::ct`'s, the port
//! rules `lb_common::nat`'s.

use core::intrinsics::{AtomicOrdering::Relaxed, atomic_cxchg};

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_prandom_u32, bpf_ktime_get_coarse_ns},
};
use lb_common::{
    CFG_F_PREV, CT_F_KERNEL, Ct4Key, Ct4Value, DatapathConfig, NAT_PORT_LINEAR_TRIES,
    NAT_PORT_RANDOM_TRIES, Nat4Key, Nat4Value, PortClaim, Timeouts, ct_advance, nat_claim,
    nat_first_offset,
};

use crate::maps::{LB_CONFIG, LB4_CT, LB4_CT_PREV, LB4_NAT, LB4_NAT_PREV};

/// The boot-time monotonic clock in seconds, as `expires` fields hold it.
#[inline(always)]
pub fn now() -> u32 {
    // SAFETY: the helper has no preconditions.
    (unsafe { bpf_ktime_get_coarse_ns() } / 1_000_000_000) as u32
}

/// The agent's settings (all zero before it wrote any), read in place.
/// `None` cannot happen: an array of one always has index 0.
#[inline(always)]
pub fn config() -> Option<&'static DatapathConfig> {
    LB_CONFIG.get(0)
}

/// The `LB4_CT` entry of `key`. During a migration (`CFG_F_PREV`) an entry
/// only the previous map has (the old programs wrote it after the agent
/// copied that map) is carried over first, as this layout keeps it.
#[inline(always)]
pub fn ct_entry(key: &Ct4Key, cfg: &DatapathConfig) -> Option<*mut Ct4Value> {
    if let Some(entry) = LB4_CT.get_ptr_mut(key) {
        return Some(entry);
    }
    if cfg.flags & CFG_F_PREV == 0 {
        return None;
    }
    let old = LB4_CT_PREV.get_value_ptr_mut(0, key)?;
    // SAFETY: the value stays mapped while the program runs (RCU).
    let value = unsafe { *old }.upgraded(key.dir);
    // A CPU that carried it over first wins; either copy is the same flow.
    let _ = LB4_CT.insert(key, value, u64::from(BPF_NOEXIST));
    LB4_CT.get_ptr_mut(key)
}

/// The `LB4_NAT` entry of `key`, carried over as [`ct_entry`] does.
#[inline(always)]
pub fn nat_entry(key: &Nat4Key, cfg: &DatapathConfig) -> Option<*mut Nat4Value> {
    if let Some(entry) = LB4_NAT.get_ptr_mut(key) {
        return Some(entry);
    }
    if cfg.flags & CFG_F_PREV == 0 {
        return None;
    }
    let old = LB4_NAT_PREV.get_value_ptr_mut(0, key)?;
    // SAFETY: as in `ct_entry`.
    let mut value = unsafe { *old };
    // An older layout's TCP state bits: the expiry says all.
    value.flags &= CT_F_KERNEL;
    let _ = LB4_NAT.insert(key, value, u64::from(BPF_NOEXIST));
    LB4_NAT.get_ptr_mut(key)
}

/// Advances the flow of `entry` by a packet of `proto` with `tcp_flags`
/// from the client (`from_client`) or the backend, and stores what
/// changed: that side's byte and the expiry. The entry's value after, and
/// whether anything changed (then the flow's other entries need it too).
/// Most packets change nothing (the expiry moves once a second): storing
/// only then keeps the entry's cache line shared across CPUs.
///
/// # Safety
///
/// `entry` is a value of `LB4_CT` this program looked up: it stays mapped
/// while the program runs (RCU).
#[inline(always)]
pub unsafe fn advance(
    entry: *mut Ct4Value,
    t: &Timeouts,
    proto: u8,
    tcp_flags: u8,
    from_client: bool,
    now: u32,
) -> (Ct4Value, bool) {
    // SAFETY: mapped (the caller's contract); if the LRU recycles it
    // meanwhile the fields are another flow's and this packet goes astray,
    // as it would have with the entry gone.
    let mut v = unsafe { *entry };
    let (c, b) = (v.seen_client, v.seen_backend);
    let a = ct_advance(t, proto, tcp_flags, from_client, c, b, v.expires, now);
    let own = if from_client { c } else { b };
    let changed = a.seen != own || a.expires != v.expires;
    if changed {
        // SAFETY: plain stores to a live element. Each side writes only its
        // own byte, so a packet the other way on another CPU keeps its
        // bits; the later expiry wins, which is what both computed.
        unsafe {
            if from_client {
                (*entry).seen_client = a.seen;
            } else {
                (*entry).seen_backend = a.seen;
            }
            (*entry).expires = a.expires;
        }
        if from_client {
            v.seen_client = a.seen;
        } else {
            v.seen_backend = a.seen;
        }
        v.expires = a.expires;
    }
    (v, changed)
}

/// Writes one side's byte (`from_client`: the client's) and the expiry of
/// `value` into the flow's other `LB4_CT` entry, `key`.
#[inline(always)]
pub fn mirror(key: &Ct4Key, value: &Ct4Value, from_client: bool, cfg: &DatapathConfig) {
    let Some(entry) = ct_entry(key, cfg) else {
        return;
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    unsafe {
        if from_client {
            (*entry).seen_client = value.seen_client;
        } else {
            (*entry).seen_backend = value.seen_backend;
        }
        (*entry).expires = value.expires;
    }
}

/// Gives the SNAT mapping `key` of a flow from `client` the flow's expiry,
/// writing it again if it went (an LRU eviction); whether the mapping is
/// the flow's, not another's.
#[inline(always)]
pub fn hold_nat(
    key: &Nat4Key,
    client: &([u8; 4], u16),
    expires: u32,
    cfg: &DatapathConfig,
) -> bool {
    let Some(nat) = nat_entry(key, cfg) else {
        let value = Nat4Value {
            addr_be: client.0,
            port_be: client.1,
            flags: 0,
            expires,
        };
        return LB4_NAT.insert(key, value, u64::from(BPF_NOEXIST)).is_ok();
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    unsafe {
        if (*nat).addr_be != client.0 || (*nat).port_be != client.1 || (*nat).flags != 0 {
            return false;
        }
        if (*nat).expires != expires {
            (*nat).expires = expires;
        }
    }
    true
}

/// Allocates a SNAT port of `cfg`'s range for a flow from `client` to
/// `backend` (addresses and ports as packets hold them) that expires at
/// `expires`, and records the reply mapping; the port (network byte
/// order), or `None` when every port tried is another live flow's.
#[inline(always)]
pub fn allocate_port(
    cfg: &DatapathConfig,
    backend: ([u8; 4], u16),
    proto: u8,
    client: ([u8; 4], u16),
    expires: u32,
    now: u32,
) -> Option<u16> {
    let (min, max) = (cfg.nat_port_min, cfg.nat_port_max);
    if max < min || cfg.snat4_be == [0; 4] {
        return None;
    }
    let span = u32::from(max - min) + 1;
    let first = nat_first_offset(min, span, &client, cfg.nat_seed);
    let mut key = Nat4Key {
        saddr_be: backend.0,
        daddr_be: cfg.snat4_be,
        sport_be: backend.1,
        dport_be: 0,
        proto,
        _pad0: [0; 3],
    };
    let value = Nat4Value {
        addr_be: client.0,
        port_be: client.1,
        flags: 0,
        expires,
    };
    for i in 0..NAT_PORT_LINEAR_TRIES + NAT_PORT_RANDOM_TRIES {
        let offset = if i < NAT_PORT_LINEAR_TRIES {
            (first + i) % span
        } else {
            // SAFETY: the helper has no preconditions.
            (unsafe { bpf_get_prandom_u32() }) % span
        };
        // Below `max`, a u16.
        key.dport_be = (min + offset as u16).to_be();
        if claim(&key, &value, &client, cfg, now) {
            return Some(key.dport_be);
        }
    }
    None
}

/// Takes the port of `key` for the flow of `value`: free, the same
/// client's, or dead. Two CPUs racing for a dead port both try to swap its
/// owner (client address, port and flags, the value's first 8 bytes) from
/// the one they read; one wins.
#[inline(always)]
fn claim(
    key: &Nat4Key,
    value: &Nat4Value,
    client: &([u8; 4], u16),
    cfg: &DatapathConfig,
    now: u32,
) -> bool {
    let Some(nat) = nat_entry(key, cfg) else {
        return LB4_NAT.insert(key, *value, u64::from(BPF_NOEXIST)).is_ok();
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let old = unsafe { *nat };
    match nat_claim(&old, client, now) {
        PortClaim::Same => {}
        PortClaim::Expired => {
            // SAFETY: the element is live; map values are 8-byte aligned,
            // and its first 8 bytes are the owner fields, plain bytes;
            // the kernel allows atomic operations on map values.
            let (_, won) = unsafe {
                atomic_cxchg::<u64, { Relaxed }, { Relaxed }>(
                    nat.cast::<u64>(),
                    owner(&old),
                    owner(value),
                )
            };
            if !won {
                return false;
            }
        }
        PortClaim::Taken => return false,
    }
    // SAFETY: looked up by this run: mapped while it runs (RCU); the port
    // is this flow's now.
    unsafe { (*nat).expires = value.expires };
    true
}

/// The owner fields of a mapping (client address, port, flags), as its
/// first 8 bytes hold them.
#[inline(always)]
fn owner(v: &Nat4Value) -> u64 {
    let [p0, p1] = v.port_be.to_ne_bytes();
    let [f0, f1] = v.flags.to_ne_bytes();
    let [a0, a1, a2, a3] = v.addr_be;
    u64::from_ne_bytes([a0, a1, a2, a3, p0, p1, f0, f1])
}
