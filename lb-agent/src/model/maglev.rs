//! Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and
//! Reliable Software Network Load Balancer", NSDI 2016, §3.4): a lookup
//! table of a prime size M whose entries name backends, each backend
//! owning nearly M/N of them, so that a flow hash picks the same backend on
//! every node that builds the table from the same backends and seed, and
//! removing one backend of N moves little more than its own 1/N of flows.
//!
//! As Cilium (`--bpf-lb-maglev-table-size`, `--bpf-lb-maglev-hash-seed`):
//! the sizes it allows, its default seed, a backend's permutation from the
//! 128-bit MurmurHash3 of its address with the seed's first word (offset
//! from the low half, skip from the high half). Pure: no I/O.

use std::{fmt, io::Cursor, net::SocketAddr, str::FromStr};

use base64::Engine as _;

/// The table sizes Cilium allows: primes, each about twice the one before.
pub const TABLE_SIZES: [u32; 10] = [
    251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071,
];

/// A Maglev table size M, one of [`TABLE_SIZES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSize(u32);

impl TableSize {
    /// Cilium's default, 16381: up to about 160 backends own equal shares
    /// within 1% (M > 100·N); removing one of up to about 27 (M > 600·N)
    /// moves at most one point more than its own share.
    pub const DEFAULT: Self = Self(16381);

    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for TableSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u32> for TableSize {
    type Error = MaglevError;

    fn try_from(m: u32) -> Result<Self, MaglevError> {
        TABLE_SIZES
            .contains(&m)
            .then_some(Self(m))
            .ok_or(MaglevError::TableSize(m))
    }
}

impl FromStr for TableSize {
    type Err = MaglevError;

    fn from_str(s: &str) -> Result<Self, MaglevError> {
        let m = s
            .parse::<u32>()
            .map_err(|e| MaglevError::TableSizeText(s.to_owned(), e))?;
        Self::try_from(m)
    }
}

impl fmt::Display for TableSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The cluster-wide seed: 12 bytes, base64 in the flag. Its first word
/// seeds the backends' permutations; the other two are for the programs'
/// flow hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashSeed {
    /// Seeds the MurmurHash3 of each backend's address.
    pub permutation: u32,
    /// Seeds of the flow hash the programs compute per packet.
    pub flow: [u32; 2],
}

impl HashSeed {
    /// Cilium's default seed. (Tables are ours alone all the same: Cilium
    /// names its backends differently when it hashes them.)
    pub const DEFAULT_TEXT: &str = "JLfvgnHc2kaSUFaI";
}

impl Default for HashSeed {
    fn default() -> Self {
        Self::DEFAULT_TEXT
            .parse()
            .expect("the default seed is 12 bytes of base64")
    }
}

impl FromStr for HashSeed {
    type Err = MaglevError;

    fn from_str(s: &str) -> Result<Self, MaglevError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(MaglevError::SeedBase64)?;
        let bytes: [u8; 12] = bytes
            .try_into()
            .map_err(|b: Vec<u8>| MaglevError::SeedLength(b.len()))?;
        let word =
            |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        Ok(Self {
            permutation: word(0),
            flow: [word(4), word(8)],
        })
    }
}

/// How new flows from outside the node pick a backend of an external
/// frontend (`--bpf-lb-algorithm`, and per Service an annotation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// At random, as kube-proxy's rules.
    #[default]
    Random,
    /// From the frontend's Maglev table by the flow's hash: the same
    /// backend on every node.
    Maglev,
}

impl FromStr for Algorithm {
    type Err = MaglevError;

    fn from_str(s: &str) -> Result<Self, MaglevError> {
        match s {
            "random" => Ok(Self::Random),
            "maglev" => Ok(Self::Maglev),
            other => Err(MaglevError::Algorithm(other.to_owned())),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Random => "random",
            Self::Maglev => "maglev",
        })
    }
}

/// The cluster-wide Maglev settings every node builds its tables with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaglevParams {
    pub size: TableSize,
    pub seed: HashSeed,
}

/// What is wrong with a Maglev setting.
#[derive(Debug, thiserror::Error)]
pub enum MaglevError {
    #[error("load-balancing algorithm {0:?} is neither \"random\" nor \"maglev\"")]
    Algorithm(String),
    #[error("Maglev table size {0} is not one of {TABLE_SIZES:?}")]
    TableSize(u32),
    #[error("Maglev table size {0:?} is not a number")]
    TableSizeText(String, #[source] std::num::ParseIntError),
    #[error("Maglev hash seed is not base64")]
    SeedBase64(#[source] base64::DecodeError),
    #[error("Maglev hash seed is {0} bytes, not 12")]
    SeedLength(usize),
}

/// Where a backend's preference list starts in the table, and its stride:
/// its permutation of the table's entries is `offset + j·skip (mod M)`,
/// which visits every entry because M is prime and `0 < skip < M`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permutation {
    pub offset: u32,
    pub skip: u32,
}

impl Permutation {
    /// The permutation of `backend` in a table of `m` entries.
    pub fn of(backend: &SocketAddr, m: TableSize, seed: &HashSeed) -> Self {
        let name = backend.to_string();
        let hash = murmur3::murmur3_x64_128(&mut Cursor::new(name.as_bytes()), seed.permutation)
            .expect("reading from memory cannot fail");
        let (low, high) = (hash as u64, (hash >> 64) as u64);
        let m = u64::from(m.get());
        // Both below m, which is a u32.
        Self {
            offset: (low % m) as u32,
            skip: (high % (m - 1) + 1) as u32,
        }
    }
}

/// The lookup table of `backends` in `m` entries: each entry an index into
/// `backends`. Empty for no backends.
///
/// The backends take turns in the order of their addresses, whatever the
/// order of the slice, so that every node builds the same table from the
/// same set.
pub fn lookup_table(backends: &[SocketAddr], m: TableSize, seed: &HashSeed) -> Vec<u32> {
    weighted_lookup_table(backends, &[], m, seed)
}

/// [`lookup_table`] with each backend owning entries in proportion to its
/// weight in `weights` (parallel to `backends`, each nonzero; empty: all
/// equal, the unweighted table).
pub fn weighted_lookup_table(
    backends: &[SocketAddr],
    weights: &[u16],
    m: TableSize,
    seed: &HashSeed,
) -> Vec<u32> {
    let mut order: Vec<usize> = (0..backends.len()).collect();
    order.sort_by_key(|&i| backends[i]);
    order.dedup_by_key(|i| backends[*i]);
    let permutations: Vec<Permutation> = order
        .iter()
        .map(|&i| Permutation::of(&backends[i], m, seed))
        .collect();
    let weights: Vec<u16> = if weights.is_empty() {
        Vec::new()
    } else {
        order.iter().map(|&i| weights[i]).collect()
    };
    populate(&permutations, &weights, m.get())
        .into_iter()
        .map(|turn| order[turn as usize] as u32)
        .collect()
}

/// The paper's Pseudocode 1: backends take turns, in the order of
/// `permutations`, each claiming the next entry of its permutation that is
/// still free, until all `m` entries are claimed. Entries are indices into
/// `permutations`.
///
/// Weighted (`weights` parallel to `permutations`, else all equal), as
/// Katran and Cilium weigh it: a backend takes its turn in a round only
/// when its credit, grown by its weight each round, reaches the heaviest
/// weight, so each owns entries in proportion to its weight. Equal weights
/// take every turn: the unweighted table.
fn populate(permutations: &[Permutation], weights: &[u16], m: u32) -> Vec<u32> {
    const FREE: u32 = u32::MAX;
    if permutations.is_empty() {
        return Vec::new();
    }
    let heaviest = weights.iter().copied().max().map_or(1, u32::from);
    let weight = |i: usize| weights.get(i).map_or(heaviest, |&w| u32::from(w));
    let mut credit = vec![0u32; permutations.len()];
    let mut entry = vec![FREE; m as usize];
    // Each backend's next candidate entry: its permutation walked lazily,
    // so memory is O(N), not the paper's O(M·N) permutation matrix.
    let mut next: Vec<u32> = permutations.iter().map(|p| p.offset).collect();
    let mut filled = 0;
    'fill: loop {
        for (i, p) in permutations.iter().enumerate() {
            credit[i] += weight(i);
            if credit[i] < heaviest {
                continue;
            }
            credit[i] -= heaviest;
            let mut c = next[i];
            while entry[c as usize] != FREE {
                c = step(c, p.skip, m);
            }
            entry[c as usize] = i as u32;
            next[i] = step(c, p.skip, m);
            filled += 1;
            if filled == m {
                break 'fill;
            }
        }
    }
    entry
}

/// The entry after `c` in a permutation of stride `skip`.
fn step(c: u32, skip: u32, m: u32) -> u32 {
    // Below 2·m, which fits: m ≤ 131071.
    (c + skip) % m
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use super::*;

    fn backends(n: u32) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a2a_0000 + i)), 8080))
            .collect()
    }

    /// How many entries of equal-sized tables `a` and `b` name different
    /// backends (by address).
    fn moved(a: &[u32], a_of: &[SocketAddr], b: &[u32], b_of: &[SocketAddr]) -> usize {
        a.iter()
            .zip(b)
            .filter(|(x, y)| a_of[**x as usize] != b_of[**y as usize])
            .count()
    }

    /// The paper's example (Table 1, M = 7): B0 offset 3 skip 4, B1
    /// offset 0 skip 2, B2 offset 3 skip 1 fill the table B1 B0 B1 B0 B2
    /// B2 B0. Without B1, by hand from the same permutations: B0 B0 B0 B0
    /// B2 B2 B2 (B1's entries 0 and 2 move, and entry 6 with them).
    #[test]
    fn the_papers_example() {
        let p = |offset, skip| Permutation { offset, skip };
        assert_eq!(
            populate(&[p(3, 4), p(0, 2), p(3, 1)], &[], 7),
            [1, 0, 1, 0, 2, 2, 0]
        );
        // B0 and B2, now indices 0 and 1.
        assert_eq!(populate(&[p(3, 4), p(3, 1)], &[], 7), [0, 0, 0, 0, 1, 1, 1]);
    }

    /// The lazily walked permutation fills as the paper's matrix does.
    #[test]
    fn the_lazy_walk_is_the_papers_permutation() {
        let seed = HashSeed::default();
        for m in [251, 1021] {
            let m = TableSize::try_from(m).unwrap();
            let perms: Vec<Permutation> = backends(13)
                .iter()
                .map(|b| Permutation::of(b, m, &seed))
                .collect();
            let m = m.get() as usize;
            // The paper: permutation[i][j] = (offset + j·skip) mod M, as a
            // matrix; next[i] counts the entries of it already tried.
            let matrix: Vec<Vec<usize>> = perms
                .iter()
                .map(|p| {
                    (0..m)
                        .map(|j| (p.offset as usize + j * p.skip as usize) % m)
                        .collect()
                })
                .collect();
            let mut next = vec![0; perms.len()];
            let mut entry = vec![usize::MAX; m];
            let mut n = 0;
            'paper: loop {
                for i in 0..perms.len() {
                    let mut c = matrix[i][next[i]];
                    while entry[c] != usize::MAX {
                        next[i] += 1;
                        c = matrix[i][next[i]];
                    }
                    entry[c] = i;
                    next[i] += 1;
                    n += 1;
                    if n == m {
                        break 'paper;
                    }
                }
            }
            let ours: Vec<usize> = populate(&perms, &[], m as u32)
                .into_iter()
                .map(|i| i as usize)
                .collect();
            assert_eq!(ours, entry, "M = {m}");
        }
    }

    #[test]
    fn every_permutation_visits_every_entry() {
        let seed = HashSeed::default();
        for &m in &TABLE_SIZES[..4] {
            let size = TableSize::try_from(m).unwrap();
            for b in backends(5) {
                let p = Permutation::of(&b, size, &seed);
                assert!(p.offset < m && (1..m).contains(&p.skip), "{p:?}");
                let mut seen = vec![false; m as usize];
                let mut c = p.offset;
                for _ in 0..m {
                    seen[c as usize] = true;
                    c = step(c, p.skip, m);
                }
                assert!(seen.iter().all(|s| *s), "{b} in M = {m}");
            }
        }
    }

    /// Two agents with the same seed build the same table, whatever order
    /// they learned the backends in; another seed builds another.
    #[test]
    fn the_same_seed_builds_the_same_table_on_every_node() {
        let m = TableSize::DEFAULT;
        let seed = HashSeed::default();
        let mut b = backends(40);
        b.push("[fd00::7]:8080".parse().unwrap());
        let node1 = lookup_table(&b, m, &seed);
        let mut shuffled = b.clone();
        shuffled.reverse();
        shuffled.swap(3, 17);
        let node2 = lookup_table(&shuffled, m, &seed);
        assert_eq!(node1.len(), m.get() as usize);
        assert_eq!(moved(&node1, &b, &node2, &shuffled), 0);
        let other: HashSeed = "AAAAAAAAAAAAAAAA".parse().unwrap();
        let node3 = lookup_table(&b, m, &other);
        assert!(moved(&node1, &b, &node3, &b) > node1.len() / 2);
    }

    /// Removing one backend of N moves its own 1/N of the entries and a
    /// little more: within one point more at M > 600·N, within three at
    /// M > 100·N (the paper's Figure 12: a larger table moves less).
    #[test]
    fn removing_one_of_n_backends_moves_about_one_nth() {
        let seed = HashSeed::default();
        for (n, m, slack) in [
            (2, 251, 0.01),
            (10, 8191, 0.01),
            (20, 16381, 0.01),
            (100, 65521, 0.01),
            (10, 1021, 0.03),
            (100, 16381, 0.03),
            (1000, 131071, 0.01),
        ] {
            let m = TableSize::try_from(m).unwrap();
            let all = backends(n);
            let before = lookup_table(&all, m, &seed);
            for gone in [0, n as usize / 2, n as usize - 1] {
                let mut rest = all.clone();
                rest.remove(gone);
                let after = lookup_table(&rest, m, &seed);
                let moved = moved(&before, &all, &after, &rest);
                let owned = before.iter().filter(|&&i| i as usize == gone).count();
                let share = moved as f64 / f64::from(m.get());
                let ideal = 1.0 / f64::from(n);
                assert!(
                    moved >= owned && share <= ideal + slack,
                    "N = {n}, M = {m}: {share:.4} moved, ideal {ideal:.4}"
                );
            }
        }
    }

    /// Every backend owns M/N entries within 1% at M > 100·N (the paper:
    /// each owns ⌊M/N⌋ or ⌈M/N⌉).
    #[test]
    fn backend_shares_are_within_one_percent_of_equal() {
        let seed = HashSeed::default();
        for (n, m) in [(1, 251), (2, 251), (7, 1021), (100, 16381), (1000, 131071)] {
            let table = lookup_table(&backends(n), TableSize::try_from(m).unwrap(), &seed);
            let mut counts = vec![0u32; n as usize];
            for e in table {
                counts[e as usize] += 1;
            }
            let equal = f64::from(m) / f64::from(n);
            for (i, c) in counts.iter().enumerate() {
                let off = (f64::from(*c) - equal).abs() / equal;
                assert!(off < 0.01, "N = {n}, M = {m}: backend {i} owns {c}");
            }
        }
    }

    #[test]
    fn duplicate_backends_count_once() {
        let b: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let c = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 80);
        let table = lookup_table(
            &[b, c, b],
            TableSize::try_from(251).unwrap(),
            &HashSeed::default(),
        );
        assert!(table.iter().all(|&i| i < 2));
        assert!(lookup_table(&[], TableSize::DEFAULT, &HashSeed::default()).is_empty());
    }

    #[test]
    fn settings_are_checked() {
        assert!(matches!(
            "16381".parse::<TableSize>(),
            Ok(TableSize::DEFAULT)
        ));
        assert!(matches!(
            "16383".parse::<TableSize>(),
            Err(MaglevError::TableSize(16383))
        ));
        assert!(matches!(
            "big".parse::<TableSize>(),
            Err(MaglevError::TableSizeText(..))
        ));
        assert!(matches!(
            "not base64!".parse::<HashSeed>(),
            Err(MaglevError::SeedBase64(_))
        ));
        assert!(matches!(
            "AAAA".parse::<HashSeed>(),
            Err(MaglevError::SeedLength(3))
        ));
        // Cilium's default: its words as Cilium reads them (big-endian).
        let seed = HashSeed::default();
        assert_eq!(seed.permutation, 0x24b7_ef82);
    }

    /// The programs' flow hash is MurmurHash3 (x86, 32 bits) of the flow's
    /// bytes: source address, ports, protocol word, as `murmur3` computes
    /// it from the bytes.
    #[test]
    fn flow_hash_is_murmur3_of_the_flow_bytes() {
        use lb_common::{FlowHash, ports_word};
        let seed = HashSeed::default().flow[0];
        let (sport, dport) = (40_000u16, 30_080u16);
        let mut bytes = vec![192, 0, 2, 7];
        bytes.extend(sport.to_be_bytes());
        bytes.extend(dport.to_be_bytes());
        bytes.extend([6, 0, 0, 0]);
        let want = murmur3::murmur3_32(&mut Cursor::new(&bytes), seed).unwrap();
        let word = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap());
        let got = FlowHash::new(seed)
            .word(word(&bytes[0..4]))
            .word(ports_word(
                u16::from_ne_bytes(sport.to_be_bytes()),
                u16::from_ne_bytes(dport.to_be_bytes()),
            ))
            .word(6)
            .finish();
        assert_eq!(got, want);
        // IPv6: four address words.
        let mut bytes6: Vec<u8> = "2001:db8::17".parse::<Ipv6Addr>().unwrap().octets().into();
        bytes6.extend(&bytes[4..]);
        let want6 = murmur3::murmur3_32(&mut Cursor::new(&bytes6), seed).unwrap();
        let got6 = (0..6)
            .fold(FlowHash::new(seed), |h, i| {
                h.word(word(&bytes6[4 * i..4 * i + 4]))
            })
            .finish();
        assert_eq!(got6, want6);
    }

    /// Each backend owns entries in proportion to its weight, within 1% of
    /// the table at M > 100·N; equal weights give the unweighted table.
    #[test]
    fn weighted_backends_own_shares_within_one_percent_of_their_weights() {
        let seed = HashSeed::default();
        for (weights, m) in [
            (vec![1u16, 3], 251),
            (vec![100, 100, 0, 50], 1021),
            (vec![65535, 1, 300, 7, 42], 16381),
            ((1..=20).map(|i| i * 13).collect::<Vec<u16>>(), 4093),
            ((1..=100).map(|i| 1 + i % 7).collect(), 16381),
        ] {
            let m = TableSize::try_from(m).unwrap();
            let b = backends(weights.len() as u32);
            let table = weighted_lookup_table(&b, &weights, m, &seed);
            let sum: f64 = weights.iter().map(|&w| f64::from(w)).sum();
            let mut worst = 0f64;
            for (i, &w) in weights.iter().enumerate() {
                let owned = table.iter().filter(|&&e| e as usize == i).count();
                let share = owned as f64 / f64::from(m.get());
                let want = f64::from(w) / sum;
                assert!(
                    (share - want).abs() <= 0.01,
                    "backend {i} of weight {w} owns {share:.4}, want {want:.4} (M = {m})"
                );
                worst = worst.max((share - want).abs());
            }
            eprintln!(
                "N = {}, M = {m}: shares within {:.3}% of the weights",
                weights.len(),
                100.0 * worst
            );
        }
        let b = backends(10);
        let m = TableSize::DEFAULT;
        assert_eq!(
            weighted_lookup_table(&b, &[7; 10], m, &seed),
            lookup_table(&b, m, &seed)
        );
    }
}
