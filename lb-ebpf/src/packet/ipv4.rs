//! IPv4 headers: parsing (options, fragments, ICMP errors) and the
//! checksum rules of address rewrites.

use core::mem::MaybeUninit;

use lb_common::{FlowHash, Frag4Key, PROTO_ICMP, PROTO_TCP, PROTO_UDP};

use super::{Ip, Kind, PSEUDO, Packet, finish, icmp, read, write};
use crate::{csum::csum_replace4, ctx::PacketCtx, maps::LB4_FRAG};

/// Offsets in the IPv4 header.
const IP_ID: usize = 4;
const IP_FRAG_OFF: usize = 6;
const IP_PROTO: usize = 9;
pub(super) const IP_CSUM: usize = 10;
const IP_SADDR: usize = 12;
const IP_DADDR: usize = 16;
/// Fragment offset bits of `frag_off` (host order): non-zero on every
/// fragment but the first, which alone carries the ports.
const IP_OFFSET_MASK: u16 = 0x1fff;
/// More fragments follow.
const IP_MF: u16 = 0x2000;
/// Don't fragment.
const IP_DF: u16 = 0x4000;
/// Length of an IPv4 header without options.
pub const IP_HLEN: usize = 20;
/// `ver_ihl` of an IPv4 header without options, the common case: every
/// offset after it is a constant, and the headers are read in place.
pub(crate) const IPV4_NO_OPTIONS: u8 = 0x45;

/// The fields of an IPv4 header the programs use.
pub(super) struct Ipv4 {
    pub(super) ihl: usize,
    pub(super) proto: u8,
    pub(super) saddr: [u8; 4],
    pub(super) daddr: [u8; 4],
    /// Fragment offset (in 8-byte units) and the more-fragments bit, host
    /// order.
    pub(super) frag_off: u16,
}

impl Ipv4 {
    /// A fragment after the first.
    pub(super) fn later_fragment(&self) -> bool {
        self.frag_off & IP_OFFSET_MASK != 0
    }
}

/// The IPv4 header at `l3`; `None` unless it is one.
#[inline(always)]
pub(super) fn header<C: PacketCtx, const IN_PLACE: bool>(
    ctx: &C,
    l3: usize,
    ver_ihl: u8,
) -> Option<Ipv4> {
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4 || ihl < IP_HLEN {
        return None;
    }
    let frag_off: u16 = read::<C, IN_PLACE, _>(ctx, l3 + IP_FRAG_OFF)?;
    Some(Ipv4 {
        ihl,
        proto: read::<C, IN_PLACE, _>(ctx, l3 + IP_PROTO)?,
        saddr: read::<C, IN_PLACE, _>(ctx, l3 + IP_SADDR)?,
        daddr: read::<C, IN_PLACE, _>(ctx, l3 + IP_DADDR)?,
        frag_off: u16::from_be(frag_off),
    })
}

/// Parses the IPv4 packet at `L2` into `p`, which it initializes whenever
/// it returns [`Kind::Flow`] or [`Kind::Icmp`]. Inlined into the program
/// (IPv6's parser is a function of its own): its stack fits beside the
/// steps', and IPv4 saves a call per packet.
#[inline(always)]
pub(crate) fn parse<const L2: usize, const IN_PLACE: bool, C: PacketCtx>(
    ctx: &C,
    ver_ihl: u8,
    p: &mut MaybeUninit<Packet<[u8; 4]>>,
) -> Kind {
    let l3 = L2;
    let Some(ip) = header::<C, IN_PLACE>(ctx, l3, ver_ihl) else {
        return Kind::Other;
    };
    let l4 = l3 + ip.ihl;
    let later = ip.later_fragment();
    // Every field at once, each to its value: zeroing the whole first
    // would be a byte loop (LLVM's memset for BPF).
    let p = p.write(Packet {
        in_place: IN_PLACE,
        // Below 64 KiB: offsets into one packet.
        l3: l3 as u16,
        l4: l4 as u16,
        proto: ip.proto,
        tcp_flags: 0,
        saddr: ip.saddr,
        daddr: ip.daddr,
        sport_be: 0,
        dport_be: 0,
        later_fragment: later,
    });
    if ip.proto == PROTO_ICMP && !later {
        return Kind::Icmp;
    }
    if ip.proto != PROTO_TCP && ip.proto != PROTO_UDP {
        return Kind::Other;
    }
    let Some(id_be) = read::<C, IN_PLACE, u16>(ctx, l3 + IP_ID) else {
        return Kind::Other;
    };
    let frag = Frag4Key {
        saddr_be: ip.saddr,
        daddr_be: ip.daddr,
        id_be,
        proto: ip.proto,
        _pad0: 0,
    };
    finish::<_, _, C, IN_PLACE>(ctx, p, &LB4_FRAG, &frag, ip.frag_off & IP_MF != 0)
}

impl Ip for [u8; 4] {
    const HLEN: usize = IP_HLEN;
    const SADDR: usize = IP_SADDR;
    const DADDR: usize = IP_DADDR;

    #[inline(always)]
    fn fold(&self) -> u32 {
        u32::from_ne_bytes(*self)
    }

    const AF: u8 = 2;
    const TTL: usize = 8;

    #[inline(always)]
    fn fib_words(&self) -> [u32; 4] {
        [u32::from_ne_bytes(*self), 0, 0, 0]
    }

    #[inline(always)]
    fn hash(&self, h: FlowHash) -> FlowHash {
        h.word(u32::from_ne_bytes(*self))
    }

    #[inline(always)]
    fn store_addr<C: PacketCtx, const IN_PLACE: bool>(
        ctx: &C,
        l3: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64> {
        // The IPv4 checksum is always complete: updated here.
        let ip_csum: u16 = read::<C, IN_PLACE, _>(ctx, l3 + IP_CSUM).ok_or(-1_i64)?;
        let (from, to_word) = (u32::from_ne_bytes(from), u32::from_ne_bytes(to));
        write::<C, IN_PLACE, _>(ctx, l3 + off, to)?;
        write::<C, IN_PLACE, _>(ctx, l3 + IP_CSUM, csum_replace4(ip_csum, from, to_word))
    }

    #[inline(always)]
    fn pseudo_csum<C: PacketCtx>(
        ctx: &C,
        csum: usize,
        from: Self,
        to: Self,
        flags: u64,
    ) -> Result<(), i64> {
        let (from, to) = (u32::from_ne_bytes(from), u32::from_ne_bytes(to));
        ctx.l4_csum_replace(csum, u64::from(from), u64::from(to), PSEUDO | flags | 4)
    }

    #[inline(always)]
    fn icmp_outer<C: PacketCtx>(
        ctx: &C,
        l3: usize,
        _icmp_csum: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64> {
        icmp::outer4(ctx, l3, off, from, to)
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
        icmp::inner4(ctx, inner_l3, icmp_csum, off, from, to)
    }

    #[inline(always)]
    fn may_fragment<C: PacketCtx>(ctx: &C, l3: usize) -> bool {
        ctx.load::<u16>(l3 + IP_FRAG_OFF)
            .is_ok_and(|f| u16::from_be(f) & IP_DF == 0)
    }

    /// Whether the IPv4 header checksum is right, where the header has no
    /// options (read in place, cheaply); a header with options is taken as
    /// it is. A packet the stack would drop must not start a flow.
    #[inline(always)]
    fn header_ok<C: PacketCtx, const L2: usize>(ctx: &C, in_place: bool) -> bool {
        if !in_place {
            return true;
        }
        let Some(words) = read::<C, true, [u16; IP_HLEN / 2]>(ctx, L2) else {
            return false;
        };
        let mut sum = 0u32;
        for w in words {
            sum += u32::from(w);
        }
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        sum == 0xffff
    }
}
