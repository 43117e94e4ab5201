//! Socket-level load balancing at the cgroup sock_addr hooks.
//!
//! `connect4`/`connect6` and `sendmsg4`/`sendmsg6` translate
//! `frontend:port` into a backend once per connect (or per unconnected
//! datagram); `recvmsg*` and `getpeername*` show the application the
//! frontend again: a TCP socket's from its own storage (`LB_SOCK_REVNAT`),
//! a UDP socket's from `LB4_REVNAT`/`LB6_REVNAT`. There is no per-packet
//! work.
//!
//! An AF_INET6 socket may address an IPv4 frontend as `::ffff:a.b.c.d`. Such
//! an address is IPv4: `connect6` translates it through the IPv4 maps into a
//! v4-mapped backend, and `recvmsg6`/`getpeername6` reverse it as IPv4. An unconnected send to one never reaches `sendmsg6`: the
//! kernel hands it to the IPv4 path first, and `sendmsg4` translates it
//! (after `sendmsg6`, the kernel refuses any v4-mapped destination, so no
//! program could translate there). A family is never translated into the
//! other.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_netns_cookie, bpf_get_prandom_u32, bpf_get_socket_cookie, bpf_set_retval},
    macros::cgroup_sock_addr,
    programs::SockAddrContext,
};
use lb_common::{
    Backend4, Backend6, Frontend4Key, Frontend6Key, PROTO_TCP, PROTO_UDP, RevNat4Key, RevNat4Value,
    RevNat6Key, RevNat6Value, SCOPE_INTERNAL, SOCK_REVNAT_V4, SOCK_REVNAT_V6, STAT_AFFINITY_HIT,
    STAT_CONNECT_TRANSLATED, STAT_PASSED_REMOVED, STAT_REFUSED_INCONSISTENT,
    STAT_REFUSED_NO_ENDPOINTS, STAT_REFUSED_NO_LOCAL, STAT_REFUSED_UNKNOWN_PORT, STAT_REVERSED,
    STAT_REVNAT_FAILED, STAT_SENDMSG_TRANSLATED, SockRevNat, addr_bit4, addr_bit6,
};
use lb_ebpf::{
    family::{Family, V4, V6, bytes6, words6},
    lb::{Random, Selection, select},
    maps::{LB_ADDRS, LB_SOCK_REVNAT, LB4_REVNAT, LB4_REVNAT_PREV, LB6_REVNAT, LB6_REVNAT_PREV},
    stats::count,
};

/// Verdicts of a cgroup sock_addr program.
const ALLOW: i32 = 1;
const DENY: i32 = 0;
const ECONNREFUSED: i32 = 111;
const EHOSTUNREACH: i32 = 113;

#[cgroup_sock_addr(connect4)]
pub(crate) fn lb_connect4(ctx: SockAddrContext) -> i32 {
    verdict(translate4(&ctx), STAT_CONNECT_TRANSLATED)
}

#[cgroup_sock_addr(sendmsg4)]
pub(crate) fn lb_sendmsg4(ctx: SockAddrContext) -> i32 {
    verdict(translate4(&ctx), STAT_SENDMSG_TRANSLATED)
}

#[cgroup_sock_addr(recvmsg4)]
pub(crate) fn lb_recvmsg4(ctx: SockAddrContext) -> i32 {
    reverse4(&ctx, Peer::Udp)
}

#[cgroup_sock_addr(getpeername4)]
pub(crate) fn lb_getpeername4(ctx: SockAddrContext) -> i32 {
    reverse4(&ctx, Peer::Any)
}

#[cgroup_sock_addr(connect6)]
pub(crate) fn lb_connect6(ctx: SockAddrContext) -> i32 {
    verdict(translate6(&ctx), STAT_CONNECT_TRANSLATED)
}

#[cgroup_sock_addr(sendmsg6)]
pub(crate) fn lb_sendmsg6(ctx: SockAddrContext) -> i32 {
    verdict(translate6(&ctx), STAT_SENDMSG_TRANSLATED)
}

#[cgroup_sock_addr(recvmsg6)]
pub(crate) fn lb_recvmsg6(ctx: SockAddrContext) -> i32 {
    reverse6(&ctx, Peer::Udp)
}

#[cgroup_sock_addr(getpeername6)]
pub(crate) fn lb_getpeername6(ctx: SockAddrContext) -> i32 {
    reverse6(&ctx, Peer::Any)
}

/// Whose peer a reversing hook shows: a UDP socket's (recvmsg, whose
/// entries are all in the shared maps) or any socket's (getpeername).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Udp,
    Any,
}

/// Why a frontend connect is refused instead of passed on.
enum Refuse {
    NoEndpoints,
    NoLocalEndpoints,
    UnknownPort,
    Inconsistent,
}

/// The program's answer for a translation: allowed (and counted as
/// `translated` if it was), or refused with the errno kube-proxy's rules give.
#[inline(always)]
fn verdict(translation: Result<bool, Refuse>, translated: u32) -> i32 {
    match translation {
        Ok(true) => {
            count(translated);
            ALLOW
        }
        Ok(false) => ALLOW,
        Err(refuse) => {
            let (stat, errno) = match refuse {
                Refuse::NoEndpoints => (STAT_REFUSED_NO_ENDPOINTS, ECONNREFUSED),
                Refuse::UnknownPort => (STAT_REFUSED_UNKNOWN_PORT, ECONNREFUSED),
                Refuse::Inconsistent => (STAT_REFUSED_INCONSISTENT, ECONNREFUSED),
                // kube-proxy drops here and the client hangs until its
                // timeout; failing at once, distinctly, is deliberate.
                Refuse::NoLocalEndpoints => (STAT_REFUSED_NO_LOCAL, EHOSTUNREACH),
            };
            count(stat);
            // ECONNREFUSED rather than the default EPERM, as kube-proxy's REJECT.
            // SAFETY: the helper exists for cgroup sock_addr programs (kernel >= 5.18).
            unsafe { bpf_set_retval(-errno) };
            DENY
        }
    }
}

/// The protocol number of a balanced protocol; `None` for any other.
#[inline(always)]
fn balanced(proto: u32) -> Option<u8> {
    match proto {
        p if p == u32::from(PROTO_TCP) => Some(PROTO_TCP),
        p if p == u32::from(PROTO_UDP) => Some(PROTO_UDP),
        _ => None,
    }
}

/// A backend of family `F` for `key`; `Ok(None)` leaves the address alone.
#[inline(always)]
fn choose<F: Family>(ctx: &SockAddrContext, key: &F::Key) -> Result<Option<F::Backend>, Refuse> {
    // SAFETY: the helper has no preconditions.
    let rand = Random(unsafe { bpf_get_prandom_u32() });
    // SAFETY: the helper is valid for sock_addr contexts (kernel >= 5.7).
    let client = || unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    match select::<F>(key, true, &rand, client) {
        Selection::NotFrontend => Ok(None),
        Selection::Removed => {
            count(STAT_PASSED_REMOVED);
            Ok(None)
        }
        Selection::NoEndpoints { .. } => Err(Refuse::NoEndpoints),
        Selection::NoLocalEndpoints { .. } => Err(Refuse::NoLocalEndpoints),
        Selection::UnknownPort => Err(Refuse::UnknownPort),
        Selection::Inconsistent => Err(Refuse::Inconsistent),
        Selection::Backend {
            backend, sticky, ..
        } => {
            if sticky {
                count(STAT_AFFINITY_HIT);
            }
            Ok(Some(backend))
        }
    }
}

/// connect4 / sendmsg4: rewrite `frontend:port` to a random backend of it.
/// Whether the address was translated; an error refuses the call.
#[inline(always)]
fn translate4(ctx: &SockAddrContext) -> Result<bool, Refuse> {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel hands us a valid bpf_sock_addr for the program's run.
    let (proto, ip, port) = unsafe { ((*sa).protocol, (*sa).user_ip4, (*sa).user_port) };
    let Some(proto) = balanced(proto) else {
        return Ok(false);
    };
    // user_ip4/user_port hold network-order bytes in memory; keep those bytes.
    if !maybe_frontend(addr_bit4(ip.to_ne_bytes())) {
        return Ok(false);
    }
    let key = frontend4(ip.to_ne_bytes(), port, proto);
    let Some(backend) = choose::<V4>(ctx, &key)? else {
        return Ok(false);
    };
    remember4(ctx, &key, &backend);
    // SAFETY: user_ip4/user_port are writable in connect4/sendmsg4 (32-bit stores).
    unsafe {
        (*sa).user_ip4 = u32::from_ne_bytes(backend.addr_be);
        (*sa).user_port = u32::from(backend.port_be);
    }
    Ok(true)
}

/// connect6 / sendmsg6: as [`translate4`], for an IPv6 frontend or a
/// v4-mapped IPv4 one.
#[inline(always)]
fn translate6(ctx: &SockAddrContext) -> Result<bool, Refuse> {
    let sa = ctx.sock_addr;
    // SAFETY: as in translate4; user_ip6 is read a 32-bit word at a time.
    let (proto, ip, port) = unsafe {
        let ip = (*sa).user_ip6;
        (
            (*sa).protocol,
            [ip[0], ip[1], ip[2], ip[3]],
            (*sa).user_port,
        )
    };
    let Some(proto) = balanced(proto) else {
        return Ok(false);
    };
    if is_v4_mapped(&ip) {
        if !maybe_frontend(addr_bit4(ip[3].to_ne_bytes())) {
            return Ok(false);
        }
        let key = frontend4(ip[3].to_ne_bytes(), port, proto);
        let Some(backend) = choose::<V4>(ctx, &key)? else {
            return Ok(false);
        };
        remember4(ctx, &key, &backend);
        // SAFETY: user_ip6/user_port are writable in connect6 (32-bit
        // stores); the first three words stay the v4-mapped prefix.
        unsafe {
            (*sa).user_ip6[3] = u32::from_ne_bytes(backend.addr_be);
            (*sa).user_port = u32::from(backend.port_be);
        }
        return Ok(true);
    }
    let addr_be = bytes6(&ip);
    if !maybe_frontend(addr_bit6(&addr_be)) {
        return Ok(false);
    }
    let key = Frontend6Key {
        addr_be,
        port_be: port as u16,
        proto,
        scope: SCOPE_INTERNAL,
    };
    let Some(backend) = choose::<V6>(ctx, &key)? else {
        return Ok(false);
    };
    remember6(ctx, &key, &backend);
    let words = words6(&backend.addr_be);
    // SAFETY: user_ip6/user_port are writable in connect6/sendmsg6 (32-bit stores).
    unsafe {
        (*sa).user_ip6[0] = words[0];
        (*sa).user_ip6[1] = words[1];
        (*sa).user_ip6[2] = words[2];
        (*sa).user_ip6[3] = words[3];
        (*sa).user_port = u32::from(backend.port_be);
    }
    Ok(true)
}

/// Whether the address whose bit is `(word, mask)` may have a frontend: a
/// clear bit in `LB_ADDRS` rules it out without a lookup.
#[inline(always)]
fn maybe_frontend((word, mask): (u32, u64)) -> bool {
    LB_ADDRS.get(word).is_some_and(|w| w & mask != 0)
}

#[inline(always)]
fn frontend4(addr_be: [u8; 4], port: u32, proto: u8) -> Frontend4Key {
    Frontend4Key {
        addr_be,
        // user_port holds the network-order port in its low 16 bits' bytes.
        port_be: port as u16,
        proto,
        scope: SCOPE_INTERNAL,
    }
}

/// `::ffff:0:0/96`, as the words of `user_ip6` hold it.
#[inline(always)]
fn is_v4_mapped(ip: &[u32; 4]) -> bool {
    ip[0] == 0 && ip[1] == 0 && ip[2] == u32::from_ne_bytes([0, 0, 0xff, 0xff])
}

/// Records which frontend this socket addressed, for recvmsg/getpeername.
///
/// A TCP socket keeps it in its own storage, allocated with the socket's
/// memory and freed with it: no shared map to insert into, nothing to
/// evict. A UDP socket's goes to `shared`'s map (LRU), where the stale-UDP
/// reaper finds it by socket cookie (`SOCK_DIAG` reports no socket storage
/// for UDP sockets), and an unconnected socket may have several.
#[inline(always)]
fn remember(ctx: &SockAddrContext, proto: u8, entry: &SockRevNat, shared: impl FnOnce() -> bool) {
    if proto == PROTO_TCP {
        let mut first = *entry;
        // SAFETY: the context's socket is a full socket the hook holds; the
        // kernel copies `first` into the storage if it creates it.
        let mine = unsafe { LB_SOCK_REVNAT.get_or_insert_ptr_mut(ctx, Some(&mut first)) };
        if !mine.is_null() {
            // SAFETY: the storage lives as long as the socket, and only this
            // socket's connect writes it. A fresh one holds `entry` already;
            // an older one held a failed connect's peer.
            unsafe {
                if *mine != *entry {
                    *mine = *entry;
                }
            }
            return;
        }
    }
    // A failed insert costs only the frontend address in recvmsg and
    // getpeername; the connection itself works, so it is counted, not refused.
    if !shared() {
        count(STAT_REVNAT_FAILED);
    }
}

/// [`remember`] for an IPv4 frontend (also one reached as `::ffff:a.b.c.d`).
#[inline(always)]
fn remember4(ctx: &SockAddrContext, key: &Frontend4Key, backend: &Backend4) {
    let entry = SockRevNat {
        backend_be: widen(backend.addr_be),
        frontend_be: widen(key.addr_be),
        backend_port_be: backend.port_be,
        frontend_port_be: key.port_be,
        family: SOCK_REVNAT_V4,
        _pad0: [0; 3],
    };
    remember(ctx, key.proto, &entry, || {
        // SAFETY: the helper is valid for sock_addr contexts.
        let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
        let rev_key = RevNat4Key {
            cookie,
            addr_be: backend.addr_be,
            port_be: backend.port_be,
            _pad0: [0; 2],
        };
        let rev_val = RevNat4Value {
            addr_be: key.addr_be,
            port_be: key.port_be,
            _pad0: [0; 2],
        };
        // A repeated destination (unconnected sends) writes nothing.
        // SAFETY: an LRU value stays mapped while the program runs (RCU).
        let same = LB4_REVNAT
            .get_ptr(rev_key)
            .is_some_and(|v| unsafe { *v } == rev_val);
        same || LB4_REVNAT.insert(rev_key, rev_val, 0).is_ok()
    });
}

/// [`remember4`] for an IPv6 frontend.
#[inline(always)]
fn remember6(ctx: &SockAddrContext, key: &Frontend6Key, backend: &Backend6) {
    let entry = SockRevNat {
        backend_be: backend.addr_be,
        frontend_be: key.addr_be,
        backend_port_be: backend.port_be,
        frontend_port_be: key.port_be,
        family: SOCK_REVNAT_V6,
        _pad0: [0; 3],
    };
    remember(ctx, key.proto, &entry, || {
        // SAFETY: the helper is valid for sock_addr contexts.
        let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
        let rev_key = RevNat6Key {
            cookie,
            addr_be: backend.addr_be,
            port_be: backend.port_be,
            _pad0: [0; 6],
        };
        let rev_val = RevNat6Value {
            addr_be: key.addr_be,
            port_be: key.port_be,
            _pad0: [0; 2],
        };
        // SAFETY: as in remember4.
        let same = LB6_REVNAT
            .get_ptr(rev_key)
            .is_some_and(|v| unsafe { *v } == rev_val);
        same || LB6_REVNAT.insert(rev_key, rev_val, 0).is_ok()
    });
}

/// An IPv4 address in the first four bytes of a [`SockRevNat`] address.
#[inline(always)]
fn widen(addr: [u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0] = addr[0];
    out[1] = addr[1];
    out[2] = addr[2];
    out[3] = addr[3];
    out
}

/// The frontend this socket's own storage names for `backend`:`port` of
/// `family`.
#[inline(always)]
fn stored(
    ctx: &SockAddrContext,
    peer: Peer,
    family: u8,
    backend: &[u8; 16],
    port: u16,
) -> Option<([u8; 16], u16)> {
    if peer == Peer::Udp {
        return None;
    }
    // SAFETY: the context's socket is a full socket the hook holds.
    let mine = unsafe { LB_SOCK_REVNAT.get_ptr_mut(ctx) };
    if mine.is_null() {
        return None;
    }
    // SAFETY: the storage lives as long as the socket (see remember).
    let e = unsafe { *mine };
    (e.family == family && e.backend_port_be == port && e.backend_be == *backend)
        .then_some((e.frontend_be, e.frontend_port_be))
}

/// The frontend an IPv4 backend stands for on this socket.
#[inline(always)]
fn reversed4(
    ctx: &SockAddrContext,
    peer: Peer,
    addr_be: [u8; 4],
    port: u32,
) -> Option<RevNat4Value> {
    let port_be = port as u16;
    if let Some((frontend, frontend_port)) =
        stored(ctx, peer, SOCK_REVNAT_V4, &widen(addr_be), port_be)
    {
        return Some(RevNat4Value {
            addr_be: [frontend[0], frontend[1], frontend[2], frontend[3]],
            port_be: frontend_port,
            _pad0: [0; 2],
        });
    }
    // SAFETY: the helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let key = RevNat4Key {
        cookie,
        addr_be,
        port_be,
        _pad0: [0; 2],
    };
    // During a migration, a socket the old programs translated after the
    // agent copied their map has its entry only in that map.
    let frontend = LB4_REVNAT.get_ptr(key).or_else(|| {
        LB4_REVNAT_PREV
            .get_value_ptr_mut(0, &key)
            .map(|p| p.cast_const())
    })?;
    // SAFETY: the value stays mapped while the program runs (RCU). An LRU
    // map may recycle the element if it evicts this very entry meanwhile;
    // the address shown would then be wrong, the connection unaffected.
    Some(unsafe { *frontend })
}

/// recvmsg4 / getpeername4: show the frontend the application addressed.
#[inline(always)]
fn reverse4(ctx: &SockAddrContext, peer: Peer) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: valid bpf_sock_addr, see translate4.
    let (ip, port) = unsafe { ((*sa).user_ip4, (*sa).user_port) };
    if let Some(frontend) = reversed4(ctx, peer, ip.to_ne_bytes(), port) {
        // SAFETY: user_ip4/user_port are writable in recvmsg4/getpeername4.
        unsafe {
            (*sa).user_ip4 = u32::from_ne_bytes(frontend.addr_be);
            (*sa).user_port = u32::from(frontend.port_be);
        }
        count(STAT_REVERSED);
    }
    // These hooks cannot refuse; they only rewrite what the application sees.
    ALLOW
}

/// recvmsg6 / getpeername6: [`reverse4`] for IPv6 and v4-mapped peers.
#[inline(always)]
fn reverse6(ctx: &SockAddrContext, peer: Peer) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: valid bpf_sock_addr, see translate6.
    let (ip, port) = unsafe {
        let ip = (*sa).user_ip6;
        ([ip[0], ip[1], ip[2], ip[3]], (*sa).user_port)
    };
    if is_v4_mapped(&ip) {
        if let Some(frontend) = reversed4(ctx, peer, ip[3].to_ne_bytes(), port) {
            // SAFETY: user_ip6/user_port are writable in recvmsg6/getpeername6.
            unsafe {
                (*sa).user_ip6[3] = u32::from_ne_bytes(frontend.addr_be);
                (*sa).user_port = u32::from(frontend.port_be);
            }
            count(STAT_REVERSED);
        }
        return ALLOW;
    }
    let backend = bytes6(&ip);
    if let Some(frontend) = reversed6(ctx, peer, backend, port as u16) {
        let words = words6(&frontend.addr_be);
        // SAFETY: user_ip6/user_port are writable in recvmsg6/getpeername6.
        unsafe {
            (*sa).user_ip6[0] = words[0];
            (*sa).user_ip6[1] = words[1];
            (*sa).user_ip6[2] = words[2];
            (*sa).user_ip6[3] = words[3];
            (*sa).user_port = u32::from(frontend.port_be);
        }
        count(STAT_REVERSED);
    }
    ALLOW
}

/// [`reversed4`] for an IPv6 backend.
#[inline(always)]
fn reversed6(
    ctx: &SockAddrContext,
    peer: Peer,
    addr_be: [u8; 16],
    port_be: u16,
) -> Option<RevNat6Value> {
    if let Some((frontend, frontend_port)) = stored(ctx, peer, SOCK_REVNAT_V6, &addr_be, port_be) {
        return Some(RevNat6Value {
            addr_be: frontend,
            port_be: frontend_port,
            _pad0: [0; 2],
        });
    }
    // SAFETY: the helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let key = RevNat6Key {
        cookie,
        addr_be,
        port_be,
        _pad0: [0; 6],
    };
    let frontend = LB6_REVNAT.get_ptr(key).or_else(|| {
        LB6_REVNAT_PREV
            .get_value_ptr_mut(0, &key)
            .map(|p| p.cast_const())
    })?;
    // SAFETY: as in reversed4.
    Some(unsafe { *frontend })
}
