//! Addresses as the programs hold them: ground level, below the maps and
//! every concern.

/// An IPv6 address as the programs hold it: its 16 bytes (network order)
/// as four native words. Its alignment lets LLVM move it a word at a time;
/// a `[u8; 16]` goes byte by byte, each byte in a stack slot of its own.
/// Keys and values holding it have the layout of `lb_common`'s `*6` types.
pub type Addr6 = [u32; 4];

/// The bytes of an [`Addr6`].
#[inline(always)]
pub fn bytes6(ip: &Addr6) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 4 {
        let w = ip[i].to_ne_bytes();
        out[4 * i] = w[0];
        out[4 * i + 1] = w[1];
        out[4 * i + 2] = w[2];
        out[4 * i + 3] = w[3];
        i += 1;
    }
    out
}

/// The [`Addr6`] of 16 bytes.
#[inline(always)]
pub fn words6(addr: &[u8; 16]) -> Addr6 {
    [
        u32::from_ne_bytes([addr[0], addr[1], addr[2], addr[3]]),
        u32::from_ne_bytes([addr[4], addr[5], addr[6], addr[7]]),
        u32::from_ne_bytes([addr[8], addr[9], addr[10], addr[11]]),
        u32::from_ne_bytes([addr[12], addr[13], addr[14], addr[15]]),
    ]
}
