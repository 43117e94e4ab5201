//! Rejecting a new flow to a frontend without endpoints, as kube-proxy's
//! `REJECT` rules do: a TCP reset, or an ICMP (ICMPv6) port unreachable for
//! UDP, built in place of the packet and sent back out of the device it
//! came in on, from the frontend's address. The ICMP errors are also built
//! for a packet that the DSR option would take over the MTU
//! (fragmentation needed, Packet Too Big; `nodeport`), under the same
//! rate limit.
//!
//! Only packets without IPv4 options or IPv6 extension headers are
//! answered; others are dropped, as are resets (a reset is never
//! answered), and rejects beyond the frontend's rate
//! ([`lb_common::RejectBucket`]), so that a frontend without endpoints
//! cannot be used to reflect spoofed traffic.

use aya_ebpf::{btf_maps::LruHashMap, helpers::bpf_ktime_get_ns};
use lb_common::{
    At, FrontendKey, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, REJECTS_MAX, Reason, RejectBucket,
    TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN,
};

use crate::{
    addr::{Addr6, bytes6},
    csum::{fold, sum_words},
    ctx::{PacketCtx, code, errno},
    packet::{ETH_HLEN, IP_HLEN, IP6_HLEN, Ip, Packet},
    stats::count,
    verdict::Verdict,
};

/// What rejecting needs of an address family: its answers and its map of
/// reject rate limits (`LB4_REJECTS`), which `family` binds.
pub trait RejectMaps {
    /// An address as packets hold it.
    type RejectAddr: Ip + Answer;
    fn rejects()
    -> &'static LruHashMap<FrontendKey<Self::RejectAddr>, RejectBucket, { REJECTS_MAX as usize }>;
}

const TCP_HLEN: usize = 20;
const ICMP_HLEN: usize = 8;
/// What an ICMP error quotes of a UDP datagram: its IP and UDP headers.
const QUOTE4: usize = IP_HLEN + 8;
const QUOTE6: usize = IP6_HLEN + 8;

/// The answers of a family, built over the packet behind an `L2`-byte
/// link-layer header (the headers at constant offsets).
pub trait Answer: Sized {
    /// Rewrites the packet into a TCP reset from its destination, with
    /// the sequence numbers `tcp` computed: 0, or a helper's error. (A
    /// code, not a `Result`: see `nodeport::settle`.)
    fn tcp_reset<const L2: usize, C: PacketCtx>(
        ctx: &C,
        p: &Packet<Self>,
        tcp: &[u8; TCP_HLEN],
    ) -> i64;
    /// Rewrites the packet into an ICMP (ICMPv6) port unreachable quoting
    /// its IP and UDP headers: 0, or a helper's error.
    fn port_unreachable<const L2: usize, C: PacketCtx>(ctx: &C, p: &Packet<Self>) -> i64;
    /// Rewrites the packet into an ICMP fragmentation needed (ICMPv6
    /// Packet Too Big) saying `mtu`, quoting its IP header and the first 8
    /// bytes behind it (the ports): 0, or a helper's error.
    fn too_big<const L2: usize, C: PacketCtx>(ctx: &C, p: &Packet<Self>, mtu: u32) -> i64;
}

/// The verdict of a rejected packet, behind an `L2`-byte link-layer
/// header: sent back as a reset or an ICMP error, or dropped when it
/// cannot be answered or its frontend has sent its share (`limited`: a
/// packet from outside, whose answer could be reflected at a spoofed
/// source; a pod's answer goes back to the pod alone). A function of its
/// own (a BPF-to-BPF call): its buffers are not on the stack of the flows'
/// packets; it returns what fits a register (see `nodeport::settle`).
#[inline(never)]
pub fn reject<const L2: usize, C: PacketCtx, F: RejectMaps>(
    ctx: &C,
    p: &Packet<F::RejectAddr>,
    limited: bool,
) -> Verdict {
    answer::<L2, C, F>(ctx, p, limited).unwrap_or(Verdict::Drop)
}

#[inline(always)]
fn answer<const L2: usize, C: PacketCtx, F: RejectMaps>(
    ctx: &C,
    p: &Packet<F::RejectAddr>,
    limited: bool,
) -> Result<Verdict, i64> {
    if !p.in_place() || p.later_fragment {
        return Ok(Verdict::Drop);
    }
    if p.proto == PROTO_TCP && p.tcp_flags & TCP_RST != 0 {
        return Ok(Verdict::Drop);
    }
    if limited && !allowed::<F>(p) {
        // Rejects answer new flows, at tc ingress.
        count::<F::RejectAddr>(At::TC_IN, Reason::DropRejectRateLimited);
        return Ok(Verdict::Drop);
    }
    let ret = if p.proto == PROTO_TCP {
        let tcp = reset_header(ctx, p)?;
        F::RejectAddr::tcp_reset::<L2, C>(ctx, p, &tcp)
    } else {
        F::RejectAddr::port_unreachable::<L2, C>(ctx, p)
    };
    errno(ret)?;
    if L2 == ETH_HLEN {
        // The frame goes back where it came from.
        let mac: [u8; 12] = ctx.load(0)?;
        let mut swapped = [0u8; 12];
        swapped[..6].copy_from_slice(&mac[6..]);
        swapped[6..].copy_from_slice(&mac[..6]);
        ctx.store(0, &swapped)?;
    }
    Ok(Verdict::Bounce)
}

/// Whether the packet's frontend (its destination) may send one more
/// answer now (a reject, or an ICMP error of its flows); takes its token.
#[inline(always)]
pub(crate) fn allowed<F: RejectMaps>(p: &Packet<F::RejectAddr>) -> bool {
    let key = p.frontend();
    // SAFETY: the helper has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(bucket) = F::rejects().get_ptr_mut(key) {
        // SAFETY: the value stays mapped while the program runs (RCU); a
        // CPU racing on the same bucket may undo a token (the limit is
        // approximate), never more.
        return unsafe { (*bucket).take(now) };
    }
    let mut bucket = RejectBucket::default();
    let allowed = bucket.take(now);
    // An LRU insert fails only without memory: that reject goes uncounted.
    let _ = F::rejects().insert(key, bucket, 0);
    allowed
}

/// The TCP header of the reset Linux's `REJECT --reject-with tcp-reset`
/// sends (`nf_send_reset`): to a segment with ACK, a RST with its
/// acknowledgment as sequence number; else a RST+ACK acknowledging
/// everything it carried. Checksum 0: the family's builder sums it.
#[inline(always)]
fn reset_header<C: PacketCtx, A: Ip>(ctx: &C, p: &Packet<A>) -> Result<[u8; TCP_HLEN], i64> {
    // IPv4: total length; IPv6: payload length (behind no extension header).
    let (len_off, hdr) = if size_of::<A>() == 4 {
        (2, IP_HLEN as u32)
    } else {
        (4, 0)
    };
    let total = u32::from(u16::from_be(ctx.load(p.l3() + len_off)?));
    let data_off: u8 = ctx.load(p.l4() + 12)?;
    let tcp_len = u32::from(data_off >> 4) * 4;
    let payload = total.saturating_sub(hdr + tcp_len);
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
    let mut h = [0u8; TCP_HLEN];
    h[0..2].copy_from_slice(&p.dport_be.to_ne_bytes());
    h[2..4].copy_from_slice(&p.sport_be.to_ne_bytes());
    h[4..8].copy_from_slice(&seq_out.to_be_bytes());
    h[8..12].copy_from_slice(&ack_out.to_be_bytes());
    h[12] = (TCP_HLEN as u8 / 4) << 4;
    h[13] = flags;
    Ok(h)
}

impl Answer for [u8; 4] {
    #[inline(never)]
    fn tcp_reset<const L2: usize, C: PacketCtx>(
        ctx: &C,
        p: &Packet<Self>,
        tcp: &[u8; TCP_HLEN],
    ) -> i64 {
        code((|| {
            let mut h = [0u8; IP_HLEN + TCP_HLEN];
            ipv4_header(&mut h, (IP_HLEN + TCP_HLEN) as u16, PROTO_TCP, p);
            h[IP_HLEN..].copy_from_slice(tcp);
            // The pseudo-header: addresses, protocol, TCP length.
            let mut sum = sum_words(&h[12..20], 0) + u32::from(PROTO_TCP) + TCP_HLEN as u32;
            sum = sum_words(&h[20..], sum);
            h[36..38].copy_from_slice(&fold(sum).to_be_bytes());
            ctx.change_tail((L2 + IP_HLEN + TCP_HLEN) as u32)?;
            ctx.store(L2, &h)
        })())
    }

    #[inline(never)]
    fn port_unreachable<const L2: usize, C: PacketCtx>(ctx: &C, p: &Packet<Self>) -> i64 {
        // Destination unreachable, port unreachable.
        code(icmp4::<L2, C>(ctx, p, error_header(3, 3, 0)))
    }

    #[inline(never)]
    fn too_big<const L2: usize, C: PacketCtx>(ctx: &C, p: &Packet<Self>, mtu: u32) -> i64 {
        // Destination unreachable, fragmentation needed: the next-hop MTU
        // in the low half of the data word.
        code(icmp4::<L2, C>(ctx, p, error_header(3, 4, mtu & 0xffff)))
    }
}

/// Rewrites the IPv4 packet into the ICMP error `icmp` (checksum 0) from
/// its destination to its source, quoting its IP header and 8 bytes.
#[inline(always)]
fn icmp4<const L2: usize, C: PacketCtx>(
    ctx: &C,
    p: &Packet<[u8; 4]>,
    icmp: [u8; ICMP_HLEN],
) -> Result<(), i64> {
    let quote = sum_quote(ctx, p.l3(), QUOTE4)?;
    let mut h = [0u8; IP_HLEN + ICMP_HLEN];
    ipv4_header(&mut h, (IP_HLEN + ICMP_HLEN + QUOTE4) as u16, PROTO_ICMP, p);
    h[IP_HLEN..].copy_from_slice(&icmp);
    let sum = sum_words(&h[IP_HLEN..], quote);
    h[IP_HLEN + 2..IP_HLEN + 4].copy_from_slice(&fold(sum).to_be_bytes());
    ctx.change_tail((L2 + QUOTE4) as u32)?;
    // Room below the link-layer header (none on an L3 device).
    ctx.grow_below_l2((IP_HLEN + ICMP_HLEN) as i32)?;
    ctx.store(L2, &h)
}

/// An ICMP error's header: type, code, checksum 0, and its four bytes of
/// data (IPv4's unused word and next-hop MTU; ICMPv6's MTU).
#[inline(always)]
fn error_header(kind: u8, code: u8, data: u32) -> [u8; ICMP_HLEN] {
    let d = data.to_be_bytes();
    [kind, code, 0, 0, d[0], d[1], d[2], d[3]]
}

/// The one's complement sum of the `len` bytes (a multiple of 4) at `off`
/// that an ICMP error quotes, read a word at a time rather than copied.
#[inline(always)]
fn sum_quote<C: PacketCtx>(ctx: &C, off: usize, len: usize) -> Result<u32, i64> {
    let mut sum = 0u32;
    for i in 0..len / 4 {
        let w: [u8; 4] = ctx.load(off + 4 * i)?;
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        sum += u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    Ok(sum)
}

/// An IPv4 header without options from the packet's destination back to
/// its source (the frontend answers), checksum included.
#[inline(always)]
fn ipv4_header(h: &mut [u8], total: u16, proto: u8, p: &Packet<[u8; 4]>) {
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

impl Answer for Addr6 {
    #[inline(never)]
    fn tcp_reset<const L2: usize, C: PacketCtx>(
        ctx: &C,
        p: &Packet<Self>,
        tcp: &[u8; TCP_HLEN],
    ) -> i64 {
        code((|| {
            let mut h = [0u8; IP6_HLEN + TCP_HLEN];
            ipv6_header(&mut h, TCP_HLEN as u16, PROTO_TCP, p);
            h[IP6_HLEN..].copy_from_slice(tcp);
            // The pseudo-header: addresses, TCP length, next header.
            let mut sum = sum_words(&h[8..40], 0) + TCP_HLEN as u32 + u32::from(PROTO_TCP);
            sum = sum_words(&h[IP6_HLEN..], sum);
            h[IP6_HLEN + 16..IP6_HLEN + 18].copy_from_slice(&fold(sum).to_be_bytes());
            ctx.change_tail((L2 + IP6_HLEN + TCP_HLEN) as u32)?;
            ctx.store(L2, &h)
        })())
    }

    /// ICMPv6 destination unreachable, code 4 (port unreachable), as
    /// ip6tables' `REJECT --reject-with icmp6-port-unreachable` sends.
    #[inline(never)]
    fn port_unreachable<const L2: usize, C: PacketCtx>(ctx: &C, p: &Packet<Self>) -> i64 {
        code(icmp6::<L2, C>(ctx, p, error_header(1, 4, 0)))
    }

    /// ICMPv6 Packet Too Big (type 2, code 0) with the MTU.
    #[inline(never)]
    fn too_big<const L2: usize, C: PacketCtx>(ctx: &C, p: &Packet<Self>, mtu: u32) -> i64 {
        code(icmp6::<L2, C>(ctx, p, error_header(2, 0, mtu)))
    }
}

/// Rewrites the IPv6 packet into the ICMPv6 error `icmp` (checksum 0) from
/// its destination to its source, quoting its IP header and 8 bytes.
#[inline(always)]
fn icmp6<const L2: usize, C: PacketCtx>(
    ctx: &C,
    p: &Packet<Addr6>,
    icmp: [u8; ICMP_HLEN],
) -> Result<(), i64> {
    let quote = sum_quote(ctx, p.l3(), QUOTE6)?;
    let mut h = [0u8; IP6_HLEN + ICMP_HLEN];
    let len = (ICMP_HLEN + QUOTE6) as u16;
    ipv6_header(&mut h, len, PROTO_ICMPV6, p);
    h[IP6_HLEN..].copy_from_slice(&icmp);
    let mut sum = sum_words(&h[8..40], quote) + u32::from(len) + u32::from(PROTO_ICMPV6);
    sum = sum_words(&h[IP6_HLEN..], sum);
    h[IP6_HLEN + 2..IP6_HLEN + 4].copy_from_slice(&fold(sum).to_be_bytes());
    ctx.change_tail((L2 + QUOTE6) as u32)?;
    ctx.grow_below_l2((IP6_HLEN + ICMP_HLEN) as i32)?;
    ctx.store(L2, &h)
}

/// An IPv6 header from the packet's destination back to its source, for
/// `payload` bytes of `next`.
#[inline(always)]
fn ipv6_header(h: &mut [u8], payload: u16, next: u8, p: &Packet<Addr6>) {
    h[0] = 0x60;
    h[4..6].copy_from_slice(&payload.to_be_bytes());
    h[6] = next;
    h[7] = 64;
    h[8..24].copy_from_slice(&bytes6(&p.daddr));
    h[24..40].copy_from_slice(&bytes6(&p.saddr));
}
