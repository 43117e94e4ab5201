//! Per-packet load balancing of traffic from outside the node, at tc on the
//! node's external devices (`lb_common::ct` describes the halves and the
//! state machine). Each program comes twice: for Ethernet devices, and
//! (`lb_tc_l3_*`) for devices without a link-layer header (WireGuard, IPIP,
//! TUN). Program names stay within the kernel's 15 characters, by which
//! clsact filters are found again.
//!
//! `lb_tc_ingress`: replies of SNATed flows get their client back; packets
//! of known flows are DNATed to their backend; the first packet of a flow
//! to an external frontend (`SCOPE_EXTERNAL`) picks a backend, records the
//! flow in both directions and is DNATed. TCP without SYN and without a
//! flow of ours is left to the kernel, whose conntrack may translate it
//! (kube-proxy's flows, when the agent took over).
//! `lb_tc_egress`: replies to clients get their frontend back as source;
//! packets of `externalTrafficPolicy: Cluster` flows leaving towards a
//! backend on another node are SNATed to the node address.
//!
//! Later fragments of a datagram follow its first one (`packet.rs`). ICMP
//! errors about a translated flow are translated as the packet they quote
//! would be, quote included, so that path-MTU discovery and port
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
    CT_DIR_IN, CT_DIR_OUT, CT_F_KERNEL, CT_F_SNAT, Ct4Key, Ct4Value, DatapathConfig,
    FE_F_EXTERNAL_LOCAL, FE_F_SOURCE_RANGES, Nat4Key, PROTO_TCP, SOURCE_RANGE_PREFIX,
    STAT_PASSED_REMOVED, STAT_REFUSED_INCONSISTENT, STAT_TC_DROP_CT_FULL, STAT_TC_DROP_FRAGMENT,
    STAT_TC_DROP_NO_LOCAL, STAT_TC_DROP_SNAT_EXHAUSTED, STAT_TC_DROP_SOURCE_RANGE,
    STAT_TC_NEW_FLOW, STAT_TC_PASSED_UNTRACKED, STAT_TC_REJECT_NO_ENDPOINTS, SourceRange4, TCP_ACK,
    TCP_SYN, Timeouts, ct_closed, ct_expired, ct_new_expiry, seen_bits,
};
use lb_ebpf::{
    ct::{advance, allocate_port, config, ct_entry, hold_nat, mirror, nat_entry, now},
    lb::{Selection, V4, select},
    maps::{LB4_CT, LB4_FRONTENDS, LB4_SRC_RANGES},
    packet::{ETH_HLEN, Handler, IcmpError4, Packet4, parse},
    reject::reject,
    stats::count,
};

const PASS: i32 = TC_ACT_UNSPEC;
const DROP: i32 = TC_ACT_SHOT;

#[classifier]
pub(crate) fn lb_tc_ingress(ctx: TcContext) -> i32 {
    ingress_program::<ETH_HLEN>(&ctx)
}

#[classifier]
pub(crate) fn lb_tc_egress(ctx: TcContext) -> i32 {
    egress_program::<ETH_HLEN>(&ctx)
}

#[classifier]
pub(crate) fn lb_tc_l3_in(ctx: TcContext) -> i32 {
    ingress_program::<0>(&ctx)
}

#[classifier]
pub(crate) fn lb_tc_l3_out(ctx: TcContext) -> i32 {
    egress_program::<0>(&ctx)
}

/// What ingress does with each packet. A failed rewrite leaves a packet
/// the kernel's checksum checks drop.
struct Ingress<'a, const L2: usize>(&'a TcContext);

impl<const L2: usize> Handler for Ingress<'_, L2> {
    #[inline(always)]
    fn flow(self, p: &mut Packet4) -> i32 {
        ingress::<L2>(self.0, p).unwrap_or(DROP)
    }

    #[inline(always)]
    fn icmp_error(self, e: &mut IcmpError4) -> i32 {
        ingress_icmp(self.0, e).unwrap_or(DROP)
    }

    #[inline(always)]
    fn unknown_fragment(self) -> i32 {
        unknown_fragment()
    }
}

/// What egress does with each packet.
struct Egress<'a, const L2: usize>(&'a TcContext);

impl<const L2: usize> Handler for Egress<'_, L2> {
    #[inline(always)]
    fn flow(self, p: &mut Packet4) -> i32 {
        egress::<L2>(self.0, p).unwrap_or(DROP)
    }

    #[inline(always)]
    fn icmp_error(self, e: &mut IcmpError4) -> i32 {
        egress_icmp(self.0, e).unwrap_or(DROP)
    }

    #[inline(always)]
    fn unknown_fragment(self) -> i32 {
        unknown_fragment()
    }
}

#[inline(always)]
fn ingress_program<const L2: usize>(ctx: &TcContext) -> i32 {
    parse::<L2, _>(ctx, PASS, Ingress::<L2>(ctx))
}

#[inline(always)]
fn egress_program<const L2: usize>(ctx: &TcContext) -> i32 {
    parse::<L2, _>(ctx, PASS, Egress::<L2>(ctx))
}

/// A later fragment whose first one was not seen: its ports are unknown,
/// so whether it is ours is too.
#[inline(always)]
fn unknown_fragment() -> i32 {
    count(STAT_TC_DROP_FRAGMENT);
    DROP
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

/// The `LB4_NAT` key of a packet from `src` to `dst`.
#[inline(always)]
fn nat_key(src: ([u8; 4], u16), dst: ([u8; 4], u16), proto: u8) -> Nat4Key {
    Nat4Key {
        saddr_be: src.0,
        daddr_be: dst.0,
        sport_be: src.1,
        dport_be: dst.1,
        proto,
        _pad0: [0; 3],
    }
}

#[inline(always)]
fn ingress<const L2: usize>(ctx: &TcContext, p: &mut Packet4) -> Result<i32, i64> {
    let now = now();
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    // A reply from a backend on another node to the port its flow was
    // SNATed to: back to the client. Egress then restores the frontend and
    // advances the flow. Only packets to the SNAT address and the ports
    // flows may hold pay the lookup.
    if cfg.snat4_be == p.daddr
        && cfg.nat_reply_port(u16::from_be(p.dport_be))
        && let Some(nat) = nat_entry(&nat_key(p.src(), p.dst(), p.proto), cfg)
    {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let client = unsafe { *nat };
        if !ct_expired(client.expires, now) {
            if client.flags & CT_F_KERNEL != 0 {
                count(STAT_TC_PASSED_UNTRACKED);
                return Ok(PASS);
            }
            p.rewrite::<L2>(ctx, true, client.addr_be, client.port_be)?;
            return Ok(PASS);
        }
    }
    ingress_flow::<L2>(ctx, p, cfg, now)
}

/// A packet from a client: its flow's backend, or a new flow's.
#[inline(always)]
fn ingress_flow<const L2: usize>(
    ctx: &TcContext,
    p: &mut Packet4,
    cfg: &DatapathConfig,
    now: u32,
) -> Result<i32, i64> {
    let t = cfg.timeouts();
    let key = ct_key(p.src(), p.dst(), p.proto, CT_DIR_IN);
    let syn = p.proto == PROTO_TCP && p.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    if let Some(entry) = ct_entry(&key, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let ct = unsafe { *entry };
        let kernel = ct.flags & CT_F_KERNEL != 0;
        // A new connection on the port of a closed flow, or of one the
        // kernel had, is a new flow of ours: it picks a backend again.
        let reopened = syn && (kernel || ct_closed(ct.seen_client, ct.seen_backend));
        if !ct_expired(ct.expires, now) && !reopened {
            if !p.later_fragment {
                // SAFETY: `entry` was looked up in `LB4_CT` by this run.
                let (after, changed) =
                    unsafe { advance(entry, &t, p.proto, p.tcp_flags, true, now) };
                if changed && !kernel {
                    mirror(&key.partner(&ct), &after, true, cfg);
                }
            }
            if kernel {
                // kube-proxy's flow, which the kernel's conntrack translates.
                count(STAT_TC_PASSED_UNTRACKED);
                return Ok(PASS);
            }
            p.rewrite::<L2>(ctx, true, ct.addr_be, ct.port_be)?;
            return Ok(PASS);
        }
    }
    if p.later_fragment {
        // Its first fragment started no flow of ours.
        return Ok(PASS);
    }
    if p.proto == PROTO_TCP && !syn {
        // Only a SYN starts a flow. Anything else without one is a flow
        // the kernel may know (kube-proxy's, when the agent took over) or
        // none: the kernel translates it, or resets it as a reset backend
        // would.
        if is_frontend(p) {
            count(STAT_TC_PASSED_UNTRACKED);
        }
        return Ok(PASS);
    }
    new_flow::<L2>(ctx, p, &key, &t, now)
}

/// Whether the packet is addressed to an external frontend.
#[inline(always)]
fn is_frontend(p: &Packet4) -> bool {
    LB4_FRONTENDS.get_ptr(p.frontend()).is_some()
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
fn new_flow<const L2: usize>(
    ctx: &TcContext,
    p: &mut Packet4,
    key: &Ct4Key,
    t: &Timeouts,
    now: u32,
) -> Result<i32, i64> {
    let frontend = p.frontend();
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
            return reject::<L2>(ctx, p);
        }
        Selection::Inconsistent => {
            count(STAT_REFUSED_INCONSISTENT);
            return Ok(DROP);
        }
        Selection::Backend {
            backend, id, flags, ..
        } => (backend, id, flags),
    };
    if !p.ipv4_checksum_ok::<L2>(ctx) {
        // The stack drops it after us: it must not hold an entry.
        return Ok(PASS);
    }
    let snat = if fe_flags & FE_F_EXTERNAL_LOCAL == 0 {
        CT_F_SNAT
    } else {
        0
    };
    // Whatever its first packet, a new flow lives as if it were a SYN.
    let inbound = Ct4Value {
        addr_be: backend.addr_be,
        port_be: backend.port_be,
        flags: snat,
        seen_client: seen_bits(p.proto, p.tcp_flags),
        backend_id: id,
        expires: ct_new_expiry(t, p.proto, now),
        ..Ct4Value::default()
    };
    let outbound = Ct4Value {
        addr_be: p.daddr,
        port_be: p.dport_be,
        ..inbound
    };
    // Reply side first: a reply can only follow once the packet is sent.
    // An LRU insert fails only without memory; the flow then goes untracked
    // and is dropped rather than sent where its replies cannot be reversed.
    if LB4_CT.insert(key.partner(&inbound), outbound, 0).is_err()
        || LB4_CT.insert(key, inbound, 0).is_err()
    {
        count(STAT_TC_DROP_CT_FULL);
        return Ok(DROP);
    }
    count(STAT_TC_NEW_FLOW);
    p.rewrite::<L2>(ctx, true, backend.addr_be, backend.port_be)?;
    Ok(PASS)
}

#[inline(always)]
fn egress<const L2: usize>(ctx: &TcContext, p: &mut Packet4) -> Result<i32, i64> {
    let now = now();
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    // A reply to a client: restore the frontend it sent to, and advance
    // the flow in all its entries.
    let key = ct_key(p.src(), p.dst(), p.proto, CT_DIR_OUT);
    if let Some(entry) = ct_entry(&key, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let ct = unsafe { *entry };
        if !ct_expired(ct.expires, now) {
            if !p.later_fragment {
                let t = cfg.timeouts();
                // SAFETY: `entry` was looked up in `LB4_CT` by this run.
                let (after, changed) =
                    unsafe { advance(entry, &t, p.proto, p.tcp_flags, false, now) };
                if changed {
                    mirror(&key.partner(&ct), &after, false, cfg);
                    if ct.nat_port_be != 0 {
                        let nat = nat_key(p.src(), (ct.nat_addr_be, ct.nat_port_be), p.proto);
                        hold_nat(&nat, &p.dst(), after.expires, cfg);
                    }
                }
            }
            p.rewrite::<L2>(ctx, false, ct.addr_be, ct.port_be)?;
            return Ok(PASS);
        }
    }
    // A DNATed packet leaving towards its backend: its flow's reply entry
    // is this packet's tuple reversed.
    let reply = ct_key(p.dst(), p.src(), p.proto, CT_DIR_OUT);
    let Some(entry) = ct_entry(&reply, cfg) else {
        return Ok(PASS);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let ct = unsafe { *entry };
    if ct.flags & CT_F_SNAT == 0 || ct_expired(ct.expires, now) {
        return Ok(PASS);
    }
    let client = p.src();
    let (nat_addr, nat_port) = if ct.nat_port_be != 0 {
        (ct.nat_addr_be, ct.nat_port_be)
    } else {
        // The flow's first packet to leave takes a port. A later fragment
        // cannot be first, and a closed flow (stray segments) takes none.
        if p.later_fragment || (p.proto == PROTO_TCP && ct_closed(ct.seen_client, ct.seen_backend))
        {
            return Ok(DROP);
        }
        let Some(port) = allocate_port(cfg, p.dst(), p.proto, client, ct.expires, now) else {
            count(STAT_TC_DROP_SNAT_EXHAUSTED);
            return Ok(DROP);
        };
        // SAFETY: looked up by this run: mapped while it runs (RCU). Two
        // CPUs taking a flow's first packets at once start from the same
        // port, and the second takes over the first's mapping as the same
        // client's: both store the same port.
        unsafe {
            (*entry).nat_addr_be = cfg.snat4_be;
            (*entry).nat_port_be = port;
        }
        (cfg.snat4_be, port)
    };
    // The reply mapping lives as long as the flow. One lost to another
    // flow (evicted from a full map, then taken) cannot be the flow's any
    // more: its next packet takes a new port.
    let nat = nat_key(p.dst(), (nat_addr, nat_port), p.proto);
    if !hold_nat(&nat, &client, ct.expires, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        unsafe { (*entry).nat_port_be = 0 };
        count(STAT_TC_DROP_SNAT_EXHAUSTED);
        return Ok(DROP);
    }
    p.rewrite::<L2>(ctx, false, nat_addr, nat_port)?;
    Ok(PASS)
}

/// An ICMP error arriving at the node about a packet of a translated flow.
#[inline(always)]
fn ingress_icmp(ctx: &TcContext, e: &mut IcmpError4) -> Result<i32, i64> {
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    // About a packet SNATed towards a remote backend (the quote runs
    // node:port -> backend): it is for the client.
    if let Some(nat) = nat_entry(&nat_key(e.inner_dst(), e.inner_src(), e.proto), cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let client = unsafe { *nat };
        if client.flags & CT_F_KERNEL != 0 {
            return Ok(PASS);
        }
        e.rewrite_inner(ctx, false, client.addr_be, client.port_be)?;
        e.rewrite_outer(ctx, true, client.addr_be)?;
        // Egress, on the way to the client, restores the frontend.
        return Ok(PASS);
    }
    // About a reply the client got (the quote runs frontend -> client): it
    // is for the backend, whose socket sent the reply. Only the DNAT half
    // is undone here: the kernel's conntrack, which saw the flow's packets
    // between the halves (client <-> backend), takes the error for one of
    // that flow's only so (a firewall dropping INVALID packets would drop
    // it otherwise); egress undoes the SNAT half.
    let inbound = ct_key(e.inner_dst(), e.inner_src(), e.proto, CT_DIR_IN);
    let Some(entry) = ct_entry(&inbound, cfg) else {
        return Ok(PASS);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let backend = unsafe { *entry };
    if backend.flags & CT_F_KERNEL != 0 {
        return Ok(PASS);
    }
    e.rewrite_inner(ctx, false, backend.addr_be, backend.port_be)?;
    e.rewrite_outer(ctx, true, backend.addr_be)?;
    Ok(PASS)
}

/// An ICMP error leaving the node about a translated flow: for a client,
/// about a packet DNATed to a backend (the quote runs client -> backend),
/// the client must see its frontend; for a remote backend, about its reply
/// (the quote runs backend -> client, as ingress left it), the backend must
/// see the node's SNAT port it sent to.
#[inline(always)]
fn egress_icmp(ctx: &TcContext, e: &mut IcmpError4) -> Result<i32, i64> {
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    let outbound = ct_key(e.inner_dst(), e.inner_src(), e.proto, CT_DIR_OUT);
    if let Some(entry) = ct_entry(&outbound, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let frontend = unsafe { *entry };
        let backend = e.inner_daddr;
        e.rewrite_inner(ctx, true, frontend.addr_be, frontend.port_be)?;
        // An error the backend itself sent (port unreachable) must not show
        // the client the backend's address either.
        if e.saddr == backend {
            e.rewrite_outer(ctx, false, frontend.addr_be)?;
        }
        return Ok(PASS);
    }
    if e.daddr != e.inner_saddr {
        return Ok(PASS);
    }
    let reply = ct_key(e.inner_src(), e.inner_dst(), e.proto, CT_DIR_OUT);
    let Some(entry) = ct_entry(&reply, cfg) else {
        return Ok(PASS);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let (nat_addr, nat_port) = unsafe { ((*entry).nat_addr_be, (*entry).nat_port_be) };
    if nat_port != 0 {
        e.rewrite_inner(ctx, true, nat_addr, nat_port)?;
    }
    Ok(PASS)
}
