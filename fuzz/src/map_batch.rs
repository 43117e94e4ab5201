//! Reads a whole hash map with `BPF_MAP_LOOKUP_BATCH`: one system call per
//! 256 entries where aya's iterator makes two per entry, which made the
//! flow maps' snapshots most of `packet_programs`' time.

use std::{
    collections::BTreeMap,
    io,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{
    Pod,
    maps::{HashMap, IterableMap as _, MapData},
};

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// Entries asked for per call.
const CHUNK: usize = 256;

/// `union bpf_attr`'s `batch` member, as the kernel lays it out.
#[repr(C)]
#[derive(Default)]
struct Batch {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every entry of `map`.
pub fn entries<K: Pod + Ord, V: Pod>(map: &HashMap<MapData, K, V>) -> io::Result<BTreeMap<K, V>> {
    let fd = map.map().fd().as_fd().as_raw_fd();
    let mut keys = vec![0u8; CHUNK * size_of::<K>()];
    let mut values = vec![0u8; CHUNK * size_of::<V>()];
    // A hash map's batch cursor is a bucket number (a u32); room for more.
    let mut cursor = [0u64; 2];
    let mut next = [0u64; 2];
    let mut first = true;
    let mut out = BTreeMap::new();
    loop {
        let mut attr = Batch {
            in_batch: if first { 0 } else { cursor.as_ptr() as u64 },
            out_batch: next.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: CHUNK as u32,
            map_fd: fd as u32,
            ..Batch::default()
        };
        // SAFETY: `attr` is a valid BPF_MAP_LOOKUP_BATCH attribute: `keys`
        // and `values` hold `count` keys and values of the map's sizes
        // (`K` and `V` are its key and value types), the cursors 16 bytes
        // each, and all of them live across the call.
        #[expect(unsafe_code, reason = "aya has no batch lookup")]
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &raw mut attr,
                size_of::<Batch>(),
            )
        };
        let err = (ret != 0).then(io::Error::last_os_error);
        let n = attr.count as usize;
        for i in 0..n {
            let k = &keys[i * size_of::<K>()..(i + 1) * size_of::<K>()];
            let v = &values[i * size_of::<V>()..(i + 1) * size_of::<V>()];
            // SAFETY: `k` and `v` hold exactly one `K` and one `V`, and
            // every bit pattern of a `Pod` is valid; unaligned reads.
            #[expect(unsafe_code, reason = "bytes the kernel wrote as K and V")]
            let (k, v) = unsafe {
                (
                    std::ptr::read_unaligned(k.as_ptr().cast::<K>()),
                    std::ptr::read_unaligned(v.as_ptr().cast::<V>()),
                )
            };
            out.insert(k, v);
        }
        match err {
            // The end of the map.
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
            Some(e) => return Err(e),
            None => {
                cursor = next;
                first = false;
            }
        }
    }
}
