//! Frontend addresses at a glance: `LB_ADDRS`, a bitmap with one bit per
//! hash of an address, set for every address that has a frontend. The
//! socket programs test it before any lookup, so that a connect to an
//! address that is no frontend (most of a node's connections) costs one
//! array read instead of two hash-map misses. A set bit only means "look".
//!
//! Written by the agent: a frontend's bit before its entry is inserted,
//! cleared only after the last frontend of the address is deleted.

/// log2 of the number of bits: 2^20 bits, 128 KiB.
pub const ADDR_BITS_LOG2: u32 = 20;
/// `LB_ADDRS`' entries: `u64` words of the bitmap.
pub const ADDR_WORDS: u32 = 1 << (ADDR_BITS_LOG2 - 6);

/// The word index and bit mask of the IPv4 address `addr_be` (network
/// order, as the programs see it; also a `::ffff:a.b.c.d` destination).
#[inline(always)]
pub fn addr_bit4(addr_be: [u8; 4]) -> (u32, u64) {
    bit(u32::from_ne_bytes(addr_be))
}

/// The word index and bit mask of the IPv6 address `addr_be`.
#[inline(always)]
pub fn addr_bit6(addr_be: &[u8; 16]) -> (u32, u64) {
    let w =
        |i: usize| u32::from_ne_bytes([addr_be[i], addr_be[i + 1], addr_be[i + 2], addr_be[i + 3]]);
    // Folded first, so that the bit depends on every word.
    bit(w(0) ^ w(4).rotate_left(8) ^ w(8).rotate_left(16) ^ w(12).rotate_left(24))
}

/// Fibonacci hashing: the top bits of the product spread nearby addresses
/// (a Service CIDR) over the whole bitmap.
#[inline(always)]
fn bit(x: u32) -> (u32, u64) {
    let h = x.wrapping_mul(0x9E37_79B9) >> (32 - ADDR_BITS_LOG2);
    (h >> 6, 1 << (h & 63))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bit_is_in_range_and_a_service_cidr_spreads() {
        let mut words = [0u64; ADDR_WORDS as usize];
        for i in 0..4096u32 {
            let (word, mask) = addr_bit4((0x0a60_0000 + i).to_be_bytes());
            assert!(word < ADDR_WORDS);
            assert_eq!(mask.count_ones(), 1);
            words[word as usize] |= mask;
        }
        let set: u32 = words.iter().map(|w| w.count_ones()).sum();
        // 4096 consecutive addresses land on (nearly) as many bits.
        assert!(set > 4000, "{set}");
        let (word, mask) = addr_bit6(&[0xfd, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert!(word < ADDR_WORDS && mask.count_ones() == 1);
    }
}
