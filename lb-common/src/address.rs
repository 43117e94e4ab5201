//! The two address types the maps' generic keys and values are made of:
//! `[u8; 4]` (the `LB4_*` maps) and `[u8; 16]` (`LB6_*`), network byte
//! order. The trait is sealed: every generic type of this crate has a size
//! assert for both, which shows it has no implicit padding with either, so
//! the agent may treat it as plain bytes (`aya::Pod`) for both and no other.

mod sealed {
    pub trait Sealed {}
    impl Sealed for [u8; 4] {}
    impl Sealed for [u8; 16] {}
}

/// An address of one of the two families.
pub trait Address:
    sealed::Sealed + Copy + Default + PartialEq + Eq + core::hash::Hash + Ord + 'static
{
    /// `AF_INET` or `AF_INET6` as the kernel numbers them.
    const AF: u8;
}

impl Address for [u8; 4] {
    const AF: u8 = 2;
}

impl Address for [u8; 16] {
    const AF: u8 = 10;
}
