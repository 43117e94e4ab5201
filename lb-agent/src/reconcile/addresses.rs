//! `LB_ADDRS`, the bitmap of frontend addresses the socket programs test
//! before any lookup (see `lb_common::addrs`): which words to write.
//!
//! A bit must be set before a frontend of its address is inserted (or a
//! connect to it passes untranslated) and may be cleared only once no
//! frontend of the address is left. A bit set for nothing costs only a
//! lookup.

use std::net::IpAddr;

use lb_common::{ADDR_WORDS, addr_bit4, addr_bit6};

/// The bitmap's words as written, if known.
#[derive(Debug, Default)]
pub(super) struct AddressBits {
    /// `None` until written whole (and after a failed write): then every
    /// word is written next time.
    written: Option<Vec<u64>>,
}

impl AddressBits {
    /// The words with the bits of `addrs` set in addition to those written
    /// (none, when not known), and the `(index, word)` writes that take
    /// the map there.
    pub(super) fn with(
        &self,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> (Vec<u64>, Vec<(u32, u64)>) {
        let mut want = self
            .written
            .clone()
            .unwrap_or_else(|| vec![0; ADDR_WORDS as usize]);
        set(&mut want, addrs);
        let writes = self.writes(&want);
        (want, writes)
    }

    /// The words with exactly the bits of `addrs`, and the writes.
    pub(super) fn exactly(
        &self,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> (Vec<u64>, Vec<(u32, u64)>) {
        let mut want = vec![0; ADDR_WORDS as usize];
        set(&mut want, addrs);
        let writes = self.writes(&want);
        (want, writes)
    }

    /// Records that `words` were written whole, or (`None`) that a write
    /// failed and the map's content is unknown.
    pub(super) fn written(&mut self, words: Option<Vec<u64>>) {
        self.written = words;
    }

    /// The `(index, word)` writes from what was written to `want`.
    fn writes(&self, want: &[u64]) -> Vec<(u32, u64)> {
        (0..ADDR_WORDS)
            .zip(want)
            .filter(|&(i, w)| {
                self.written
                    .as_ref()
                    .is_none_or(|old| old[i as usize] != *w)
            })
            .map(|(i, &w)| (i, w))
            .collect()
    }
}

/// Sets the bit of each of `addrs` in `words`. A v4-mapped IPv6 address is
/// never a frontend of ours; its IPv4 form is.
fn set(words: &mut [u64], addrs: impl IntoIterator<Item = IpAddr>) {
    for addr in addrs {
        let (word, mask) = match addr {
            IpAddr::V4(v4) => addr_bit4(v4.octets()),
            IpAddr::V6(v6) => addr_bit6(&v6.octets()),
        };
        words[word as usize] |= mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_first_write_is_whole_then_only_changed_words_are_written() {
        let mut bits = AddressBits::default();
        let (words, writes) = bits.with([ip("10.96.0.10")]);
        assert_eq!(writes.len(), ADDR_WORDS as usize, "unknown: every word");
        bits.written(Some(words));
        let (words, writes) = bits.with([ip("10.96.0.10")]);
        assert!(writes.is_empty(), "{writes:?}");
        bits.written(Some(words));
        let (words, writes) = bits.with([ip("10.96.0.11"), ip("fd00::10")]);
        assert!((1..=2).contains(&writes.len()), "{writes:?}");
        bits.written(Some(words));

        // Adding never clears: the earlier address keeps its bit.
        let (word, mask) = addr_bit4([10, 96, 0, 10]);
        let (words, _) = bits.with([]);
        assert_ne!(words[word as usize] & mask, 0);
        // Exactly the addresses left: 10.96.0.10's bit goes, unless a
        // remaining address shares it.
        let (words, writes) = bits.exactly([ip("10.96.0.11"), ip("fd00::10")]);
        let (w11, m11) = addr_bit4([10, 96, 0, 11]);
        assert_ne!(words[w11 as usize] & m11, 0);
        if words[word as usize] & mask == 0 {
            assert!(writes.iter().any(|&(i, _)| i == word), "{writes:?}");
        }
        bits.written(None);
        let (_, writes) = bits.with([]);
        assert_eq!(
            writes.len(),
            ADDR_WORDS as usize,
            "unknown again after a failure"
        );
    }
}
