//! Socket-level load balancing at the cgroup sock_addr hooks.
//!
//! `connect4` and `sendmsg4` translate `frontend:port` into a backend once
//! per connect (or per unconnected datagram); `recvmsg4` and `getpeername4`
//! show the application the frontend again. There is no per-packet work.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_netns_cookie, bpf_get_prandom_u32, bpf_get_socket_cookie, bpf_set_retval},
    macros::cgroup_sock_addr,
    programs::SockAddrContext,
};
use lb_common::{
    Backend4, Frontend4Key, PROTO_TCP, PROTO_UDP, RevNat4Key, RevNat4Value, SCOPE_INTERNAL,
    STAT_AFFINITY_HIT, STAT_CONNECT_TRANSLATED, STAT_PASSED_REMOVED, STAT_REFUSED_INCONSISTENT,
    STAT_REFUSED_NO_ENDPOINTS, STAT_REFUSED_NO_LOCAL, STAT_REFUSED_UNKNOWN_PORT, STAT_REVERSED,
    STAT_REVNAT_FAILED, STAT_SENDMSG_TRANSLATED,
};
use lb_ebpf::{
    lb::{Selection, select4},
    maps::LB4_REVNAT,
    stats::count,
};

/// Verdicts of a cgroup sock_addr program.
const ALLOW: i32 = 1;
const DENY: i32 = 0;
const ECONNREFUSED: i32 = 111;
const EHOSTUNREACH: i32 = 113;

#[cgroup_sock_addr(connect4)]
pub fn lb_connect4(ctx: SockAddrContext) -> i32 {
    translate(&ctx, STAT_CONNECT_TRANSLATED)
}

#[cgroup_sock_addr(sendmsg4)]
pub fn lb_sendmsg4(ctx: SockAddrContext) -> i32 {
    translate(&ctx, STAT_SENDMSG_TRANSLATED)
}

#[cgroup_sock_addr(recvmsg4)]
pub fn lb_recvmsg4(ctx: SockAddrContext) -> i32 {
    reverse(&ctx)
}

#[cgroup_sock_addr(getpeername4)]
pub fn lb_getpeername4(ctx: SockAddrContext) -> i32 {
    reverse(&ctx)
}

/// Why a frontend connect is refused instead of passed on.
enum Refuse {
    NoEndpoints,
    NoLocalEndpoints,
    UnknownPort,
    Inconsistent,
}

/// connect4 / sendmsg4: rewrite `frontend:port` to a random backend of it.
#[inline(always)]
fn translate(ctx: &SockAddrContext, translated: u32) -> i32 {
    match try_translate(ctx) {
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

/// Whether the address was translated; an error refuses the call.
#[inline(always)]
fn try_translate(ctx: &SockAddrContext) -> Result<bool, Refuse> {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel hands us a valid bpf_sock_addr for the program's run.
    let (proto, ip, port) = unsafe { ((*sa).protocol, (*sa).user_ip4, (*sa).user_port) };
    let proto = match proto {
        p if p == u32::from(PROTO_TCP) => PROTO_TCP,
        p if p == u32::from(PROTO_UDP) => PROTO_UDP,
        _ => return Ok(false),
    };
    // user_ip4/user_port hold network-order bytes in memory; keep those bytes.
    let key = Frontend4Key {
        addr_be: ip.to_ne_bytes(),
        port_be: port as u16,
        proto,
        scope: SCOPE_INTERNAL,
    };
    // SAFETY: the helper has no preconditions.
    let rand = unsafe { bpf_get_prandom_u32() };
    // SAFETY: the helper is valid for sock_addr contexts (kernel >= 5.7).
    let client = || unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let backend = match select4(&key, rand, client) {
        Selection::NotFrontend => return Ok(false),
        Selection::Removed => {
            count(STAT_PASSED_REMOVED);
            return Ok(false);
        }
        Selection::NoEndpoints => return Err(Refuse::NoEndpoints),
        Selection::NoLocalEndpoints => return Err(Refuse::NoLocalEndpoints),
        Selection::UnknownPort => return Err(Refuse::UnknownPort),
        Selection::Inconsistent => return Err(Refuse::Inconsistent),
        Selection::Backend { backend, sticky } => {
            if sticky {
                count(STAT_AFFINITY_HIT);
            }
            backend
        }
    };
    remember(ctx, &key, &backend);
    // SAFETY: user_ip4/user_port are writable in connect4/sendmsg4 (32-bit stores).
    unsafe {
        (*sa).user_ip4 = u32::from_ne_bytes(backend.addr_be);
        (*sa).user_port = u32::from(backend.port_be);
    }
    Ok(true)
}

/// Records which frontend this socket addressed, for recvmsg/getpeername.
#[inline(always)]
fn remember(ctx: &SockAddrContext, key: &Frontend4Key, backend: &Backend4) {
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
    // A failed insert costs only the frontend address in recvmsg and
    // getpeername; the connection itself works, so it is counted, not refused.
    if LB4_REVNAT.insert(rev_key, rev_val, 0).is_err() {
        count(STAT_REVNAT_FAILED);
    }
}

/// recvmsg4 / getpeername4: show the frontend the application addressed.
#[inline(always)]
fn reverse(ctx: &SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: the helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    // SAFETY: valid bpf_sock_addr, see try_translate.
    let (ip, port) = unsafe { ((*sa).user_ip4, (*sa).user_port) };
    let key = RevNat4Key {
        cookie,
        addr_be: ip.to_ne_bytes(),
        port_be: port as u16,
        _pad0: [0; 2],
    };
    if let Some(frontend) = LB4_REVNAT.get_ptr(key) {
        // SAFETY: the value stays mapped while the program runs (RCU). An LRU
        // map may recycle the element if it evicts this very entry meanwhile;
        // the address shown would then be wrong, the connection unaffected.
        let frontend = unsafe { *frontend };
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
