//! `BPF_MAP_{UPDATE,DELETE,LOOKUP}_BATCH`: many map operations in one
//! syscall (kernel >= 5.6). aya 0.14 has no batch API, and one `bpf()` call
//! per entry was most of a cold sync's time.

use std::{
    io,
    marker::PhantomData,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::maps::{MapData, MapError, MapType};

use super::decode;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;

/// Element flag: write the value in place under its `bpf_spin_lock`. The
/// only element flag the batch commands take (`BPF_NOEXIST` is EINVAL).
pub(super) const BPF_F_LOCK: u64 = 4;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}
const _: () = assert!(size_of::<BatchAttr>() == 56);

/// Runs one batch command; returns the kernel's count with the result.
///
/// # Safety
///
/// `attr`'s pointers must be null or reference live buffers of `count`
/// entries at the map's own key and value sizes (the kernel steps through
/// them by those, whatever the caller meant), and `in_batch`/`out_batch`
/// must hold a resume token (at least the map's key size, and 4 bytes).
unsafe fn call(cmd: libc::c_long, attr: &mut BatchAttr) -> (usize, io::Result<()>) {
    // SAFETY: attr is a valid `bpf_attr.batch`; the kernel stays inside the
    // buffers its pointers reference, which the caller sized and keeps
    // alive, and writes the processed count into attr.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut BatchAttr,
            size_of::<BatchAttr>() as libc::c_uint,
        )
    };
    if r == 0 {
        (attr.count as usize, Ok(()))
    } else {
        (attr.count as usize, Err(io::Error::last_os_error()))
    }
}

/// How many entries a failed update or delete of `requested` took effect
/// for. An entry that fails stops the batch at its index, below
/// `requested`; a command refused up front leaves the count as it was.
fn processed(count: usize, requested: usize) -> usize {
    if count >= requested { 0 } else { count }
}

/// A map whose entries are `K -> V`: the kernel reported its key size as
/// `K`'s and its value size as `V`'s, one value per key (not per CPU).
/// The batch commands step through their buffers by the map's sizes, so
/// only such a map may have them sized by `K` and `V`.
#[derive(Debug)]
pub(super) struct Typed<K, V> {
    map: MapData,
    _entries: PhantomData<fn() -> (K, V)>,
}

impl<K: aya::Pod, V: aya::Pod> Typed<K, V> {
    /// `map`, if its sizes (as the kernel reports them) are `K`'s and `V`'s.
    pub(super) fn new(map: MapData) -> Result<Self, MapError> {
        let info = map.info()?;
        let map_type = info.map_type()?;
        if matches!(
            map_type,
            MapType::PerCpuHash | MapType::PerCpuArray | MapType::LruPerCpuHash
        ) {
            return Err(MapError::InvalidMapType {
                map_type: map_type as u32,
            });
        }
        let (size, expected) = (size_of::<K>(), info.key_size() as usize);
        if size != expected {
            return Err(MapError::InvalidKeySize { size, expected });
        }
        let (size, expected) = (size_of::<V>(), info.value_size() as usize);
        if size != expected {
            return Err(MapError::InvalidValueSize { size, expected });
        }
        Ok(Self {
            map,
            _entries: PhantomData,
        })
    }

    pub(super) fn map(&self) -> &MapData {
        &self.map
    }

    fn raw_fd(&self) -> u32 {
        self.map.fd().as_fd().as_raw_fd() as u32
    }

    /// Writes `keys[i] -> values[i]` in order with `elem_flags`. On
    /// failure, returns how many were written.
    pub(super) fn update(
        &self,
        keys: &[K],
        values: &[V],
        elem_flags: u64,
    ) -> Result<(), (usize, io::Error)> {
        assert_eq!(keys.len(), values.len(), "one value per key");
        if keys.is_empty() {
            return Ok(());
        }
        let count =
            u32::try_from(keys.len()).map_err(|_| (0, io::Error::other("batch too large")))?;
        let mut attr = BatchAttr {
            keys: keys.as_ptr() as u64,
            values: values.as_ptr() as u64,
            count,
            map_fd: self.raw_fd(),
            elem_flags,
            ..BatchAttr::default()
        };
        // SAFETY: `keys` and `values` hold `count` entries each, at the
        // map's key and value sizes (`Self::new` checked them), and
        // outlive the call.
        match unsafe { call(BPF_MAP_UPDATE_BATCH, &mut attr) } {
            (_, Ok(())) => Ok(()),
            (count, Err(e)) => Err((processed(count, keys.len()), e)),
        }
    }

    /// Deletes `keys` in order (hash maps). A key that is absent is
    /// skipped, not an error. On failure, returns how many keys were
    /// processed.
    pub(super) fn delete(&self, keys: &[K]) -> Result<(), (usize, io::Error)> {
        let mut start = 0;
        while start < keys.len() {
            let rest = &keys[start..];
            let count = u32::try_from(rest.len())
                .map_err(|_| (start, io::Error::other("batch too large")))?;
            let mut attr = BatchAttr {
                keys: rest.as_ptr() as u64,
                count,
                map_fd: self.raw_fd(),
                ..BatchAttr::default()
            };
            // SAFETY: `rest` holds `count` keys at the map's key size
            // (`Self::new` checked it) and outlives the call.
            let (count, result) = unsafe { call(BPF_MAP_DELETE_BATCH, &mut attr) };
            match result {
                Ok(()) => return Ok(()),
                // The batch stops at a missing key: step over it and go on.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => start += count + 1,
                Err(e) => return Err((start + processed(count, rest.len()), e)),
            }
        }
        Ok(())
    }

    /// Reads every entry of a hash or array map. The kernel fills byte
    /// buffers; [`decode::entries`] makes them entries.
    pub(super) fn lookup_all(&self) -> io::Result<Vec<(K, V)>> {
        let (ks, vs) = (size_of::<K>(), size_of::<V>());
        let mut out = Vec::new();
        let mut chunk = 4096usize;
        // The resume token: a bucket index (hash) or the last key (array);
        // 8-byte aligned and at least as large as either.
        let mut token = vec![0u64; ks.div_ceil(8).max(1)];
        let mut next = token.clone();
        let mut first = true;
        loop {
            let mut keys = vec![0u8; chunk * ks];
            let mut values = vec![0u8; chunk * vs];
            let mut attr = BatchAttr {
                in_batch: if first { 0 } else { token.as_ptr() as u64 },
                out_batch: next.as_mut_ptr() as u64,
                keys: keys.as_mut_ptr() as u64,
                values: values.as_mut_ptr() as u64,
                count: chunk as u32,
                map_fd: self.raw_fd(),
                ..BatchAttr::default()
            };
            // SAFETY: `keys` and `values` hold `chunk` entries at the map's
            // key and value sizes (`Self::new` checked them), the tokens at
            // least one key and 8 bytes; all outlive the call.
            let (n, result) = unsafe { call(BPF_MAP_LOOKUP_BATCH, &mut attr) };
            let last = match result {
                Ok(()) => false,
                // ENOENT: this was the last batch (possibly empty).
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
                // One hash bucket holds more entries than the chunk.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    chunk *= 2;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let n = n.min(chunk);
            let read =
                decode::entries(&keys[..n * ks], &values[..n * vs]).map_err(io::Error::other)?;
            out.extend(read);
            if last {
                return Ok(out);
            }
            token.copy_from_slice(&next);
            first = false;
        }
    }
}

/// Reads a whole `K -> V` map with [`Typed::lookup_all`], for the
/// `packet_programs` fuzz target, which holds aya's maps and snapshots
/// them after every frame.
#[cfg(feature = "fuzzing")]
#[derive(Debug)]
pub struct Reader<K, V>(Typed<K, V>);

#[cfg(feature = "fuzzing")]
impl<K: aya::Pod, V: aya::Pod> Reader<K, V> {
    /// A reader of `map` (its own descriptor of it), if its sizes are
    /// `K`'s and `V`'s.
    pub fn new(map: &MapData) -> Result<Self, MapError> {
        let fd = map.fd().as_fd().try_clone_to_owned()?;
        Ok(Self(Typed::new(MapData::from_fd(fd)?)?))
    }

    /// Every entry of the map.
    pub fn entries(&self) -> io::Result<Vec<(K, V)>> {
        self.0.lookup_all()
    }
}

/// On real BPF maps: needs root (CAP_BPF), and fails without it. Skipped
/// by `cargo test -p lb-agent --lib -- --skip privileged` (ARCHITECTURE.md,
/// "Testing tiers").
#[cfg(test)]
mod privileged {
    use super::*;
    use crate::bpf_sys::test_map;

    /// A fresh BPF map of `u32 -> u64` holding at most `max` entries.
    fn map(map_type: u32, max: u32) -> Typed<u32, u64> {
        Typed::new(MapData::from_fd(test_map(map_type, 4, 8, max)).unwrap()).unwrap()
    }

    const HASH: u32 = 1;
    const ARRAY: u32 = 2;
    const PERCPU_HASH: u32 = 5;

    #[test]
    fn a_type_whose_sizes_are_not_the_maps_is_refused() {
        let data = |map_type, key_size, value_size| {
            MapData::from_fd(test_map(map_type, key_size, value_size, 4)).unwrap()
        };
        // Keys or values smaller than the map's: the kernel would write
        // past the buffers sized by them.
        assert!(matches!(
            Typed::<u32, u64>::new(data(HASH, 8, 8)),
            Err(MapError::InvalidKeySize {
                size: 4,
                expected: 8
            })
        ));
        assert!(matches!(
            Typed::<u32, u32>::new(data(ARRAY, 4, 8)),
            Err(MapError::InvalidValueSize {
                size: 4,
                expected: 8
            })
        ));
        assert!(matches!(
            Typed::<u64, u64>::new(data(HASH, 4, 8)),
            Err(MapError::InvalidKeySize {
                size: 8,
                expected: 4
            })
        ));
        // One value per CPU: not a `V`.
        assert!(matches!(
            Typed::<u32, u64>::new(data(PERCPU_HASH, 4, 8)),
            Err(MapError::InvalidMapType {
                map_type: PERCPU_HASH
            })
        ));
        assert!(Typed::<u32, u64>::new(data(HASH, 4, 8)).is_ok());
    }

    #[test]
    fn a_full_map_reports_how_many_entries_were_written() {
        let m = map(HASH, 4);
        assert!(m.update(&[1, 2], &[10, 20], 0).is_ok());
        // Replacing keys that exist needs no room; the fifth key does not fit.
        let (written, e) = m
            .update(&[1, 2, 3, 4, 5, 6], &[1; 6], 0)
            .expect_err("the map holds four");
        assert_eq!(written, 4);
        assert_eq!(e.raw_os_error(), Some(libc::E2BIG), "{e}");
        assert!(m.update(&[], &[], 0).is_ok());
    }

    #[test]
    fn an_element_flag_other_than_lock_is_refused_before_any_write() {
        let m = map(HASH, 8);
        // BPF_NOEXIST: insert-only writes must be the caller's own guarantee.
        let (written, e) = m
            .update(&[1, 2], &[10, 20], 1)
            .expect_err("the batch commands take no BPF_NOEXIST");
        assert_eq!(written, 0);
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        assert!(m.lookup_all().unwrap().is_empty());
    }

    #[test]
    fn delete_skips_absent_keys_and_lookup_reads_everything_in_chunks() {
        let m = map(HASH, 10_000);
        let keys: Vec<u32> = (1..=9_000).collect();
        let values: Vec<u64> = keys.iter().map(|k| u64::from(*k) * 10).collect();
        m.update(&keys, &values, 0).unwrap();
        let all: Vec<(u32, u64)> = m.lookup_all().unwrap();
        assert_eq!(all.len(), 9_000, "more than one 4096-entry chunk");
        assert!(all.iter().all(|(k, v)| *v == u64::from(*k) * 10));
        // 5 and 7 twice: the second time they are absent.
        m.delete(&[5, 7, 5, 7, 8]).unwrap();
        let left: Vec<(u32, u64)> = m.lookup_all().unwrap();
        assert_eq!(left.len(), 8_997);
        assert!(!left.iter().any(|(k, _)| [5, 7, 8].contains(k)));
    }

    #[test]
    fn lookup_reads_arrays_and_an_empty_hash() {
        let a = map(ARRAY, 3);
        a.update(&[1], &[7], 0).unwrap();
        let all: Vec<(u32, u64)> = a.lookup_all().unwrap();
        assert_eq!(all, [(0, 0), (1, 7), (2, 0)]);
        let h = map(HASH, 3);
        assert!(h.lookup_all().unwrap().is_empty());
    }
}
