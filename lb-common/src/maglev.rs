//! Maglev tables (`LB4_MAGLEV`, `LB6_MAGLEV`) and the flow hash that
//! indexes them.
//!
//! A frontend with [`crate::FE_F_MAGLEV`] has, per revision, a lookup table
//! of `maglev_size` backend ids (its state says how many: a prime M). A new
//! flow takes entry `flow_hash % M`. The table is cut into chunks of
//! [`MAGLEV_CHUNK`] entries, the values of a hash map keyed by revision and
//! chunk, so that it is written once with its revision and published with
//! it by the state's one locked write: no packet sees half a table, and the
//! write protocol of the slots (ARCHITECTURE.md, "Readers see whole
//! states") covers the chunks unchanged.

/// Entries per chunk (the last chunk of a table is partly unused).
pub const MAGLEV_CHUNK: usize = 256;

/// Key of `LB4_MAGLEV` and `LB6_MAGLEV`: chunk `chunk` (entries
/// `chunk * MAGLEV_CHUNK ..`) of the Maglev table of revision `rev` of
/// frontend `fe_id`. Host byte order. Written by the agent with the
/// revision's slots, deleted with them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MaglevKey {
    pub fe_id: u32,
    pub rev: u16,
    pub chunk: u16,
}
const _: () = assert!(size_of::<MaglevKey>() == 8);

/// Value of `LB4_MAGLEV`: backend ids (keys of `LB4_BACKENDS`), host byte
/// order; entries past the table's end are 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MaglevChunk {
    pub backend_ids: [u32; MAGLEV_CHUNK],
}
const _: () = assert!(size_of::<MaglevChunk>() == 4 * MAGLEV_CHUNK);

impl Default for MaglevChunk {
    fn default() -> Self {
        Self {
            backend_ids: [0; MAGLEV_CHUNK],
        }
    }
}

/// Default capacity of `LB4_MAGLEV` and `LB6_MAGLEV`, in chunks (1 KiB
/// each, allocated only when written): 2,048 tables of Cilium's default
/// size, 16,381 entries (64 chunks).
pub const DEFAULT_MAGLEV_MAX: u32 = 131_072;

/// MurmurHash3 (x86, 32 bits) of a flow, fed a word at a time: the hash of
/// the bytes the words hold in little-endian order, which is how the
/// programs (`bpfel`) and the agent's hosts read packet bytes into words.
///
/// A flow's words are its source address, then
/// [`ports_word`]`(sport, dport)`, then its protocol number. The
/// destination address is left out, so that a flow hashes alike on every
/// node whatever node address it reached; with session affinity the source
/// port is 0, so that all of a client's flows hash alike.
#[derive(Clone, Copy, Debug)]
pub struct FlowHash {
    h: u32,
    len: u32,
}

impl FlowHash {
    /// A hash seeded with `seed` (`LB_CONFIG`'s `maglev_seed`).
    #[inline(always)]
    pub const fn new(seed: u32) -> Self {
        Self { h: seed, len: 0 }
    }

    /// Mixes in one word.
    #[inline(always)]
    pub const fn word(self, k: u32) -> Self {
        let k = k
            .wrapping_mul(0xcc9e_2d51)
            .rotate_left(15)
            .wrapping_mul(0x1b87_3593);
        let h = (self.h ^ k)
            .rotate_left(13)
            .wrapping_mul(5)
            .wrapping_add(0xe654_6b64);
        Self {
            h,
            len: self.len + 4,
        }
    }

    /// The hash.
    #[inline(always)]
    pub const fn finish(self) -> u32 {
        let mut h = self.h ^ self.len;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^ (h >> 16)
    }
}

/// The word of a flow's ports (network byte order, as packets hold them):
/// their four bytes in packet order.
#[inline(always)]
pub const fn ports_word(sport_be: u16, dport_be: u16) -> u32 {
    sport_be as u32 | (dport_be as u32) << 16
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no implicit padding (the size asserts equal the sum
    // of the fields), and every bit pattern is a valid value.
    unsafe impl aya::Pod for super::MaglevKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::MaglevChunk {}
}
