//! Direct server return, IPv4 (Cilium's native-routing DSR with the `opt`
//! dispatch): the node that load-balances a flow to a backend on another
//! node sends its packets DNATed but not SNATed, each carrying the frontend
//! in an IPv4 option; the backend's node takes the option out, remembers
//! the frontend for the flow, and gives the backend's replies the frontend
//! as their source, so they go straight to the client.
//!
//! The option is Cilium's: type `0x9a` (copied into fragments), length 8,
//! the frontend's port and address in network byte order. It goes right
//! behind the fixed 20 bytes of the header, before any option the packet
//! had. Every packet of the flow carries it, so that the backend's node
//! (re)learns the flow from any of them.

use lb_common::{PROTO_TCP, TCP_SYN};

use crate::{
    ctx::PacketCtx,
    packet::{IP_HLEN, Ip, Packet},
};

/// The option's type and length.
pub const DSR_OPT_TYPE: u8 = 0x9a;
pub const DSR_OPT_LEN: u8 = 8;
/// Offsets in the IPv4 header.
const IP_TOT_LEN: usize = 2;
const IP_CSUM: usize = 10;
/// The longest IPv4 header, in 32-bit words.
const IHL_MAX: u8 = 15;
/// TCP's MSS option: kind and length.
const TCP_OPT_MSS: [u8; 2] = [2, 4];

/// Inserts the option carrying `frontend` into the IPv4 packet whose
/// header is at `L2`. An error (no room left for options: the flow cannot
/// go DSR) drops the packet.
#[inline(always)]
pub fn insert<const L2: usize, C: PacketCtx, A: Ip>(
    ctx: &C,
    frontend: (A, u16),
) -> Result<(), i64> {
    let head: [u8; 2] = ctx.load(L2)?;
    if head[0] & 0x0f > IHL_MAX - 2 {
        return Err(-1);
    }
    let tot_len: u16 = ctx.load(L2 + IP_TOT_LEN)?;
    ctx.adjust_net(i32::from(DSR_OPT_LEN))?;
    let opt_head = [DSR_OPT_TYPE, DSR_OPT_LEN];
    ctx.store(L2 + IP_HLEN, &opt_head)?;
    ctx.store(L2 + IP_HLEN + 2, &frontend.1)?;
    ctx.store(L2 + IP_HLEN + 4, &frontend.0)?;
    let words: [u32; 2] = ctx.load(L2 + IP_HLEN)?;
    let new_head = [head[0] + 2, head[1]];
    let new_len = (u16::from_be(tot_len) + u16::from(DSR_OPT_LEN)).to_be();
    ctx.store(L2, &new_head)?;
    ctx.store(L2 + IP_TOT_LEN, &new_len)?;
    let csum = L2 + IP_CSUM;
    ctx.l3_csum_replace(
        csum,
        u64::from(u16::from_ne_bytes(head)),
        u64::from(u16::from_ne_bytes(new_head)),
        2,
    )?;
    ctx.l3_csum_replace(csum, u64::from(tot_len), u64::from(new_len), 2)?;
    ctx.l3_csum_replace(csum, 0, u64::from(words[0]), 4)?;
    ctx.l3_csum_replace(csum, 0, u64::from(words[1]), 4)
}

/// Lowers the MSS a backend's SYN-ACK (TCP `p`) announces to the client by
/// the option's length, so that the client's full-sized segments, which
/// carry the option from the load-balancing node on, still fit the MTU.
/// Only where the MSS option comes first, as Linux, BSD and Windows send
/// it; a SYN-ACK without one, or with it elsewhere, is left as it is.
#[inline(always)]
pub fn clamp_mss<C: PacketCtx, A: Ip>(ctx: &C, p: &Packet<A>) -> Result<(), i64> {
    if p.proto != PROTO_TCP || p.tcp_flags & TCP_SYN == 0 || p.later_fragment {
        return Ok(());
    }
    let l4 = p.l4();
    let doff: u8 = ctx.load(l4 + 12)?;
    if doff >> 4 < 6 {
        return Ok(());
    }
    let kind: [u8; 2] = ctx.load(l4 + 20)?;
    if kind != TCP_OPT_MSS {
        return Ok(());
    }
    let mss_be: u16 = ctx.load(l4 + 22)?;
    let mss = u16::from_be(mss_be);
    // Below IPv4's minimum of 536 plus ours, leave it: tiny already.
    if mss <= 536 + u16::from(DSR_OPT_LEN) {
        return Ok(());
    }
    let clamped = (mss - u16::from(DSR_OPT_LEN)).to_be();
    ctx.store(l4 + 22, &clamped)?;
    ctx.l4_csum_replace(l4 + 16, u64::from(mss_be), u64::from(clamped), 2)
}

/// The frontend the IPv4 packet at `L2` carries in the option, if its
/// first option is ours.
#[inline(always)]
pub fn carried<const L2: usize, C: PacketCtx, A: Ip>(ctx: &C) -> Option<(A, u16)> {
    let ver_ihl: u8 = ctx.load(L2).ok()?;
    if ver_ihl & 0x0f < 7 {
        return None;
    }
    let opt_head: [u8; 2] = ctx.load(L2 + IP_HLEN).ok()?;
    if opt_head != [DSR_OPT_TYPE, DSR_OPT_LEN] {
        return None;
    }
    let port_be: u16 = ctx.load(L2 + IP_HLEN + 2).ok()?;
    let addr: A = ctx.load(L2 + IP_HLEN + 4).ok()?;
    Some((addr, port_be))
}

/// Takes the option [`carried`] found out of the IPv4 packet at `L2`.
#[inline(always)]
pub fn strip<const L2: usize, C: PacketCtx>(ctx: &C) -> Result<(), i64> {
    let head: [u8; 2] = ctx.load(L2)?;
    let tot_len: u16 = ctx.load(L2 + IP_TOT_LEN)?;
    let words: [u32; 2] = ctx.load(L2 + IP_HLEN)?;
    ctx.adjust_net(-i32::from(DSR_OPT_LEN))?;
    let new_head = [head[0] - 2, head[1]];
    let new_len = (u16::from_be(tot_len) - u16::from(DSR_OPT_LEN)).to_be();
    ctx.store(L2, &new_head)?;
    ctx.store(L2 + IP_TOT_LEN, &new_len)?;
    let csum = L2 + IP_CSUM;
    ctx.l3_csum_replace(
        csum,
        u64::from(u16::from_ne_bytes(head)),
        u64::from(u16::from_ne_bytes(new_head)),
        2,
    )?;
    ctx.l3_csum_replace(csum, u64::from(tot_len), u64::from(new_len), 2)?;
    ctx.l3_csum_replace(csum, u64::from(words[0]), 0, 4)?;
    ctx.l3_csum_replace(csum, u64::from(words[1]), 0, 4)
}
