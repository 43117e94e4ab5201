//! ICMP and ICMPv6 errors that quote a TCP or UDP packet: destination
//! unreachable (fragmentation needed among them), packet too big, time
//! exceeded. The programs translate them as the packet they quote would
//! be, quote included.

use lb_common::{PROTO_TCP, PROTO_UDP};

use super::{
    Ip,
    ipv4::{self, IP_CSUM},
    ipv6,
};
use crate::ctx::PacketCtx;

/// Offset of the checksum, and of the quoted packet, in an ICMP or ICMPv6
/// header.
const ICMP_CSUM: usize = 2;
const ICMP_QUOTE: usize = 8;
/// ICMP types whose errors quote the packet they are about.
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
const ICMPV6_DEST_UNREACH: u8 = 1;
const ICMPV6_PKT_TOOBIG: u8 = 2;
const ICMPV6_TIME_EXCEED: u8 = 3;

/// An ICMP(v6) error quoting a TCP or UDP packet of the same family.
/// Offsets are 16 bits (a packet is at most 64 KiB): IPv6's addresses are
/// large enough on the programs' 512-byte stack.
#[derive(Default)]
pub struct IcmpError<A> {
    l3: u16,
    l4: u16,
    /// Offset of the quoted IP header, and of its TCP or UDP header.
    inner_l3: u16,
    inner_l4: u16,
    pub saddr: A,
    pub daddr: A,
    /// The quoted packet's protocol, addresses and ports.
    pub proto: u8,
    pub inner_saddr: A,
    pub inner_daddr: A,
    pub inner_sport_be: u16,
    pub inner_dport_be: u16,
}

/// ICMP's type byte at `l4`, and whether it is an error that quotes the
/// packet it is about.
#[inline(always)]
fn is_error<C: PacketCtx>(ctx: &C, l4: usize, v6: bool) -> Option<bool> {
    let t: u8 = ctx.load(l4).ok()?;
    Some(if v6 {
        // Not neighbour discovery, router advertisements or echo.
        t == ICMPV6_DEST_UNREACH || t == ICMPV6_PKT_TOOBIG || t == ICMPV6_TIME_EXCEED
    } else {
        t == ICMP_DEST_UNREACH || t == ICMP_TIME_EXCEEDED
    })
}

impl<A: Ip> IcmpError<A> {
    /// Fills `self` with the ICMP(v6) error at `l4` behind the IP header at
    /// `l3`: whether it is one that quotes a TCP or UDP packet. Copied out
    /// in place: a rare packet, at offsets the verifier cannot bound.
    #[inline(always)]
    pub fn parse<C: PacketCtx>(&mut self, ctx: &C, l3: usize, l4: usize) -> Option<bool> {
        let v6 = size_of::<A>() == 16;
        if !is_error(ctx, l4, v6)? {
            return Some(false);
        }
        let inner_l3 = l4 + ICMP_QUOTE;
        let inner_l4 = if v6 {
            // Only a quote whose TCP or UDP header follows its IPv6 header:
            // the packets the programs translate carry no extension headers
            // when they leave a socket, unless fragmented.
            let first: u8 = ctx.load(inner_l3).ok()?;
            if first >> 4 != 6 {
                return Some(false);
            }
            self.proto = ctx.load(inner_l3 + 6).ok()?;
            inner_l3 + ipv6::IP6_HLEN
        } else {
            let ver_ihl: u8 = ctx.load(inner_l3).ok()?;
            let Some(inner) = ipv4::header::<C, false>(ctx, inner_l3, ver_ihl) else {
                return Some(false);
            };
            // A quoted later fragment carries no ports.
            if inner.later_fragment() {
                return Some(false);
            }
            self.proto = inner.proto;
            inner_l3 + inner.ihl
        };
        if self.proto != PROTO_TCP && self.proto != PROTO_UDP {
            return Some(false);
        }
        ctx.load_into(l3 + A::SADDR, &mut self.saddr).ok()?;
        ctx.load_into(l3 + A::DADDR, &mut self.daddr).ok()?;
        ctx.load_into(inner_l3 + A::SADDR, &mut self.inner_saddr)
            .ok()?;
        ctx.load_into(inner_l3 + A::DADDR, &mut self.inner_daddr)
            .ok()?;
        ctx.load_into(inner_l4, &mut self.inner_sport_be).ok()?;
        ctx.load_into(inner_l4 + 2, &mut self.inner_dport_be).ok()?;
        // Below 64 KiB: offsets into one packet.
        self.l3 = l3 as u16;
        self.l4 = l4 as u16;
        self.inner_l3 = inner_l3 as u16;
        self.inner_l4 = inner_l4 as u16;
        Some(true)
    }

    /// The quoted packet's source address and port.
    pub fn inner_src(&self) -> (A, u16) {
        (self.inner_saddr, self.inner_sport_be)
    }

    /// The quoted packet's destination address and port.
    pub fn inner_dst(&self) -> (A, u16) {
        (self.inner_daddr, self.inner_dport_be)
    }

    /// Rewrites the outer source (`dst` false) or destination address.
    #[inline(always)]
    pub fn rewrite_outer<C: PacketCtx>(&mut self, ctx: &C, dst: bool, addr: A) -> Result<(), i64> {
        let (off, old) = if dst {
            (A::DADDR, self.daddr)
        } else {
            (A::SADDR, self.saddr)
        };
        let (l3, l4) = (usize::from(self.l3), usize::from(self.l4));
        A::icmp_outer(ctx, l3, l4 + ICMP_CSUM, off, old, addr)?;
        if dst {
            self.daddr = addr;
        } else {
            self.saddr = addr;
        }
        Ok(())
    }

    /// Rewrites the quoted packet's source (`dst` false) or destination
    /// address and port, and the checksums over them. The quoted TCP or
    /// UDP checksum is left alone, as receivers do not check it (and the
    /// quote may end before it).
    #[inline(always)]
    pub fn rewrite_inner<C: PacketCtx>(
        &mut self,
        ctx: &C,
        dst: bool,
        addr: A,
        port_be: u16,
    ) -> Result<(), i64> {
        let (addr_off, port_off, old_addr, old_port) = if dst {
            (A::DADDR, 2, self.inner_daddr, self.inner_dport_be)
        } else {
            (A::SADDR, 0, self.inner_saddr, self.inner_sport_be)
        };
        let icmp_csum = usize::from(self.l4) + ICMP_CSUM;
        let (inner_l3, inner_l4) = (usize::from(self.inner_l3), usize::from(self.inner_l4));
        A::icmp_inner(ctx, inner_l3, icmp_csum, addr_off, old_addr, addr)?;
        ctx.store(inner_l4 + port_off, &port_be)?;
        ctx.l4_csum_replace(icmp_csum, u64::from(old_port), u64::from(port_be), 2)?;
        if dst {
            self.inner_daddr = addr;
            self.inner_dport_be = port_be;
        } else {
            self.inner_saddr = addr;
            self.inner_sport_be = port_be;
        }
        Ok(())
    }
}

/// ICMPv4's checksum rules: no pseudo-header; the quoted IPv4 header has
/// a checksum of its own, which the ICMP checksum covers.
#[inline(always)]
pub(super) fn outer4<C: PacketCtx>(
    ctx: &C,
    l3: usize,
    off: usize,
    from: [u8; 4],
    to: [u8; 4],
) -> Result<(), i64> {
    let (f, t) = (u32::from_ne_bytes(from), u32::from_ne_bytes(to));
    ctx.l3_csum_replace(l3 + IP_CSUM, u64::from(f), u64::from(t), 4)?;
    ctx.store(l3 + off, &to)
}

#[inline(always)]
pub(super) fn inner4<C: PacketCtx>(
    ctx: &C,
    inner_l3: usize,
    icmp_csum: usize,
    off: usize,
    from: [u8; 4],
    to: [u8; 4],
) -> Result<(), i64> {
    let (f, t) = (u32::from_ne_bytes(from), u32::from_ne_bytes(to));
    let old_ip_csum: u16 = ctx.load(inner_l3 + IP_CSUM)?;
    let new_ip_csum = crate::csum::csum_replace4(old_ip_csum, f, t);
    ctx.store(inner_l3 + off, &to)?;
    ctx.store(inner_l3 + IP_CSUM, &new_ip_csum)?;
    ctx.l4_csum_replace(icmp_csum, u64::from(f), u64::from(t), 4)?;
    ctx.l4_csum_replace(icmp_csum, u64::from(old_ip_csum), u64::from(new_ip_csum), 2)
}
