//! Reading and rewriting the IPv4 and TCP/UDP headers of a packet at tc,
//! checksums included, on Ethernet devices (`L2` = [`ETH_HLEN`]) and on
//! devices without a link-layer header (`L2` = 0: WireGuard, IPIP, TUN).
//!
//! Addresses and ports are kept exactly as the packet holds them (network
//! byte order in memory, read as native integers), which is what the
//! checksum helpers want.

use aya_ebpf::{
    bindings::{BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR},
    programs::TcContext,
};
use lb_common::{
    Frag4Key, Frag4Value, Frontend4Key, PROTO_ICMP, PROTO_TCP, PROTO_UDP, SCOPE_EXTERNAL,
};

use crate::maps::LB4_FRAG;

/// Ethernet header length.
pub const ETH_HLEN: usize = 14;
/// `ETH_P_IP` as the frame holds it.
const ETH_P_IP_BE: u16 = 0x0800_u16.to_be();
/// Offsets in the IPv4 header.
const IP_ID: usize = 4;
const IP_FRAG_OFF: usize = 6;
const IP_PROTO: usize = 9;
const IP_CSUM: usize = 10;
const IP_SADDR: usize = 12;
const IP_DADDR: usize = 16;
/// Fragment offset bits of `frag_off` (host order): non-zero on every
/// fragment but the first, which alone carries the ports.
const IP_OFFSET_MASK: u16 = 0x1fff;
/// More fragments follow.
const IP_MF: u16 = 0x2000;
/// Length of an IPv4 header without options.
pub const IP_HLEN: usize = 20;

/// The parsed headers of an IPv4 TCP or UDP packet.
pub struct Packet4 {
    /// Whether the IPv4 header has no options, so that every header sits
    /// at a constant offset and is read and written in place.
    in_place: bool,
    /// Offset of the IPv4 header.
    l3: usize,
    /// Offset of the TCP or UDP header (none in a later fragment).
    l4: usize,
    pub proto: u8,
    /// TCP flags; 0 for UDP and for later fragments.
    pub tcp_flags: u8,
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    pub sport_be: u16,
    pub dport_be: u16,
    /// A fragment after the first: it carries no TCP or UDP header (the
    /// ports above are its first fragment's), so only its addresses are
    /// rewritten, and it never starts or advances a flow.
    pub later_fragment: bool,
}

/// What a program does with each kind of packet it translates (TCP or
/// UDP; an ICMP error about one) or drops (a later fragment of a datagram
/// whose first fragment it did not see): each returns the verdict.
///
/// The parser calls these where it built the packet, rather than
/// returning it in an enum: LLVM would merge the paths that return none
/// with an uninitialized payload, which the verifier refuses to read.
pub trait Handler {
    fn flow(self, p: &mut Packet4) -> i32;
    fn icmp_error(self, e: &mut IcmpError4) -> i32;
    fn unknown_fragment(self) -> i32;
}

/// The `T` at `off` in the packet, before any rewrite. `IN_PLACE` (only
/// with constant offsets, which the verifier can check against the
/// packet's end): read straight from the packet when its linear part holds
/// it, no helper call; else, and always without `IN_PLACE`, copied out by
/// `bpf_skb_load_bytes`.
#[inline(always)]
fn read<const IN_PLACE: bool, T: Copy>(ctx: &TcContext, off: usize) -> Option<T> {
    let (start, end) = (ctx.data(), ctx.data_end());
    if !IN_PLACE || start + off + size_of::<T>() > end {
        return ctx.load(off).ok();
    }
    // SAFETY: the packet holds `size_of::<T>()` bytes at `off`, just
    // checked against its end (and proven so to the verifier); any `T` the
    // programs read is plain bytes, read unaligned.
    Some(unsafe { core::ptr::read_unaligned((start + off) as *const T) })
}

/// Stores `v` at `off` in the packet, as `read` reads: in place when
/// `IN_PLACE` and the linear part holds it (the verifier then makes the
/// packet private first, as `bpf_skb_store_bytes` does), else by the helper.
#[inline(always)]
fn write<const IN_PLACE: bool, T: Copy>(ctx: &TcContext, off: usize, v: T) -> Result<(), i64> {
    let (start, end) = (ctx.data(), ctx.data_end());
    if !IN_PLACE || start + off + size_of::<T>() > end {
        return ctx.store(off, &v, 0);
    }
    // SAFETY: the packet holds `size_of::<T>()` bytes at `off`, just
    // checked against its end; written unaligned.
    unsafe { core::ptr::write_unaligned((start + off) as *mut T, v) };
    Ok(())
}

/// `ver_ihl` of an IPv4 header without options, the common case: every
/// offset after it is a constant, and the headers are read in place.
const IPV4_NO_OPTIONS: u8 = 0x45;

/// The fields of an IPv4 header the programs use.
struct Ipv4 {
    ihl: usize,
    proto: u8,
    saddr: [u8; 4],
    daddr: [u8; 4],
    /// Fragment offset (in 8-byte units) and the more-fragments bit, host
    /// order.
    frag_off: u16,
}

/// The IPv4 header at `l3`; `None` unless it is one.
#[inline(always)]
fn ipv4<const IN_PLACE: bool>(ctx: &TcContext, l3: usize, ver_ihl: u8) -> Option<Ipv4> {
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4 || ihl < IP_HLEN {
        return None;
    }
    let frag_off: u16 = read::<IN_PLACE, _>(ctx, l3 + IP_FRAG_OFF)?;
    Some(Ipv4 {
        ihl,
        proto: read::<IN_PLACE, _>(ctx, l3 + IP_PROTO)?,
        saddr: read::<IN_PLACE, _>(ctx, l3 + IP_SADDR)?,
        daddr: read::<IN_PLACE, _>(ctx, l3 + IP_DADDR)?,
        frag_off: u16::from_be(frag_off),
    })
}

/// Parses the packet behind an `L2`-byte link-layer header and hands it to
/// `h`; the verdict, or `pass` for a packet the programs do not translate
/// or cannot parse.
#[inline(always)]
pub fn parse<const L2: usize, H: Handler>(ctx: &TcContext, pass: i32, h: H) -> i32 {
    // Without a link-layer header, the IP version nibble tells.
    if L2 == ETH_HLEN {
        match read::<true, u16>(ctx, 12) {
            Some(ETH_P_IP_BE) => {}
            _ => return pass,
        }
    }
    // At offset 0, LLVM turns the bounds check into `data >= data_end`,
    // from which the verifier learns no length: copied out there instead.
    let ver_ihl = if L2 == 0 {
        ctx.load::<u8>(0).ok()
    } else {
        read::<true, u8>(ctx, L2)
    };
    let Some(ver_ihl) = ver_ihl else {
        return pass;
    };
    if ver_ihl == IPV4_NO_OPTIONS {
        parse_ipv4::<L2, true, H>(ctx, IPV4_NO_OPTIONS, pass, h)
    } else {
        parse_ipv4::<L2, false, H>(ctx, ver_ihl, pass, h)
    }
}

#[inline(always)]
fn parse_ipv4<const L2: usize, const IN_PLACE: bool, H: Handler>(
    ctx: &TcContext,
    ver_ihl: u8,
    pass: i32,
    h: H,
) -> i32 {
    let l3 = L2;
    let Some(ip) = ipv4::<IN_PLACE>(ctx, l3, ver_ihl) else {
        return pass;
    };
    let l4 = l3 + ip.ihl;
    let later = ip.frag_off & IP_OFFSET_MASK != 0;
    if ip.proto == PROTO_ICMP {
        if later {
            return pass;
        }
        return match IcmpError4::parse(ctx, l3, l4, ip.saddr, ip.daddr) {
            Some(mut e) => h.icmp_error(&mut e),
            None => pass,
        };
    }
    if ip.proto != PROTO_TCP && ip.proto != PROTO_UDP {
        return pass;
    }
    let Some(id_be) = read::<IN_PLACE, u16>(ctx, l3 + IP_ID) else {
        return pass;
    };
    let frag = Frag4Key {
        saddr_be: ip.saddr,
        daddr_be: ip.daddr,
        id_be,
        proto: ip.proto,
        _pad0: 0,
    };
    let mut p = Packet4 {
        in_place: IN_PLACE,
        l3,
        l4,
        proto: ip.proto,
        tcp_flags: 0,
        saddr: ip.saddr,
        daddr: ip.daddr,
        sport_be: 0,
        dport_be: 0,
        later_fragment: later,
    };
    if later {
        // Its first fragment's ports, as the first fragment carried them
        // when it passed here.
        let Some(ports) = LB4_FRAG.get_ptr(frag) else {
            return h.unknown_fragment();
        };
        // SAFETY: the value stays mapped while the program runs (RCU); if
        // the LRU recycles it meanwhile, the fragment takes another
        // datagram's ports and goes astray, as it would have unseen.
        let ports = unsafe { *ports };
        p.sport_be = ports.sport_be;
        p.dport_be = ports.dport_be;
        return h.flow(&mut p);
    }
    if p.proto == PROTO_TCP {
        let Some(flags) = read::<IN_PLACE, u8>(ctx, l4 + 13) else {
            return pass;
        };
        p.tcp_flags = flags;
    }
    let (Some(sport_be), Some(dport_be)) = (
        read::<IN_PLACE, u16>(ctx, l4),
        read::<IN_PLACE, u16>(ctx, l4 + 2),
    ) else {
        return pass;
    };
    p.sport_be = sport_be;
    p.dport_be = dport_be;
    if ip.frag_off & IP_MF != 0 {
        // A first fragment: its later ones will need its ports. An LRU
        // insert fails only without memory; they are then dropped.
        let ports = Frag4Value { sport_be, dport_be };
        let _ = LB4_FRAG.insert(frag, ports, 0);
    }
    h.flow(&mut p)
}

impl Packet4 {
    /// Offset of the IPv4 header.
    pub fn l3(&self) -> usize {
        self.l3
    }

    /// Offset of the TCP or UDP header.
    pub fn l4(&self) -> usize {
        self.l4
    }

    /// Source address and port, as the packet holds them.
    pub fn src(&self) -> ([u8; 4], u16) {
        (self.saddr, self.sport_be)
    }

    /// Destination address and port, as the packet holds them.
    pub fn dst(&self) -> ([u8; 4], u16) {
        (self.daddr, self.dport_be)
    }

    /// The external frontend the packet is addressed to, if it is one.
    pub fn frontend(&self) -> Frontend4Key {
        Frontend4Key {
            addr_be: self.daddr,
            port_be: self.dport_be,
            proto: self.proto,
            scope: SCOPE_EXTERNAL,
        }
    }

    /// Whether the IPv4 header checksum is right, where the header has no
    /// options (read in place, cheaply); a header with options is taken as
    /// it is. A packet the stack would drop must not start a flow.
    #[inline(always)]
    pub fn ipv4_checksum_ok<const L2: usize>(&self, ctx: &TcContext) -> bool {
        if !self.in_place {
            return true;
        }
        let Some(words) = read::<true, [u16; IP_HLEN / 2]>(ctx, L2) else {
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

    /// Offset of the L4 checksum, and the flags its updates take: UDP's
    /// checksum may be 0 (none), which must stay 0.
    #[inline(always)]
    fn l4_csum(&self) -> (usize, u64) {
        if self.proto == PROTO_TCP {
            (self.l4 + 16, 0)
        } else {
            (self.l4 + 6, u64::from(BPF_F_MARK_MANGLED_0))
        }
    }

    /// Rewrites the source (`dst` false) or destination address and port
    /// of a packet parsed behind an `L2`-byte link-layer header.
    #[inline(always)]
    pub fn rewrite<const L2: usize>(
        &mut self,
        ctx: &TcContext,
        dst: bool,
        addr: [u8; 4],
        port_be: u16,
    ) -> Result<(), i64> {
        if self.in_place {
            // Constant offsets, as `parse` read them.
            self.rewrite_at::<true>(ctx, L2, L2 + IP_HLEN, dst, addr, port_be)
        } else {
            self.rewrite_at::<false>(ctx, self.l3, self.l4, dst, addr, port_be)
        }
    }

    #[inline(always)]
    fn rewrite_at<const IN_PLACE: bool>(
        &mut self,
        ctx: &TcContext,
        l3: usize,
        l4: usize,
        dst: bool,
        addr: [u8; 4],
        port_be: u16,
    ) -> Result<(), i64> {
        let (addr_off, port_off, old_addr, old_port) = if dst {
            (IP_DADDR, 2, self.daddr, self.dport_be)
        } else {
            (IP_SADDR, 0, self.saddr, self.sport_be)
        };
        let (csum, mangled) = self.l4_csum();
        let (from, to) = (u32::from_ne_bytes(old_addr), u32::from_ne_bytes(addr));
        if from != to {
            // The IPv4 checksum is always complete: updated here. The L4
            // one is the helper's, which knows whether the device finishes
            // it (CHECKSUM_PARTIAL: only the pseudo-header part changes).
            let ip_csum: u16 = read::<IN_PLACE, _>(ctx, l3 + IP_CSUM).ok_or(-1_i64)?;
            write::<IN_PLACE, _>(ctx, l3 + addr_off, addr)?;
            write::<IN_PLACE, _>(ctx, l3 + IP_CSUM, csum_replace4(ip_csum, from, to))?;
            if !self.later_fragment {
                ctx.l4_csum_replace(
                    csum,
                    u64::from(from),
                    u64::from(to),
                    u64::from(BPF_F_PSEUDO_HDR) | mangled | 4,
                )?;
            }
        }
        if old_port != port_be && !self.later_fragment {
            write::<IN_PLACE, _>(ctx, l4 + port_off, port_be)?;
            ctx.l4_csum_replace(csum, u64::from(old_port), u64::from(port_be), mangled | 2)?;
        }
        if dst {
            self.daddr = addr;
            self.dport_be = port_be;
        } else {
            self.saddr = addr;
            self.sport_be = port_be;
        }
        Ok(())
    }
}

/// ICMP types whose errors quote the packet they are about.
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_TIME_EXCEEDED: u8 = 11;
/// Offset of the ICMP checksum, and of the quoted packet, in the ICMP header.
const ICMP_CSUM: usize = 2;
const ICMP_QUOTE: usize = 8;

/// An ICMP error (destination unreachable, fragmentation needed among
/// them, or time exceeded) quoting a TCP or UDP packet.
pub struct IcmpError4 {
    l3: usize,
    l4: usize,
    /// Offset of the quoted IPv4 header, and of its TCP or UDP header.
    inner_l3: usize,
    inner_l4: usize,
    pub saddr: [u8; 4],
    pub daddr: [u8; 4],
    /// The quoted packet's protocol, addresses and ports.
    pub proto: u8,
    pub inner_saddr: [u8; 4],
    pub inner_daddr: [u8; 4],
    pub inner_sport_be: u16,
    pub inner_dport_be: u16,
}

impl IcmpError4 {
    #[inline(always)]
    fn parse(
        ctx: &TcContext,
        l3: usize,
        l4: usize,
        saddr: [u8; 4],
        daddr: [u8; 4],
    ) -> Option<Self> {
        // A rare packet, at offsets the verifier cannot bound: copied out.
        let icmp_type: u8 = ctx.load(l4).ok()?;
        if icmp_type != ICMP_DEST_UNREACH && icmp_type != ICMP_TIME_EXCEEDED {
            return None;
        }
        let inner_l3 = l4 + ICMP_QUOTE;
        let ver_ihl: u8 = ctx.load(inner_l3).ok()?;
        let inner = ipv4::<false>(ctx, inner_l3, ver_ihl)?;
        // A quoted later fragment carries no ports.
        if inner.frag_off & IP_OFFSET_MASK != 0
            || (inner.proto != PROTO_TCP && inner.proto != PROTO_UDP)
        {
            return None;
        }
        let inner_l4 = inner_l3 + inner.ihl;
        Some(Self {
            l3,
            l4,
            inner_l3,
            inner_l4,
            saddr,
            daddr,
            proto: inner.proto,
            inner_saddr: inner.saddr,
            inner_daddr: inner.daddr,
            inner_sport_be: ctx.load(inner_l4).ok()?,
            inner_dport_be: ctx.load(inner_l4 + 2).ok()?,
        })
    }

    /// The quoted packet's source address and port.
    pub fn inner_src(&self) -> ([u8; 4], u16) {
        (self.inner_saddr, self.inner_sport_be)
    }

    /// The quoted packet's destination address and port.
    pub fn inner_dst(&self) -> ([u8; 4], u16) {
        (self.inner_daddr, self.inner_dport_be)
    }

    /// Rewrites the outer source (`dst` false) or destination address.
    /// ICMP has no pseudo-header: only the IPv4 checksum changes.
    #[inline(always)]
    pub fn rewrite_outer(&mut self, ctx: &TcContext, dst: bool, addr: [u8; 4]) -> Result<(), i64> {
        let (off, old) = if dst {
            (IP_DADDR, self.daddr)
        } else {
            (IP_SADDR, self.saddr)
        };
        let (from, to) = (u32::from_ne_bytes(old), u32::from_ne_bytes(addr));
        ctx.l3_csum_replace(self.l3 + IP_CSUM, u64::from(from), u64::from(to), 4)?;
        ctx.store(self.l3 + off, &addr, 0)?;
        if dst {
            self.daddr = addr;
        } else {
            self.saddr = addr;
        }
        Ok(())
    }

    /// Rewrites the quoted packet's source (`dst` false) or destination
    /// address and port, its IPv4 checksum, and the ICMP checksum over
    /// both. The quoted TCP or UDP checksum is left alone, as receivers
    /// do not check it (and the quote may end before it).
    #[inline(always)]
    pub fn rewrite_inner(
        &mut self,
        ctx: &TcContext,
        dst: bool,
        addr: [u8; 4],
        port_be: u16,
    ) -> Result<(), i64> {
        let (addr_off, port_off, old_addr, old_port) = if dst {
            (IP_DADDR, 2, self.inner_daddr, self.inner_dport_be)
        } else {
            (IP_SADDR, 0, self.inner_saddr, self.inner_sport_be)
        };
        let icmp_csum = self.l4 + ICMP_CSUM;
        let (from, to) = (u32::from_ne_bytes(old_addr), u32::from_ne_bytes(addr));
        let old_ip_csum: u16 = ctx.load(self.inner_l3 + IP_CSUM)?;
        let new_ip_csum = csum_replace4(old_ip_csum, from, to);
        ctx.store(self.inner_l3 + addr_off, &addr, 0)?;
        ctx.store(self.inner_l3 + IP_CSUM, &new_ip_csum, 0)?;
        ctx.l4_csum_replace(icmp_csum, u64::from(from), u64::from(to), 4)?;
        ctx.l4_csum_replace(icmp_csum, u64::from(old_ip_csum), u64::from(new_ip_csum), 2)?;
        ctx.store(self.inner_l4 + port_off, &port_be, 0)?;
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

/// An Internet checksum after one 32-bit word of what it covers changed
/// from `from` to `to` (RFC 1624: HC' = ~(~HC + ~m + m')). One's complement
/// sums do not depend on byte order, so raw (in-packet) values work as is.
#[inline(always)]
fn csum_replace4(csum: u16, from: u32, to: u32) -> u16 {
    let mut sum = u32::from(!csum);
    sum += (!from >> 16) + (!from & 0xffff);
    sum += (to >> 16) + (to & 0xffff);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
