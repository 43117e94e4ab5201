//! Direct server return (Cilium's native-routing DSR with the `opt`
//! dispatch): the node that load-balances a flow to a backend on another
//! node sends its packets DNATed but not SNATed, each carrying the frontend
//! in an IPv4 option or an IPv6 destination-options header; the backend's
//! node takes it out, remembers the frontend for the flow, and gives the
//! backend's replies the frontend as their source, so they go straight to
//! the client.
//!
//! IPv4: Cilium's option, type `0x9a` (copied into fragments), length 8,
//! the frontend's port and address in network byte order, right behind the
//! fixed 20 bytes of the header, before any option the packet had.
//! IPv6: Cilium's destination-options header of 24 bytes right behind the
//! fixed 40 (so before any other extension header, and in every fragment):
//! the next header, length 2, option type `0x1b` (skipped by a node that
//! does not know it), option length 20, the frontend's address and port,
//! two bytes of padding. Every packet of the flow carries it, so that the
//! backend's node (re)learns the flow from any of them.

use lb_common::{PROTO_TCP, TCP_SYN};

use crate::{
    ctx::PacketCtx,
    packet::{IP_HLEN, IP6_HLEN, Ip, Packet},
};

/// The IPv4 option's type and length.
pub const DSR_OPT_TYPE: u8 = 0x9a;
pub const DSR_OPT_LEN: u8 = 8;
/// The IPv6 destination-options header: its length in bytes, its length
/// field (8-byte units beyond the first), and its option's type and length.
const DSR6_EXT_BYTES: u8 = 24;
const DSR6_EXT_LEN: u8 = 2;
const DSR6_OPT_TYPE: u8 = 0x1b;
const DSR6_OPT_LEN: u8 = 20;
/// Offsets in the IPv6 header, and its next-header value for destination
/// options.
const IP6_PAYLOAD_LEN: usize = 4;
const IP6_NEXT: usize = 6;
const NEXTHDR_DEST: u8 = 60;
/// Offsets in the IPv4 header.
const IP_TOT_LEN: usize = 2;
const IP_CSUM: usize = 10;
/// The longest IPv4 header, in 32-bit words.
const IHL_MAX: u8 = 15;
/// TCP's MSS option: kind and length.
const TCP_OPT_MSS: [u8; 2] = [2, 4];

/// How many bytes the frontend adds to a packet of family `A`.
#[inline(always)]
pub const fn growth<A>() -> u16 {
    if size_of::<A>() == 4 {
        DSR_OPT_LEN as u16
    } else {
        DSR6_EXT_BYTES as u16
    }
}

/// Inserts the frontend into the packet whose IP header is at `L2`. An
/// error (IPv4: no room left for options, so the flow cannot go DSR) drops
/// the packet.
#[inline(always)]
pub fn insert<const L2: usize, C: PacketCtx, A: Ip>(
    ctx: &C,
    frontend: (A, u16),
) -> Result<(), i64> {
    if size_of::<A>() != 4 {
        return insert6::<L2, C, A>(ctx, frontend);
    }
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
    resize4::<L2, C>(ctx, head, tot_len, words, true)
}

/// Writes the IPv4 header at `L2` two words longer (`grown`) or shorter
/// than `head` (its first two bytes) and `tot_len` said, and updates its
/// checksum for that and for the option's `words` coming or going.
#[inline(always)]
fn resize4<const L2: usize, C: PacketCtx>(
    ctx: &C,
    head: [u8; 2],
    tot_len: u16,
    words: [u32; 2],
    grown: bool,
) -> Result<(), i64> {
    let (ihl, len) = (head[0], u16::from_be(tot_len));
    let (new_head, new_len) = if grown {
        ([ihl + 2, head[1]], len + u16::from(DSR_OPT_LEN))
    } else {
        ([ihl - 2, head[1]], len - u16::from(DSR_OPT_LEN))
    };
    let new_len = new_len.to_be();
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
    for w in words {
        let (from, to) = if grown { (0, w) } else { (w, 0) };
        ctx.l3_csum_replace(csum, u64::from(from), u64::from(to), 4)?;
    }
    Ok(())
}

/// The IPv6 half of [`insert`]: the destination-options header, the fixed
/// header's next header and payload length updated (IPv6 has no header
/// checksum, and the L4 checksum covers neither).
#[inline(always)]
fn insert6<const L2: usize, C: PacketCtx, A: Ip>(ctx: &C, frontend: (A, u16)) -> Result<(), i64> {
    let next: u8 = ctx.load(L2 + IP6_NEXT)?;
    let payload_len: u16 = ctx.load(L2 + IP6_PAYLOAD_LEN)?;
    // The room comes as zeros, which a device's complete sum took in; what
    // is written there goes into it with each store.
    ctx.adjust_net(i32::from(DSR6_EXT_BYTES))?;
    let ext = L2 + IP6_HLEN;
    ctx.store_summed(ext, &[next, DSR6_EXT_LEN, DSR6_OPT_TYPE, DSR6_OPT_LEN])?;
    ctx.store_summed(ext + 4, &frontend.0)?;
    ctx.store_summed(ext + 20, &[frontend.1, 0])?;
    ctx.store_summed(L2 + IP6_NEXT, &NEXTHDR_DEST)?;
    let grown = (u16::from_be(payload_len) + u16::from(DSR6_EXT_BYTES)).to_be();
    ctx.store_summed(L2 + IP6_PAYLOAD_LEN, &grown)
}

/// Lowers the MSS a backend's SYN-ACK (TCP `p`) announces to the client by
/// the bytes [`insert`] adds, so that the client's full-sized segments, which
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
    if mss <= 536 + growth::<A>() {
        return Ok(());
    }
    let clamped = (mss - growth::<A>()).to_be();
    ctx.store(l4 + 22, &clamped)?;
    ctx.l4_csum_replace(l4 + 16, u64::from(mss_be), u64::from(clamped), 2)
}

/// The frontend the packet at `L2` carries, if its first IPv4 option, or
/// its first IPv6 extension header, is ours.
#[inline(always)]
pub fn carried<const L2: usize, C: PacketCtx, A: Ip>(ctx: &C) -> Option<(A, u16)> {
    if size_of::<A>() != 4 {
        let next: u8 = ctx.load(L2 + IP6_NEXT).ok()?;
        let [_, len, kind, opt_len]: [u8; 4] = ctx.load(L2 + IP6_HLEN).ok()?;
        if next != NEXTHDR_DEST
            || [len, kind, opt_len] != [DSR6_EXT_LEN, DSR6_OPT_TYPE, DSR6_OPT_LEN]
        {
            return None;
        }
        let addr: A = ctx.load(L2 + IP6_HLEN + 4).ok()?;
        let port_be: u16 = ctx.load(L2 + IP6_HLEN + 20).ok()?;
        return Some((addr, port_be));
    }
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

/// Takes what [`carried`] found out of the packet at `L2`.
#[inline(always)]
pub fn strip<const L2: usize, C: PacketCtx, A>(ctx: &C) -> Result<(), i64> {
    if size_of::<A>() != 4 {
        let next: u8 = ctx.load(L2 + IP6_HLEN)?;
        let payload_len: u16 = ctx.load(L2 + IP6_PAYLOAD_LEN)?;
        // The removed bytes leave a device's complete checksum by the
        // helper; these two fields, which no checksum in the packet
        // covers, by the summed store.
        ctx.adjust_net(-i32::from(DSR6_EXT_BYTES))?;
        ctx.store_summed(L2 + IP6_NEXT, &next)?;
        let shrunk = (u16::from_be(payload_len) - u16::from(DSR6_EXT_BYTES)).to_be();
        return ctx.store_summed(L2 + IP6_PAYLOAD_LEN, &shrunk);
    }
    let head: [u8; 2] = ctx.load(L2)?;
    let tot_len: u16 = ctx.load(L2 + IP_TOT_LEN)?;
    let words: [u32; 2] = ctx.load(L2 + IP_HLEN)?;
    ctx.adjust_net(-i32::from(DSR_OPT_LEN))?;
    resize4::<L2, C>(ctx, head, tot_len, words, false)?;
    // The helper took the option's words out of a device's complete sum,
    // but the header checksum gave them back: the header still sums to
    // all ones, and so does the packet's sum over it.
    ctx.sum_changed(sum_words(words));
    Ok(())
}

/// The one's complement sum of `words`, as `bpf_csum_diff` adds them.
#[inline(always)]
fn sum_words(words: [u32; 2]) -> u32 {
    let sum = u64::from(words[0]) + u64::from(words[1]);
    (sum as u32).wrapping_add((sum >> 32) as u32)
}
