//! Connection-tracking lifetimes and SNAT port allocation for the tc
//! programs (`LB4_CT`, `LB4_NAT`; the types are in `lb_common::ct`).

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_NOEXIST},
    helpers::{bpf_get_prandom_u32, bpf_ktime_get_coarse_ns},
};
use lb_common::{
    CT_CLOSING_TIMEOUT, CT_F_CLOSING, CT_F_ESTABLISHED, CT_F_RESET, CT_SYN_TIMEOUT, CT_TCP_TIMEOUT,
    DatapathConfig, NAT_PORT_TRIES, Nat4Key, Nat4Value, PROTO_TCP, nat_port_reusable,
};

use crate::{
    maps::LB4_NAT,
    packet::{TCP_FIN, TCP_RST, TCP_SYN},
};

/// The boot-time monotonic clock in seconds, as `expires` fields hold it.
#[inline(always)]
pub fn now() -> u32 {
    // SAFETY: the helper has no preconditions.
    (unsafe { bpf_ktime_get_coarse_ns() } / 1_000_000_000) as u32
}

/// The flags and expiry of an entry after a packet with `tcp_flags` of
/// protocol `proto` went through it: TCP entries live 60 s until their
/// direction sends a packet without SYN (the handshake is done), 6 h then,
/// and 10 s once a FIN or RST was seen (a RST also sets `CT_F_RESET`);
/// everything else lives 60 s.
#[inline(always)]
pub fn lifetime(proto: u8, tcp_flags: u8, flags: u16, now: u32) -> (u16, u32) {
    if proto != PROTO_TCP {
        return (flags, now.wrapping_add(CT_SYN_TIMEOUT));
    }
    let mut flags = flags;
    if tcp_flags & TCP_RST != 0 {
        flags |= CT_F_CLOSING | CT_F_RESET;
    } else if tcp_flags & TCP_FIN != 0 {
        flags |= CT_F_CLOSING;
    } else if tcp_flags & TCP_SYN == 0 {
        flags |= CT_F_ESTABLISHED;
    }
    let timeout = if flags & CT_F_CLOSING != 0 {
        CT_CLOSING_TIMEOUT
    } else if flags & CT_F_ESTABLISHED != 0 {
        CT_TCP_TIMEOUT
    } else {
        CT_SYN_TIMEOUT
    };
    (flags, now.wrapping_add(timeout))
}

/// Allocates a SNAT port of `cfg`'s range for a flow from `client` to
/// `backend` and records the reply mapping; the port (network byte order),
/// or `None` when `NAT_PORT_TRIES` random ports were all taken by live
/// flows.
#[inline(always)]
pub fn allocate_port(
    cfg: &DatapathConfig,
    backend: ([u8; 4], u16),
    proto: u8,
    client: Nat4Value,
    now: u32,
) -> Option<u16> {
    let span = u32::from(cfg.nat_port_max.checked_sub(cfg.nat_port_min)?) + 1;
    let mut key = Nat4Key {
        saddr_be: backend.0,
        daddr_be: cfg.snat4_be,
        sport_be: backend.1,
        dport_be: 0,
        proto,
        _pad0: [0; 3],
    };
    for _ in 0..NAT_PORT_TRIES {
        // SAFETY: the helper has no preconditions.
        let rand = unsafe { bpf_get_prandom_u32() };
        // Below cfg.nat_port_max, a u16.
        let port = cfg.nat_port_min + (rand % span) as u16;
        key.dport_be = port.to_be();
        // A port is taken for this backend only: the key holds the backend,
        // so one port serves many flows, as Linux's own SNAT does.
        if LB4_NAT.insert(key, client, u64::from(BPF_NOEXIST)).is_ok() {
            return Some(key.dport_be);
        }
        // A port whose flow is over goes to this one. Two CPUs taking the
        // same port at the same instant would both get it (the later
        // mapping wins), the price of not locking.
        let over = LB4_NAT.get_ptr(key).is_some_and(|nat| {
            // SAFETY: the value stays mapped while the program runs (RCU).
            nat_port_reusable(unsafe { &*nat }, now)
        });
        if over && LB4_NAT.insert(key, client, u64::from(BPF_ANY)).is_ok() {
            return Some(key.dport_be);
        }
    }
    None
}
