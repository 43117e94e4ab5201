//! Internet checksum arithmetic done by the programs themselves (RFC 1071,
//! RFC 1624). One's complement sums do not depend on byte order, so raw
//! (in-packet) values work as they are.

/// An Internet checksum after one 32-bit word of what it covers changed
/// from `from` to `to` (RFC 1624: HC' = ~(~HC + ~m + m')).
#[inline(always)]
pub fn csum_replace4(csum: u16, from: u32, to: u32) -> u16 {
    let mut sum = u32::from(!csum);
    sum += (!from >> 16) + (!from & 0xffff);
    sum += (to >> 16) + (to & 0xffff);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// The checksum difference of a 16-byte field (an IPv6 address, as native
/// words) changing from `from` to `to`, as `bpf_csum_diff` computes it: a
/// 32-bit one's complement sum of `~from` and `to`, for a checksum update
/// by difference.
#[inline(always)]
pub fn diff16(from: &[u32; 4], to: &[u32; 4]) -> u32 {
    let mut sum = 0u64;
    for i in 0..4 {
        sum += u64::from(!from[i]) + u64::from(to[i]);
    }
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum as u32
}

/// `sum` plus the big-endian 16-bit words of `bytes` (an even length).
#[inline(always)]
pub fn sum_words(bytes: &[u8], mut sum: u32) -> u32 {
    let mut i = 0;
    while i + 1 < bytes.len() {
        sum += u32::from(u16::from_be_bytes([bytes[i], bytes[i + 1]]));
        i += 2;
    }
    sum
}

/// The Internet checksum of a one's complement sum.
#[inline(always)]
pub fn fold(mut sum: u32) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// An Internet checksum after adding `diff` (a 32-bit one's complement sum,
/// as [`diff16`] or `bpf_csum_diff` make) to what it covers.
#[inline(always)]
pub fn csum_add(csum: u16, diff: u32) -> u16 {
    let mut sum = u64::from(!csum) + u64::from(diff);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}
