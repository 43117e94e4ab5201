//! Per-packet load balancing of traffic from outside the node, at tc on the
//! node's external devices (`lb_common::ct` describes the halves).
//!
//! `lb_tc_ingress`: replies of SNATed flows get their client back; packets
//! of known flows are DNATed to their backend; the first packet of a flow
//! to an external frontend (`SCOPE_EXTERNAL`) picks a backend, records the
//! flow in both directions and is DNATed.
//! `lb_tc_egress`: replies to clients get their frontend back as source;
//! packets of `externalTrafficPolicy: Cluster` flows leaving towards a
//! backend on another node are SNATed to the node address.
//!
//! ICMP errors about a translated flow are translated as the packet they
//! quote would be, quote included, so that path-MTU discovery and port
//! unreachables reach the socket they concern: towards the client (the
//! quote names the backend) and towards the backend (the quote names the
//! frontend, as the client saw the reply).
//!
//! Packets that are none of these are passed on untouched (`TC_ACT_UNSPEC`,
//! which TCX reads as "next program"), as are packets the programs cannot
//! parse.

use aya_ebpf::{
    bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC},
    btf_maps::lpm_trie::Key,
    helpers::bpf_get_prandom_u32,
    macros::classifier,
    programs::TcContext,
};
use lb_common::{
    CT_DIR_IN, CT_DIR_OUT, CT_F_CLOSING, CT_F_RESET, CT_F_SNAT, Ct4Key, Ct4Value,
    FE_F_EXTERNAL_LOCAL, FE_F_SOURCE_RANGES, Frontend4Key, Nat4Key, Nat4Value, SCOPE_EXTERNAL,
    SOURCE_RANGE_PREFIX, STAT_PASSED_REMOVED, STAT_REFUSED_INCONSISTENT, STAT_TC_DROP_NO_LOCAL,
    STAT_TC_DROP_SNAT_EXHAUSTED, STAT_TC_DROP_SOURCE_RANGE, STAT_TC_NEW_FLOW,
    STAT_TC_REJECT_NO_ENDPOINTS, SourceRange4, ct_expired,
};
use lb_ebpf::{
    ct::{allocate_port, lifetime, now},
    lb::{Selection, V4, select},
    maps::{LB_CONFIG, LB4_BACKENDS, LB4_CT, LB4_NAT, LB4_SRC_RANGES},
    packet::{IcmpError4, Packet4, Parsed, TCP_ACK, TCP_SYN},
    reject::reject,
    stats::count,
};

const PASS: i32 = TC_ACT_UNSPEC;
const DROP: i32 = TC_ACT_SHOT;

#[classifier]
pub fn lb_tc_ingress(ctx: TcContext) -> i32 {
    // A failed rewrite leaves a packet the kernel's checksum checks drop.
    match Parsed::parse(&ctx) {
        Some(Parsed::Flow(mut p)) => ingress(&ctx, &mut p).unwrap_or(DROP),
        Some(Parsed::IcmpError(mut e)) => ingress_icmp(&ctx, &mut e).unwrap_or(DROP),
        None => PASS,
    }
}

#[classifier]
pub fn lb_tc_egress(ctx: TcContext) -> i32 {
    match Parsed::parse(&ctx) {
        Some(Parsed::Flow(mut p)) => egress(&ctx, &mut p).unwrap_or(DROP),
        Some(Parsed::IcmpError(mut e)) => egress_icmp(&ctx, &mut e).unwrap_or(DROP),
        None => PASS,
    }
}

/// The `LB4_CT` key of a packet from `src` to `dst` (address, port; as the
/// packet holds them) in direction `dir`.
#[inline(always)]
fn ct_key(src: ([u8; 4], u16), dst: ([u8; 4], u16), proto: u8, dir: u8) -> Ct4Key {
    Ct4Key {
        saddr_be: src.0,
        daddr_be: dst.0,
        sport_be: src.1,
        dport_be: dst.1,
        proto,
        dir,
        _pad0: [0; 2],
    }
}

#[inline(always)]
fn ingress(ctx: &TcContext, p: &mut Packet4) -> Result<i32, i64> {
    let now = now();
    // A reply from a backend on another node to the port its flow was
    // SNATed to: back to the client. Egress restores the frontend. Only
    // packets to the SNAT address and port range pay the lookup.
    let snated = LB_CONFIG.get(0).is_some_and(|c| {
        let port = u16::from_be(p.dport_be);
        c.snat4_be == p.daddr && c.nat_port_min <= port && port <= c.nat_port_max
    });
    if snated && let Some(client) = reverse_snat(p, now) {
        p.rewrite(ctx, true, client.addr_be, client.port_be)?;
        return Ok(PASS);
    }
    ingress_flow(ctx, p, now)
}

/// The client of an SNATed flow whose reply `p` is, its entry refreshed.
#[inline(always)]
fn reverse_snat(p: &Packet4, now: u32) -> Option<Nat4Value> {
    let nat_key = Nat4Key {
        saddr_be: p.saddr,
        daddr_be: p.daddr,
        sport_be: p.sport_be,
        dport_be: p.dport_be,
        proto: p.proto,
        _pad0: [0; 3],
    };
    let nat = LB4_NAT.get_ptr_mut(nat_key)?;
    // SAFETY: the value stays mapped while the program runs (RCU); if the
    // LRU recycles it meanwhile the fields are another flow's and this
    // packet goes astray, as it would have with the entry gone.
    let client = unsafe { *nat };
    let (flags, expires) = lifetime(p.proto, p.tcp_flags, client.flags, now);
    // Most packets change neither (the expiry moves once a second):
    // storing only then keeps the entry's cache line shared across CPUs.
    if (flags, expires) != (client.flags, client.expires) {
        // SAFETY: plain stores to a live element; a racing update of the
        // same flow writes the same kind of value.
        unsafe {
            (*nat).flags = flags;
            (*nat).expires = expires;
        }
    }
    Some(client)
}

/// A packet from a client: its flow's backend, or a new flow's.
#[inline(always)]
fn ingress_flow(ctx: &TcContext, p: &mut Packet4, now: u32) -> Result<i32, i64> {
    let key = ct_key(p.src(), p.dst(), p.proto, CT_DIR_IN);
    if let Some(entry) = LB4_CT.get_ptr_mut(key) {
        // SAFETY: as in `reverse_snat`.
        let ct = unsafe { *entry };
        let syn = p.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
        // A new connection on the port of a closed or dead one is a new
        // flow: it picks a backend again, as in Cilium.
        let reopened = syn && (ct.flags & CT_F_CLOSING != 0 || ct_expired(ct.expires, now));
        // So is a flow whose backend the agent removed: it goes to a
        // current one (a TCP peer there resets it, a UDP one answers).
        if !reopened && backend_alive(&ct) {
            let (flags, expires) = lifetime(p.proto, p.tcp_flags, ct.flags, now);
            if (flags, expires) != (ct.flags, ct.expires) {
                // SAFETY: as in `reverse_snat`.
                unsafe {
                    (*entry).flags = flags;
                    (*entry).expires = expires;
                }
            }
            p.rewrite(ctx, true, ct.addr_be, ct.port_be)?;
            return Ok(PASS);
        }
    }
    new_flow(ctx, p, &key, now)
}

/// Whether the backend a flow was sent to is still one: its id still names
/// its address. The agent deletes an id only a grace period after the
/// last revision naming it went, so a removed endpoint's flows move on.
#[inline(always)]
fn backend_alive(ct: &Ct4Value) -> bool {
    LB4_BACKENDS.get_ptr(ct.backend_id).is_some_and(|b| {
        // SAFETY: backends are never updated in place; the element stays
        // mapped while the program runs (RCU).
        let b = unsafe { *b };
        b.addr_be == ct.addr_be && b.port_be == ct.port_be
    })
}

/// Whether the packet's source is in one of its frontend's source ranges.
/// A frontend that has them but no entry yet (the agent writes the state
/// first) admits nobody: the firewall fails closed.
#[inline(always)]
fn admitted(p: &Packet4) -> bool {
    let key = Key::new(
        SOURCE_RANGE_PREFIX + 32,
        SourceRange4 {
            addr_be: p.daddr,
            port_be: p.dport_be,
            proto: p.proto,
            _pad0: 0,
            src_be: p.saddr,
        },
    );
    LB4_SRC_RANGES.get(&key).is_some()
}

/// The first packet of a flow: pick a backend of its external frontend.
#[inline(always)]
fn new_flow(ctx: &TcContext, p: &mut Packet4, key: &Ct4Key, now: u32) -> Result<i32, i64> {
    let frontend = Frontend4Key {
        addr_be: p.daddr,
        port_be: p.dport_be,
        proto: p.proto,
        scope: SCOPE_EXTERNAL,
    };
    // SAFETY: the helper has no preconditions.
    let rand = unsafe { bpf_get_prandom_u32() };
    // Session affinity by client address, as kube-proxy's ClientIP. The
    // external frontend has its own id, so no socket client shares these.
    let client = u64::from(u32::from_ne_bytes(p.saddr)) | 1 << 32;
    let selection = select::<V4>(&frontend, false, rand, || client);
    // loadBalancerSourceRanges come first, as kube-proxy's firewall does:
    // a source outside them is dropped, endpoints or not.
    if let Selection::Backend { flags, .. }
    | Selection::NoEndpoints { flags }
    | Selection::NoLocalEndpoints { flags } = selection
        && flags & FE_F_SOURCE_RANGES != 0
        && !admitted(p)
    {
        count(STAT_TC_DROP_SOURCE_RANGE);
        return Ok(DROP);
    }
    let (backend, id, fe_flags) = match selection {
        Selection::NotFrontend | Selection::UnknownPort => return Ok(PASS),
        Selection::Removed => {
            count(STAT_PASSED_REMOVED);
            return Ok(PASS);
        }
        Selection::NoLocalEndpoints { .. } => {
            // kube-proxy drops these too (externalTrafficPolicy: Local).
            count(STAT_TC_DROP_NO_LOCAL);
            return Ok(DROP);
        }
        Selection::NoEndpoints { .. } => {
            // kube-proxy rejects these: a reset, or port unreachable.
            count(STAT_TC_REJECT_NO_ENDPOINTS);
            return reject(ctx, p);
        }
        Selection::Inconsistent => {
            count(STAT_REFUSED_INCONSISTENT);
            return Ok(DROP);
        }
        Selection::Backend {
            backend, id, flags, ..
        } => (backend, id, flags),
    };
    let snat = if fe_flags & FE_F_EXTERNAL_LOCAL == 0 {
        CT_F_SNAT
    } else {
        0
    };
    let (flags, expires) = lifetime(p.proto, p.tcp_flags, snat, now);
    let inbound = Ct4Value {
        addr_be: backend.addr_be,
        port_be: backend.port_be,
        flags,
        backend_id: id,
        expires,
        ..Ct4Value::default()
    };
    // The reply direction has seen no packet yet: it starts as a new entry.
    let (out_flags, out_expires) = lifetime(p.proto, TCP_SYN, snat, now);
    let outbound = Ct4Value {
        addr_be: p.daddr,
        port_be: p.dport_be,
        flags: out_flags,
        backend_id: id,
        expires: out_expires,
        ..Ct4Value::default()
    };
    let out_key = ct_key(
        (backend.addr_be, backend.port_be),
        p.src(),
        p.proto,
        CT_DIR_OUT,
    );
    // Reply side first: a reply can only follow once the packet is sent.
    // An LRU insert fails only without memory; the flow then goes untracked
    // and is dropped rather than sent where its replies cannot be reversed.
    if LB4_CT.insert(out_key, outbound, 0).is_err() || LB4_CT.insert(key, inbound, 0).is_err() {
        return Ok(DROP);
    }
    count(STAT_TC_NEW_FLOW);
    p.rewrite(ctx, true, backend.addr_be, backend.port_be)?;
    Ok(PASS)
}

#[inline(always)]
fn egress(ctx: &TcContext, p: &mut Packet4) -> Result<i32, i64> {
    let now = now();
    // A reply to a client: restore the frontend it sent to.
    if let Some(entry) = LB4_CT.get_ptr_mut(ct_key(p.src(), p.dst(), p.proto, CT_DIR_OUT)) {
        // SAFETY: as in `reverse_snat`.
        let ct = unsafe { *entry };
        let (flags, expires) = lifetime(p.proto, p.tcp_flags, ct.flags, now);
        if (flags, expires) != (ct.flags, ct.expires) {
            // SAFETY: as in `reverse_snat`.
            unsafe {
                (*entry).flags = flags;
                (*entry).expires = expires;
            }
        }
        p.rewrite(ctx, false, ct.addr_be, ct.port_be)?;
        return Ok(PASS);
    }
    // A DNATed packet leaving towards its backend: its flow's reply entry
    // is this packet's tuple reversed.
    let reply = ct_key(p.dst(), p.src(), p.proto, CT_DIR_OUT);
    let Some(entry) = LB4_CT.get_ptr_mut(reply) else {
        return Ok(PASS);
    };
    // SAFETY: as in `reverse_snat`.
    let ct = unsafe { *entry };
    if ct.flags & CT_F_SNAT == 0 {
        return Ok(PASS);
    }
    let (nat_addr, nat_port) = if ct.nat_port_be != 0 {
        (ct.nat_addr_be, ct.nat_port_be)
    } else {
        let Some(cfg) = LB_CONFIG.get(0) else {
            return Ok(DROP);
        };
        let client = Nat4Value {
            addr_be: p.saddr,
            port_be: p.sport_be,
            flags: 0,
            expires: lifetime(p.proto, TCP_SYN, 0, now).1,
        };
        let port = if cfg.snat4_be == [0; 4] {
            None
        } else {
            allocate_port(cfg, (p.daddr, p.dport_be), p.proto, client, now)
        };
        let Some(port) = port else {
            count(STAT_TC_DROP_SNAT_EXHAUSTED);
            return Ok(DROP);
        };
        // SAFETY: as in `reverse_snat`. Two CPUs allocating for the same flow at
        // once each store a port; the later one wins and the earlier port's
        // entry ages out unused.
        unsafe {
            (*entry).nat_addr_be = cfg.snat4_be;
            (*entry).nat_port_be = port;
        }
        (cfg.snat4_be, port)
    };
    // The reply mapping lives as long as the flow sends.
    let nat_key = Nat4Key {
        saddr_be: p.daddr,
        daddr_be: nat_addr,
        sport_be: p.dport_be,
        dport_be: nat_port,
        proto: p.proto,
        _pad0: [0; 3],
    };
    if let Some(nat) = LB4_NAT.get_ptr_mut(nat_key) {
        // SAFETY: as in `reverse_snat`.
        unsafe {
            let (flags, sending) = lifetime(p.proto, p.tcp_flags, (*nat).flags, now);
            // The client closing closes the mapping (its port is free at
            // once after a RST, a second on after a FIN); otherwise it is
            // only ever extended: the replies' own state may be closing.
            let ends = CT_F_CLOSING | CT_F_RESET;
            if flags & ends != (*nat).flags & ends || ct_expired((*nat).expires, sending) {
                (*nat).flags = flags;
                (*nat).expires = sending;
            }
        }
    }
    p.rewrite(ctx, false, nat_addr, nat_port)?;
    Ok(PASS)
}

/// An ICMP error arriving at the node about a packet of a translated flow.
#[inline(always)]
fn ingress_icmp(ctx: &TcContext, e: &mut IcmpError4) -> Result<i32, i64> {
    // About a packet SNATed towards a remote backend (the quote runs
    // node:port -> backend): it is for the client.
    let nat_key = Nat4Key {
        saddr_be: e.inner_daddr,
        daddr_be: e.inner_saddr,
        sport_be: e.inner_dport_be,
        dport_be: e.inner_sport_be,
        proto: e.proto,
        _pad0: [0; 3],
    };
    if let Some(nat) = LB4_NAT.get_ptr(nat_key) {
        // SAFETY: as in `reverse_snat`.
        let client = unsafe { *nat };
        e.rewrite_inner(ctx, false, client.addr_be, client.port_be)?;
        e.rewrite_outer(ctx, true, client.addr_be)?;
        // Egress, on the way to the client, restores the frontend.
        return Ok(PASS);
    }
    // About a reply the client got (the quote runs frontend -> client): it
    // is for the backend, whose socket sent the reply.
    let inbound = ct_key(e.inner_dst(), e.inner_src(), e.proto, CT_DIR_IN);
    let Some(entry) = LB4_CT.get_ptr(inbound) else {
        return Ok(PASS);
    };
    // SAFETY: as in `reverse_snat`.
    let backend = unsafe { *entry };
    e.rewrite_inner(ctx, false, backend.addr_be, backend.port_be)?;
    // A SNATed flow's backend sent its reply to the node's port.
    let outbound = ct_key(
        (backend.addr_be, backend.port_be),
        e.inner_dst(),
        e.proto,
        CT_DIR_OUT,
    );
    if let Some(out) = LB4_CT.get_ptr(outbound) {
        // SAFETY: as in `reverse_snat`.
        let (nat_addr, nat_port) = unsafe { ((*out).nat_addr_be, (*out).nat_port_be) };
        if nat_port != 0 {
            e.rewrite_inner(ctx, true, nat_addr, nat_port)?;
        }
    }
    e.rewrite_outer(ctx, true, backend.addr_be)?;
    Ok(PASS)
}

/// An ICMP error leaving for a client about a packet DNATed to a backend
/// (the quote runs client -> backend): the client must see its frontend.
#[inline(always)]
fn egress_icmp(ctx: &TcContext, e: &mut IcmpError4) -> Result<i32, i64> {
    let outbound = ct_key(e.inner_dst(), e.inner_src(), e.proto, CT_DIR_OUT);
    let Some(entry) = LB4_CT.get_ptr(outbound) else {
        return Ok(PASS);
    };
    // SAFETY: as in `reverse_snat`.
    let frontend = unsafe { *entry };
    let backend = e.inner_daddr;
    e.rewrite_inner(ctx, true, frontend.addr_be, frontend.port_be)?;
    // An error the backend itself sent (port unreachable) must not show
    // the client the backend's address either.
    if e.saddr == backend {
        e.rewrite_outer(ctx, false, frontend.addr_be)?;
    }
    Ok(PASS)
}
