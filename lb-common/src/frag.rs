//! Fragments of translated flows (the tc programs): `LB4_FRAG` and
//! `LB6_FRAG`.
//!
//! Only a datagram's first fragment carries its ports. The programs record
//! them under the datagram's addresses, protocol and IP id as they see the
//! first fragment, so that the later fragments, which carry none, are
//! translated as their first one was (Cilium's
//! `cilium_ipv4_frag_datagrams`). A later fragment whose first one was not
//! seen is dropped and counted (`tc_drop_fragment_unknown`): it cannot be
//! told apart from one of ours.

/// Key of `LB4_FRAG`: a datagram, as its fragments' IPv4 headers carry it.
/// Network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frag4Key {
    pub saddr_be: [u8; 4],
    pub daddr_be: [u8; 4],
    /// The IP identification field.
    pub id_be: u16,
    /// IP protocol number.
    pub proto: u8,
    pub _pad0: u8,
}
const _: () = assert!(size_of::<Frag4Key>() == 12);

/// Key of `LB6_FRAG`: a datagram, as its fragments' IPv6 headers and
/// fragment headers carry it. Network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frag6Key {
    pub saddr_be: [u8; 16],
    pub daddr_be: [u8; 16],
    /// The fragment header's identification field.
    pub id_be: u32,
    /// The protocol of the header after the fragment header.
    pub proto: u8,
    pub _pad0: [u8; 3],
}
const _: () = assert!(size_of::<Frag6Key>() == 40);

/// Value of `LB4_FRAG` and `LB6_FRAG`: the ports of the datagram's first fragment, as it
/// carried them (before any translation by this program). Network byte
/// order. Written by the tc programs; LRU, never deleted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frag4Value {
    pub sport_be: u16,
    pub dport_be: u16,
}
const _: () = assert!(size_of::<Frag4Value>() == 4);

/// Default capacity of `LB4_FRAG` and of `LB6_FRAG` (Cilium's
/// `--bpf-fragments-map-max`).
pub const DEFAULT_FRAG_MAX: u32 = 8_192;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size asserts equal the sum of
    // the fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::Frag4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Frag4Value {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Frag6Key {}
}
