//! Reading and rewriting the IP and TCP/UDP headers of a packet, checksums
//! included, for both families ([`Ip`]: `ipv4.rs`, `ipv6.rs`), on any
//! [`PacketCtx`], on Ethernet devices (`L2` = [`ETH_HLEN`]) and on devices
//! without a link-layer header (`L2` = 0: WireGuard, IPIP, TUN).
//!
//! Addresses and ports are kept exactly as the packet holds them (network
//! byte order in memory, read as native integers), which is what the
//! checksum helpers want.

mod icmp;
pub(crate) mod ipv4;
pub(crate) mod ipv6;

use aya_ebpf::{
    bindings::{BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR},
    btf_maps::LruHashMap,
};
use lb_common::{FlowHash, Frag4Value, FrontendKey, PROTO_TCP, SCOPE_EXTERNAL};

pub use self::{icmp::IcmpError, ipv4::IP_HLEN, ipv6::IP6_HLEN};
use crate::{ctx::PacketCtx, maps::FRAG_MAX, stats::Counted};

/// Ethernet header length.
pub const ETH_HLEN: usize = 14;
/// `ETH_P_IP` and `ETH_P_IPV6` as the frame holds them.
pub(crate) const ETH_P_IP_BE: u16 = 0x0800_u16.to_be();
pub(crate) const ETH_P_IPV6_BE: u16 = 0x86dd_u16.to_be();

/// The parsed headers of a TCP or UDP packet of either family (`A`: its
/// addresses).
pub struct Packet<A> {
    /// Whether every header sits at a constant offset (IPv4 without
    /// options, IPv6 without extension headers), so that they are read and
    /// written in place.
    in_place: bool,
    /// Offset of the IP header (16 bits, as every offset into a packet:
    /// the programs' 512-byte stack is small for IPv6's addresses).
    l3: u16,
    /// Offset of the TCP or UDP header (none in a later fragment).
    l4: u16,
    pub proto: u8,
    /// TCP flags; 0 for UDP and for later fragments.
    pub tcp_flags: u8,
    pub saddr: A,
    pub daddr: A,
    pub sport_be: u16,
    pub dport_be: u16,
    /// A fragment after the first: it carries no TCP or UDP header (the
    /// ports above are its first fragment's), so only its addresses are
    /// rewritten, and it never starts or advances a flow.
    pub later_fragment: bool,
}

/// An address family's headers: where the addresses are and how changing
/// one updates the checksums that cover it.
pub trait Ip: Copy + PartialEq + Default + Counted + 'static {
    /// Length of the IP header without options or extension headers.
    const HLEN: usize;
    /// Offsets of the source and destination address in the IP header.
    const SADDR: usize;
    const DADDR: usize;

    /// The address folded into one word (IPv4's is its word).
    fn fold(&self) -> u32;

    /// `h` with the address's words mixed in (a flow's hash, see
    /// `lb_common::FlowHash`).
    fn hash(&self, h: FlowHash) -> FlowHash;

    /// The kernel's address family number (`AF_INET`, `AF_INET6`).
    const AF: u8;
    /// Offset of the TTL (hop limit) in the IP header.
    const TTL: usize;
    /// The address as the words of a FIB lookup's address fields (IPv4's
    /// in the first).
    fn fib_words(&self) -> [u32; 4];

    /// Stores `to` over `from` at `l3 + off` (an address of the IP header
    /// at `l3`), and updates the IP header checksum if there is one.
    fn store_addr<C: PacketCtx, const IN_PLACE: bool>(
        ctx: &C,
        l3: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64>;

    /// Updates the checksum at `csum`, whose pseudo-header holds the
    /// address that changed from `from` to `to` (`flags`: the kernel's
    /// extra `BPF_F_*` flags).
    fn pseudo_csum<C: PacketCtx>(
        ctx: &C,
        csum: usize,
        from: Self,
        to: Self,
        flags: u64,
    ) -> Result<(), i64>;

    /// Rewrites the outer address at `l3 + off` of an ICMP(v6) error whose
    /// checksum is at `icmp_csum`, and the checksums that cover it.
    fn icmp_outer<C: PacketCtx>(
        ctx: &C,
        l3: usize,
        icmp_csum: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64>;

    /// Rewrites the address at `inner_l3 + off` of the packet an ICMP(v6)
    /// error quotes, and the checksums that cover it.
    fn icmp_inner<C: PacketCtx>(
        ctx: &C,
        inner_l3: usize,
        icmp_csum: usize,
        off: usize,
        from: Self,
        to: Self,
    ) -> Result<(), i64>;

    /// Whether the IP header of a packet about to start a flow is sound
    /// (the IPv4 header checksum; IPv6 has none).
    fn header_ok<C: PacketCtx, const L2: usize>(ctx: &C, in_place: bool) -> bool;

    /// Whether a router may fragment the packet whose IP header is at
    /// `l3`: IPv4 without don't fragment. Never IPv6.
    fn may_fragment<C: PacketCtx>(ctx: &C, l3: usize) -> bool;
}

/// The `T` at `off` in the packet, before any rewrite. `IN_PLACE` (only
/// with constant offsets, which the verifier can check against the
/// packet's end): read straight from the packet when its linear part holds
/// it, no helper call; else, and always without `IN_PLACE`, copied out.
#[inline(always)]
pub(crate) fn read<C: PacketCtx, const IN_PLACE: bool, T: Copy>(ctx: &C, off: usize) -> Option<T> {
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
/// packet private first, as the store helper does), else by the helper.
#[inline(always)]
fn write<C: PacketCtx, const IN_PLACE: bool, T: Copy>(
    ctx: &C,
    off: usize,
    v: T,
) -> Result<(), i64> {
    let (start, end) = (ctx.data(), ctx.data_end());
    if !IN_PLACE || start + off + size_of::<T>() > end {
        return ctx.store(off, &v);
    }
    // SAFETY: the packet holds `size_of::<T>()` bytes at `off`, just
    // checked against its end; written unaligned.
    unsafe { core::ptr::write_unaligned((start + off) as *mut T, v) };
    Ok(())
}

/// What the parser found.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// TCP or UDP, or a later fragment of a datagram whose first fragment
    /// was seen: the packet is filled in.
    Flow,
    /// ICMP (ICMPv6), at the packet's `l3` and `l4`.
    Icmp,
    /// A later fragment whose first fragment was not seen.
    UnknownFragment,
    /// Neither, or not parsable.
    Other,
}

/// A family's map of first fragments' ports (`LB4_FRAG`, `LB6_FRAG`).
pub(crate) type FragMap<K> = LruHashMap<K, Frag4Value, FRAG_MAX>;

/// The ports of a datagram's first fragment, for a later fragment (which
/// carries none) of datagram `frag`; `None` if the first was not seen.
#[inline(always)]
fn first_fragment_ports<K>(frags: &FragMap<K>, frag: &K) -> Option<(u16, u16)> {
    let ports = frags.get_ptr(frag)?;
    // SAFETY: the value stays mapped while the program runs (RCU); if the
    // LRU recycles it meanwhile, the fragment takes another datagram's
    // ports and goes astray, as it would have unseen.
    let ports = unsafe { *ports };
    Some((ports.sport_be, ports.dport_be))
}

/// Reads the ports (and TCP flags) of a first or only fragment at `l4`,
/// and for a first fragment of several (`more`) records them for the later
/// ones; a later fragment gets its first fragment's.
#[inline(always)]
fn finish<A: Ip, K, C: PacketCtx, const IN_PLACE: bool>(
    ctx: &C,
    p: &mut Packet<A>,
    frags: &FragMap<K>,
    frag: &K,
    more: bool,
) -> Kind {
    if p.later_fragment {
        let Some((sport_be, dport_be)) = first_fragment_ports(frags, frag) else {
            return Kind::UnknownFragment;
        };
        p.sport_be = sport_be;
        p.dport_be = dport_be;
        return Kind::Flow;
    }
    let l4 = p.l4();
    if p.proto == PROTO_TCP {
        let Some(flags) = read::<C, IN_PLACE, u8>(ctx, l4 + 13) else {
            return Kind::Other;
        };
        p.tcp_flags = flags;
    }
    let (Some(sport_be), Some(dport_be)) = (
        read::<C, IN_PLACE, u16>(ctx, l4),
        read::<C, IN_PLACE, u16>(ctx, l4 + 2),
    ) else {
        return Kind::Other;
    };
    p.sport_be = sport_be;
    p.dport_be = dport_be;
    if more {
        // A first fragment: its later ones will need its ports. An LRU
        // insert fails only without memory; they are then dropped.
        let ports = Frag4Value { sport_be, dport_be };
        let _ = frags.insert(frag, ports, 0);
    }
    Kind::Flow
}

impl<A: Ip> Packet<A> {
    /// Offset of the IP header.
    pub fn l3(&self) -> usize {
        usize::from(self.l3)
    }

    /// Offset of the TCP or UDP header.
    pub fn l4(&self) -> usize {
        usize::from(self.l4)
    }

    /// Whether the headers sit at constant offsets (no IPv4 options, no
    /// IPv6 extension headers).
    pub fn in_place(&self) -> bool {
        self.in_place
    }

    /// Source address and port, as the packet holds them.
    pub fn src(&self) -> (A, u16) {
        (self.saddr, self.sport_be)
    }

    /// Destination address and port, as the packet holds them.
    pub fn dst(&self) -> (A, u16) {
        (self.daddr, self.dport_be)
    }

    /// The external frontend the packet is addressed to, if it is one.
    pub fn frontend(&self) -> FrontendKey<A> {
        FrontendKey {
            addr_be: self.daddr,
            port_be: self.dport_be,
            proto: self.proto,
            scope: SCOPE_EXTERNAL,
        }
    }

    /// Offset of the L4 checksum, and the flags its updates take: UDP's
    /// checksum may be 0 (none), which must stay 0.
    #[inline(always)]
    fn l4_csum(&self, l4: usize) -> (usize, u64) {
        if self.proto == PROTO_TCP {
            (l4 + 16, 0)
        } else {
            (l4 + 6, u64::from(BPF_F_MARK_MANGLED_0))
        }
    }

    /// Rewrites the source (`dst` false) or destination address and port
    /// of a packet parsed behind an `L2`-byte link-layer header.
    #[inline(always)]
    pub fn rewrite<const L2: usize, C: PacketCtx>(
        &mut self,
        ctx: &C,
        dst: bool,
        addr: A,
        port_be: u16,
    ) -> Result<(), i64> {
        if self.in_place {
            // Constant offsets, as `parse` read them.
            self.rewrite_at::<true, C>(ctx, L2, L2 + A::HLEN, dst, addr, port_be)
        } else {
            self.rewrite_at::<false, C>(ctx, self.l3(), self.l4(), dst, addr, port_be)
        }
    }

    #[inline(always)]
    fn rewrite_at<const IN_PLACE: bool, C: PacketCtx>(
        &mut self,
        ctx: &C,
        l3: usize,
        l4: usize,
        dst: bool,
        addr: A,
        port_be: u16,
    ) -> Result<(), i64> {
        let (addr_off, port_off, old_addr, old_port) = if dst {
            (A::DADDR, 2, self.daddr, self.dport_be)
        } else {
            (A::SADDR, 0, self.saddr, self.sport_be)
        };
        let (csum, mangled) = self.l4_csum(l4);
        if old_addr != addr {
            A::store_addr::<C, IN_PLACE>(ctx, l3, addr_off, old_addr, addr)?;
            // The L4 checksum is the helper's, which knows whether the
            // device finishes it (CHECKSUM_PARTIAL: only the pseudo-header
            // part changes).
            if !self.later_fragment {
                A::pseudo_csum(ctx, csum, old_addr, addr, mangled)?;
            }
        }
        if old_port != port_be && !self.later_fragment {
            write::<C, IN_PLACE, _>(ctx, l4 + port_off, port_be)?;
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

/// The pseudo-header flag of checksum updates, for the families' impls.
const PSEUDO: u64 = BPF_F_PSEUDO_HDR as u64;
