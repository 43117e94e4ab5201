//! IPv6 headers: parsing (extension headers, fragments, ICMPv6 errors) and
//! the checksum rules of address rewrites. IPv6 has no header checksum;
//! every L4 checksum (ICMPv6's too) covers a pseudo-header with both
//! addresses.

use core::mem::MaybeUninit;

use lb_common::{At, FlowHash, Frag6Key, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, Reason};

use super::{Ip, Kind, PSEUDO, Packet, finish, read, write};
use crate::{
    addr::{Addr6, bytes6},
    csum::diff16,
    ctx::PacketCtx,
    maps::LB6_FRAG,
    stats::count,
};

/// Length of the fixed IPv6 header.
pub const IP6_HLEN: usize = 40;
/// Offsets in the IPv6 header.
const IP6_NEXT: usize = 6;
const IP6_SADDR: usize = 8;
const IP6_DADDR: usize = 24;
/// Extension headers the parser walks to find the L4 header.
const NEXTHDR_HOP: u8 = 0;
const NEXTHDR_ROUTING: u8 = 43;
const NEXTHDR_FRAGMENT: u8 = 44;
const NEXTHDR_AUTH: u8 = 51;
const NEXTHDR_DEST: u8 = 60;
/// At most this many extension headers are walked (Cilium's
/// `IPV6_MAX_HEADERS`); a packet with more is passed on and counted.
const MAX_EXT_HEADERS: usize = 4;
/// Fragment header: offset bits (non-zero on every fragment but the
/// first) and the more-fragments bit, host order.
const FRAG_OFFSET_MASK: u16 = 0xfff8;
const FRAG_MF: u16 = 1;

/// Where the walk of the extension headers ended.
struct Walked {
    /// The header after the last extension header walked.
    next: u8,
    /// Its offset.
    off: usize,
    /// The fragment header's offset field and identification, if there
    /// was one.
    frag_off: u16,
    frag_id_be: u32,
}

/// Walks the extension headers from `off` (the first is `next`), at most
/// [`MAX_EXT_HEADERS`] of them, stopping at a later fragment's fragment
/// header (the headers after it are its first fragment's).
#[inline(always)]
fn walk<C: PacketCtx>(ctx: &C, mut next: u8, mut off: usize) -> Option<Walked> {
    let (mut frag_off, mut frag_id_be) = (0u16, 0u32);
    for _ in 0..MAX_EXT_HEADERS {
        match next {
            NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST => {
                let [nh, len]: [u8; 2] = ctx.load(off).ok()?;
                next = nh;
                off += (usize::from(len) + 1) * 8;
            }
            NEXTHDR_AUTH => {
                let [nh, len]: [u8; 2] = ctx.load(off).ok()?;
                next = nh;
                off += (usize::from(len) + 2) * 4;
            }
            NEXTHDR_FRAGMENT => {
                let [nh, _, o0, o1, i0, i1, i2, i3]: [u8; 8] = ctx.load(off).ok()?;
                next = nh;
                off += 8;
                frag_off = u16::from_be_bytes([o0, o1]);
                frag_id_be = u32::from_ne_bytes([i0, i1, i2, i3]);
                if frag_off & FRAG_OFFSET_MASK != 0 {
                    break;
                }
            }
            _ => break,
        }
    }
    Some(Walked {
        next,
        off,
        frag_off,
        frag_id_be,
    })
}

/// Whether `next` is an extension header [`walk`] would step over.
#[inline(always)]
fn is_extension(next: u8) -> bool {
    matches!(
        next,
        NEXTHDR_HOP | NEXTHDR_ROUTING | NEXTHDR_DEST | NEXTHDR_AUTH | NEXTHDR_FRAGMENT
    )
}

/// Parses the IPv6 packet at `L2` into `p`, which it initializes whenever
/// it returns [`Kind::Flow`] or [`Kind::Icmp`].
#[inline(never)]
pub(crate) fn parse<const L2: usize, C: PacketCtx>(
    ctx: &C,
    first: u8,
    p: &mut MaybeUninit<Packet<Addr6>>,
    at: At,
) -> Kind {
    let l3 = L2;
    if first >> 4 != 6 {
        return Kind::Other;
    }
    let (Some(next), Some(saddr), Some(daddr)) = (
        read::<C, true, u8>(ctx, l3 + IP6_NEXT),
        read::<C, true, Addr6>(ctx, l3 + IP6_SADDR),
        read::<C, true, Addr6>(ctx, l3 + IP6_DADDR),
    ) else {
        return Kind::Other;
    };
    // Every field at once (see `ipv4::parse`).
    let p = p.write(Packet {
        in_place: true,
        l3: l3 as u16,
        l4: (l3 + IP6_HLEN) as u16,
        proto: next,
        tcp_flags: 0,
        saddr,
        daddr,
        sport_be: 0,
        dport_be: 0,
        later_fragment: false,
    });
    let mut frag = Frag6Key {
        saddr_be: bytes6(&saddr),
        daddr_be: bytes6(&daddr),
        ..Frag6Key::default()
    };
    if next == PROTO_TCP || next == PROTO_UDP {
        // The common case: the L4 header right behind, read in place.
        return finish::<_, _, C, true>(ctx, p, &LB6_FRAG, &frag, false);
    }
    if next == PROTO_ICMPV6 {
        return Kind::Icmp;
    }
    if !is_extension(next) {
        return Kind::Other;
    }
    let Some(w) = walk(ctx, next, l3 + IP6_HLEN) else {
        return Kind::Other;
    };
    let later = w.frag_off & FRAG_OFFSET_MASK != 0;
    if !later && is_extension(w.next) {
        count::<Addr6>(at, Reason::PassedExtHeaders);
        return Kind::Other;
    }
    p.in_place = false;
    // Below 64 KiB: an offset into one packet.
    p.l4 = w.off as u16;
    if w.next == PROTO_ICMPV6 && !later {
        return Kind::Icmp;
    }
    if w.next != PROTO_TCP && w.next != PROTO_UDP {
        return Kind::Other;
    }
    p.proto = w.next;
    p.later_fragment = later;
    frag.id_be = w.frag_id_be;
    frag.proto = w.next;
    finish::<_, _, C, false>(ctx, p, &LB6_FRAG, &frag, w.frag_off & FRAG_MF != 0)
}

impl Ip for Addr6 {
    const HLEN: usize = IP6_HLEN;
    const SADDR: usize = IP6_SADDR;
    const DADDR: usize = IP6_DADDR;

    #[inline(always)]
    fn fold(&self) -> u32 {
        self[0] ^ self[1] ^ self[2] ^ self[3]
    }

    const AF: u8 = 10;
    const TTL: usize = 7;

    #[inline(always)]
    fn fib_words(&self) -> [u32; 4] {
        *self
    }

    #[inline(always)]
    fn hash(&self, h: FlowHash) -> FlowHash {
        h.word(self[0]).word(self[1]).word(self[2]).word(self[3])
    }

    /// No header checksum: but a device's sum over the whole packet
    /// (`CHECKSUM_COMPLETE`) covers the address, and the L4 checksum's
    /// pseudo-header update that follows takes it out of that sum as IPv4
    /// would need: the address's change goes in here.
    #[inline(always)]
    fn store_addr<C: PacketCtx, const IN_PLACE: bool>(
        ctx: &C,
        l3: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64> {
        write::<C, IN_PLACE, _>(ctx, l3 + off, to)?;
        ctx.sum_changed(diff16(&from, &to));
        Ok(())
    }

    #[inline(always)]
    fn pseudo_csum<C: PacketCtx>(
        ctx: &C,
        csum: usize,
        from: Self,
        to: Self,
        flags: u64,
    ) -> Result<(), i64> {
        // Size 0: `to` is the difference.
        ctx.l4_csum_replace(csum, 0, u64::from(diff16(&from, &to)), PSEUDO | flags)
    }

    #[inline(always)]
    fn icmp_outer<C: PacketCtx>(
        ctx: &C,
        l3: usize,
        icmp_csum: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64> {
        ctx.store(l3 + off, &to)?;
        // As `store_addr`.
        let diff = diff16(&from, &to);
        ctx.sum_changed(diff);
        ctx.l4_csum_replace(icmp_csum, 0, u64::from(diff), PSEUDO)
    }

    #[inline(always)]
    fn icmp_inner<C: PacketCtx>(
        ctx: &C,
        inner_l3: usize,
        icmp_csum: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64> {
        ctx.store(inner_l3 + off, &to)?;
        ctx.l4_csum_replace(icmp_csum, 0, u64::from(diff16(&from, &to)), 0)
    }

    #[inline(always)]
    fn header_ok<C: PacketCtx, const L2: usize>(_ctx: &C, _in_place: bool) -> bool {
        true
    }

    #[inline(always)]
    fn may_fragment<C: PacketCtx>(_ctx: &C, _l3: usize) -> bool {
        false
    }
}
