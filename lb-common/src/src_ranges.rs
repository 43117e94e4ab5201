//! `loadBalancerSourceRanges` of external frontends (the tc programs):
//! `LB4_SRC_RANGES` and `LB6_SRC_RANGES`.

/// The data of an `LB4_SRC_RANGES` (`A` = `[u8; 4]`) or `LB6_SRC_RANGES`
/// (`[u8; 16]`) key (an LPM trie: the key is this behind a `u32` prefix
/// length in bits): `loadBalancerSourceRanges` entry `src_be/n` of the
/// external frontend `addr_be:port_be/proto` has prefix length
/// [`SOURCE_RANGE_PREFIX`] (IPv6: [`SOURCE_RANGE6_PREFIX`]) + n. Network
/// byte order. Written by the agent; the value (`u32`) is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRange<A> {
    pub addr_be: A,
    pub port_be: u16,
    pub proto: u8,
    pub _pad0: u8,
    pub src_be: A,
}
/// `LB4_SRC_RANGES`' key data.
pub type SourceRange4 = SourceRange<[u8; 4]>;
/// `LB6_SRC_RANGES`' key data.
pub type SourceRange6 = SourceRange<[u8; 16]>;
const _: () = assert!(size_of::<SourceRange4>() == 12);
const _: () = assert!(size_of::<SourceRange6>() == 36);

/// Bits of a [`SourceRange4`] before the source address: the frontend.
pub const SOURCE_RANGE_PREFIX: u32 = 64;
/// Bits of a [`SourceRange6`] before the source address.
pub const SOURCE_RANGE6_PREFIX: u32 = 160;

/// Default capacity of `LB4_SRC_RANGES` and of `LB6_SRC_RANGES`.
pub const DEFAULT_SOURCE_RANGES_MAX: u32 = 16_384;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size assert equals the sum of
    // the fields), and every bit pattern is valid.
    // (`Address` is sealed to the two addresses of the asserts).
    unsafe impl<A: crate::Address> aya::Pod for super::SourceRange<A> {}
}
