//! From a parsed packet to its family: the program entry points parse
//! packets here and get each back in a [`Handler`] method generic over the
//! family ([`Family`]) whose maps serve it. Above the family bindings, as
//! the parser below them knows addresses only.

use core::mem::MaybeUninit;

use lb_common::At;

use crate::{
    ctx::PacketCtx,
    family::{Family, V4, V6},
    packet::{ETH_HLEN, ETH_P_IP_BE, ETH_P_IPV6_BE, Kind, Packet, ipv4, ipv6, read},
};

/// What a program does with each kind of packet it translates (TCP or
/// UDP; an ICMP error, at `l3`/`l4`, which may be about one: parsed by
/// [`crate::packet::Ip::icmp_error`]) or drops (a later fragment of a datagram whose first
/// fragment it did not see), in family `F`: each returns the verdict.
///
/// The parser calls these where it built the packet, rather than
/// returning it in an enum: LLVM would merge the paths that return none
/// with an uninitialized payload, which the verifier refuses to read.
pub trait Handler {
    /// Where the parser counts what it passes: the program and direction.
    const AT: At;
    fn flow<F: Family>(self, p: &mut Packet<F::Addr>) -> i32;
    fn icmp_error<F: Family>(self, l3: usize, l4: usize) -> i32;
    fn unknown_fragment<F: Family>(self) -> i32;
    /// A packet the programs do not translate, or cannot parse.
    fn unparsed(self) -> i32;
}

/// Parses the packet behind an `L2`-byte link-layer header and hands it to
/// `h`; the verdict, or [`Handler::unparsed`] for a packet the programs do
/// not translate or cannot parse.
///
/// The packet lives on this (the program's) stack; IPv6's parser, and
/// each step of what the handler does with it, is a BPF function of its
/// own called from here, so that their stacks do not add up: the
/// verifier allows 512 bytes over a chain of calls, and LLVM gives inlined
/// code a slot for every temporary.
#[inline(always)]
pub fn parse<const L2: usize, C: PacketCtx, H: Handler>(ctx: &C, h: H) -> i32 {
    // At offset 0, LLVM turns the bounds check into `data >= data_end`,
    // from which the verifier learns no length: copied out there instead.
    let first = if L2 == 0 {
        ctx.load::<u8>(0).ok()
    } else {
        read::<C, true, u8>(ctx, L2)
    };
    let Some(first) = first else {
        return h.unparsed();
    };
    // Without a link-layer header, the IP version nibble tells.
    let v6 = if L2 == ETH_HLEN {
        match read::<C, true, u16>(ctx, 12) {
            Some(ETH_P_IP_BE) => false,
            Some(ETH_P_IPV6_BE) => true,
            _ => return h.unparsed(),
        }
    } else {
        first >> 4 == 6
    };
    if v6 {
        let mut p = MaybeUninit::uninit();
        let kind = ipv6::parse::<L2, C>(ctx, first, &mut p, H::AT);
        hand::<V6, H>(kind, &mut p, h)
    } else {
        let mut p = MaybeUninit::uninit();
        let kind = if first == ipv4::IPV4_NO_OPTIONS {
            ipv4::parse::<L2, true, C>(ctx, first, &mut p)
        } else {
            ipv4::parse::<L2, false, C>(ctx, first, &mut p)
        };
        hand::<V4, H>(kind, &mut p, h)
    }
}

/// Hands a parsed packet of family `F` to `h`.
#[inline(always)]
fn hand<F: Family, H: Handler>(kind: Kind, p: &mut MaybeUninit<Packet<F::Addr>>, h: H) -> i32 {
    match kind {
        // SAFETY: the parsers initialize the packet whenever they return
        // `Flow` or `Icmp`.
        Kind::Flow => h.flow::<F>(unsafe { p.assume_init_mut() }),
        Kind::Icmp => {
            // SAFETY: as above.
            let p = unsafe { p.assume_init_ref() };
            h.icmp_error::<F>(p.l3(), p.l4())
        }
        Kind::UnknownFragment => h.unknown_fragment::<F>(),
        Kind::Other => h.unparsed(),
    }
}
