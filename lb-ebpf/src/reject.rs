//! Rejecting a new flow to a frontend without endpoints, as kube-proxy's
//! `REJECT` rules do: a TCP reset, or an ICMP port unreachable for UDP,
//! built in place of the packet and sent back out of the device it came in
//! on (`bpf_redirect` to its egress), from the frontend's address.
//!
//! Only packets without IPv4 options are answered; others are dropped, as
//! are resets (a reset is never answered), and rejects beyond the
//! frontend's rate ([`lb_common::RejectBucket`]), so that a frontend
//! without endpoints cannot be used to reflect spoofed traffic.

use aya_ebpf::{
    EbpfContext as _,
    bindings::{TC_ACT_SHOT, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC},
    helpers::{bpf_ktime_get_ns, bpf_redirect, bpf_skb_change_tail},
    programs::TcContext,
};
use lb_common::{
    PROTO_ICMP, PROTO_TCP, RejectBucket, STAT_TC_DROP_REJECT_LIMIT, TCP_ACK, TCP_FIN, TCP_RST,
    TCP_SYN,
};

use crate::{
    maps::LB4_REJECTS,
    packet::{ETH_HLEN, IP_HLEN, Packet4},
    stats::count,
};

const TCP_HLEN: usize = 20;
/// What an ICMP error quotes of a UDP datagram: its IPv4 and UDP headers.
const QUOTE: usize = IP_HLEN + 8;
const ICMP_HLEN: usize = 8;
const DROP: i32 = TC_ACT_SHOT;

/// The verdict of a rejected packet, behind an `L2`-byte link-layer
/// header: sent back as a reset or an ICMP error, or dropped when it
/// cannot be answered or its frontend has sent its share.
#[inline(always)]
pub fn reject<const L2: usize>(ctx: &TcContext, p: &Packet4) -> Result<i32, i64> {
    if p.l4() - p.l3() != IP_HLEN || p.later_fragment {
        return Ok(DROP);
    }
    if p.proto == PROTO_TCP && p.tcp_flags & TCP_RST != 0 {
        return Ok(DROP);
    }
    if !allowed(p) {
        count(STAT_TC_DROP_REJECT_LIMIT);
        return Ok(DROP);
    }
    if p.proto == PROTO_TCP {
        tcp_reset::<L2>(ctx, p)?;
    } else {
        port_unreachable::<L2>(ctx, p)?;
    }
    if L2 == ETH_HLEN {
        // The frame goes back where it came from.
        let mac: [u8; 12] = ctx.load(0)?;
        let mut swapped = [0u8; 12];
        swapped[..6].copy_from_slice(&mac[6..]);
        swapped[6..].copy_from_slice(&mac[..6]);
        ctx.store(0, &swapped, 0)?;
    }
    // SAFETY: the context is the program's own skb.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    // SAFETY: the helper has no preconditions; it returns the verdict.
    Ok(unsafe { bpf_redirect(ifindex, 0) } as i32)
}

/// Whether the packet's frontend may send one more reject now; takes its
/// token.
#[inline(always)]
fn allowed(p: &Packet4) -> bool {
    let key = p.frontend();
    // SAFETY: the helper has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(bucket) = LB4_REJECTS.get_ptr_mut(key) {
        // SAFETY: the value stays mapped while the program runs (RCU); a
        // CPU racing on the same bucket may undo a token (the limit is
        // approximate), never more.
        return unsafe { (*bucket).take(now) };
    }
    let mut bucket = RejectBucket::default();
    let allowed = bucket.take(now);
    // An LRU insert fails only without memory: that reject goes uncounted.
    let _ = LB4_REJECTS.insert(key, bucket, 0);
    allowed
}

/// Rewrites the packet into the reset Linux's `REJECT --reject-with
/// tcp-reset` sends (`nf_send_reset`): to a segment with ACK, a RST with
/// its acknowledgment as sequence number; else a RST+ACK acknowledging
/// everything it carried.
#[inline(always)]
fn tcp_reset<const L2: usize>(ctx: &TcContext, p: &Packet4) -> Result<(), i64> {
    let total = u16::from_be(ctx.load(p.l3() + 2)?);
    let data_off: u8 = ctx.load(p.l4() + 12)?;
    let tcp_len = u32::from(data_off >> 4) * 4;
    let payload = u32::from(total).saturating_sub(IP_HLEN as u32 + tcp_len);
    let seq = u32::from_be(ctx.load(p.l4() + 4)?);
    let ack = u32::from_be(ctx.load(p.l4() + 8)?);
    let (seq_out, ack_out, flags) = if p.tcp_flags & TCP_ACK != 0 {
        (ack, 0, TCP_RST)
    } else {
        let syn_fin = u32::from(p.tcp_flags & TCP_SYN != 0) + u32::from(p.tcp_flags & TCP_FIN != 0);
        (
            0,
            seq.wrapping_add(payload).wrapping_add(syn_fin),
            TCP_RST | TCP_ACK,
        )
    };
    let mut h = [0u8; IP_HLEN + TCP_HLEN];
    ipv4_header(&mut h, (IP_HLEN + TCP_HLEN) as u16, PROTO_TCP, p);
    h[20..22].copy_from_slice(&p.dport_be.to_ne_bytes());
    h[22..24].copy_from_slice(&p.sport_be.to_ne_bytes());
    h[24..28].copy_from_slice(&seq_out.to_be_bytes());
    h[28..32].copy_from_slice(&ack_out.to_be_bytes());
    h[32] = (TCP_HLEN as u8 / 4) << 4;
    h[33] = flags;
    // The pseudo-header: addresses, protocol, TCP length.
    let mut sum = sum_words(&h[12..20], 0) + u32::from(PROTO_TCP) + TCP_HLEN as u32;
    sum = sum_words(&h[20..], sum);
    h[36..38].copy_from_slice(&fold(sum).to_be_bytes());
    let len = (L2 + IP_HLEN + TCP_HLEN) as u32;
    // SAFETY: the context is the program's own skb; the helper only
    // changes its length.
    let ret = unsafe { bpf_skb_change_tail(ctx.as_ptr().cast(), len, 0) };
    if ret != 0 {
        return Err(ret);
    }
    ctx.store(L2, &h, 0)?;
    Ok(())
}

/// Rewrites the packet into an ICMP port unreachable quoting its IPv4 and
/// UDP headers, as Linux's `REJECT` (`icmp-port-unreachable`) sends.
#[inline(always)]
fn port_unreachable<const L2: usize>(ctx: &TcContext, p: &Packet4) -> Result<(), i64> {
    let quote: [u8; QUOTE] = ctx.load(p.l3())?;
    let mut h = [0u8; IP_HLEN + ICMP_HLEN];
    ipv4_header(&mut h, (IP_HLEN + ICMP_HLEN + QUOTE) as u16, PROTO_ICMP, p);
    h[20] = 3; // destination unreachable
    h[21] = 3; // port unreachable
    let sum = sum_words(&quote, sum_words(&h[20..], 0));
    h[22..24].copy_from_slice(&fold(sum).to_be_bytes());
    let len = (L2 + QUOTE) as u32;
    // SAFETY: as in `tcp_reset`.
    let ret = unsafe { bpf_skb_change_tail(ctx.as_ptr().cast(), len, 0) };
    if ret != 0 {
        return Err(ret);
    }
    // Room below the link-layer header (none on an L3 device).
    ctx.adjust_room((IP_HLEN + ICMP_HLEN) as i32, BPF_ADJ_ROOM_MAC, 0)?;
    ctx.store(L2, &h, 0)?;
    Ok(())
}

/// An IPv4 header without options from the packet's destination back to
/// its source (the frontend answers), checksum included.
#[inline(always)]
fn ipv4_header(h: &mut [u8], total: u16, proto: u8, p: &Packet4) {
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[6] = 0x40; // don't fragment
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&p.daddr);
    h[16..20].copy_from_slice(&p.saddr);
    let csum = fold(sum_words(&h[..IP_HLEN], 0));
    h[10..12].copy_from_slice(&csum.to_be_bytes());
}

/// `sum` plus the big-endian 16-bit words of `bytes` (an even length).
#[inline(always)]
fn sum_words(bytes: &[u8], mut sum: u32) -> u32 {
    let mut i = 0;
    while i + 1 < bytes.len() {
        sum += u32::from(u16::from_be_bytes([bytes[i], bytes[i + 1]]));
        i += 2;
    }
    sum
}

/// The Internet checksum of a one's complement sum.
#[inline(always)]
fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
