//! `loadBalancerSourceRanges` of external frontends (the tc programs):
//! `LB4_SRC_RANGES`.

/// The data of an `LB4_SRC_RANGES` key (an LPM trie: the key is this
/// behind a `u32` prefix length in bits): `loadBalancerSourceRanges` entry
/// `src_be/n` of the external frontend `addr_be:port_be/proto` has prefix
/// length [`SOURCE_RANGE_PREFIX`] + n. Network byte order. Written by the
/// agent; the value (`u32`) is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRange4 {
    pub addr_be: [u8; 4],
    pub port_be: u16,
    pub proto: u8,
    pub _pad0: u8,
    pub src_be: [u8; 4],
}
const _: () = assert!(size_of::<SourceRange4>() == 12);

/// Bits of a [`SourceRange4`] before the source address: the frontend.
pub const SOURCE_RANGE_PREFIX: u32 = 64;

/// Default capacity of `LB4_SRC_RANGES`.
pub const DEFAULT_SOURCE_RANGES_MAX: u32 = 16_384;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size assert equals the sum of
    // the fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::SourceRange4 {}
}
