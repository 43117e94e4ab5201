//! Translation logic shared by the four sock_addr programs.

use aya_ebpf::{
    EbpfContext as _,
    helpers::{bpf_get_prandom_u32, bpf_get_socket_cookie, bpf_set_retval},
    programs::SockAddrContext,
};
use lb_common::{PROTO_TCP, PROTO_UDP, RevNat4Key, RevNat4Value, Service4Key};

use crate::{
    ALLOW, DENY,
    maps::{LB4_BACKENDS, LB4_REVNAT, LB4_SERVICES},
};

const ECONNREFUSED: i32 = 111;

/// Why a VIP connect is refused instead of passed on.
enum Refuse {
    /// The frontend exists but has no usable endpoints (kube-proxy REJECTs).
    NoEndpoints,
    /// A slot or backend vanished between lookups; a concurrent update is
    /// half-applied. Refusing beats leaking the VIP to the network.
    Inconsistent,
}

/// connect4 / sendmsg4: rewrite `VIP:port` to a random backend of that frontend.
pub fn translate(ctx: &SockAddrContext) -> i32 {
    match try_translate(ctx) {
        Ok(()) => ALLOW,
        Err(Refuse::NoEndpoints | Refuse::Inconsistent) => {
            // Return ECONNREFUSED rather than the default EPERM, as kube-proxy's REJECT does.
            // SAFETY: helper is valid in cgroup sock_addr programs (kernel >= 5.18).
            unsafe { bpf_set_retval(-ECONNREFUSED) };
            DENY
        }
    }
}

fn try_translate(ctx: &SockAddrContext) -> Result<(), Refuse> {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel hands us a valid bpf_sock_addr for the program's lifetime.
    let (proto, ip, port) = unsafe { ((*sa).protocol, (*sa).user_ip4, (*sa).user_port) };
    let proto = match proto {
        p if p == u32::from(PROTO_TCP) => PROTO_TCP,
        p if p == u32::from(PROTO_UDP) => PROTO_UDP,
        _ => return Ok(()),
    };
    // user_ip4/user_port hold network-order bytes in memory; keep those bytes.
    let mut key = Service4Key {
        vip_be: ip.to_ne_bytes(),
        port_be: port as u16,
        proto,
        ..Service4Key::default()
    };
    // Non-VIP traffic costs exactly this one lookup.
    let Some(frontend) = LB4_SERVICES.get_ptr(key) else {
        return Ok(());
    };
    // SAFETY: hash values stay valid for the duration of the program (RCU).
    let count = unsafe { (*frontend).count };
    if count == 0 {
        return Err(Refuse::NoEndpoints);
    }
    // SAFETY: helper has no preconditions.
    let rand = unsafe { bpf_get_prandom_u32() };
    key.slot = (rand % u32::from(count)) as u16 + 1;
    let slot = LB4_SERVICES.get_ptr(key).ok_or(Refuse::Inconsistent)?;
    // SAFETY: as above.
    let backend_id = unsafe { (*slot).backend_id };
    let backend = LB4_BACKENDS
        .get_ptr(backend_id)
        .ok_or(Refuse::Inconsistent)?;
    // SAFETY: as above.
    let backend = unsafe { *backend };

    // SAFETY: helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let rev_key = RevNat4Key {
        cookie,
        ip_be: backend.ip_be,
        port_be: backend.port_be,
        _pad0: [0; 2],
    };
    let rev_val = RevNat4Value {
        vip_be: key.vip_be,
        port_be: key.port_be,
        _pad0: [0; 2],
    };
    // A failed insert only costs the VIP in recvmsg/getpeername; the
    // connection itself still works, so it is not a reason to refuse.
    let _ = LB4_REVNAT.insert(rev_key, rev_val, 0);

    // SAFETY: user_ip4/user_port are writable in connect4/sendmsg4 (32-bit stores).
    unsafe {
        (*sa).user_ip4 = u32::from_ne_bytes(backend.ip_be);
        (*sa).user_port = u32::from(backend.port_be);
    }
    Ok(())
}

/// recvmsg4 / getpeername4: show the VIP the application addressed.
pub fn reverse(ctx: &SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    // SAFETY: valid bpf_sock_addr, see translate.
    let (ip, port) = unsafe { ((*sa).user_ip4, (*sa).user_port) };
    let key = RevNat4Key {
        cookie,
        ip_be: ip.to_ne_bytes(),
        port_be: port as u16,
        _pad0: [0; 2],
    };
    if let Some(vip) = LB4_REVNAT.get_ptr(key) {
        // SAFETY: the value is valid while the program runs; fields are writable here.
        unsafe {
            let vip = *vip;
            (*sa).user_ip4 = u32::from_ne_bytes(vip.vip_be);
            (*sa).user_port = u32::from(vip.port_be);
        }
    }
    // These hooks cannot refuse; they only rewrite what the application sees.
    ALLOW
}
