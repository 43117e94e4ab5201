//! Map entries from the bytes the kernel hands back: where a map's raw
//! keys and values become the `lb-common` types. Pure, so that the
//! decoding `lb-agent dump` and the reconciler rely on can be fuzzed
//! (`fuzz/fuzz_targets/dump_decode.rs`) without BPF maps.

use aya::Pod;

/// Raw keys and values that are not whole entries of one map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{keys} key bytes and {values} value bytes are not the same number of \
     {key_size}-byte keys and {value_size}-byte values"
)]
pub struct DecodeError {
    pub keys: usize,
    pub values: usize,
    pub key_size: usize,
    pub value_size: usize,
}

/// The entries whose keys lie back to back in `keys` and whose values lie
/// back to back in `values` (as a batch lookup fills its two buffers).
/// Every bit pattern is a valid `K` and `V` (`Pod`), so only the lengths
/// can be wrong.
pub fn entries<K: Pod, V: Pod>(keys: &[u8], values: &[u8]) -> Result<Vec<(K, V)>, DecodeError> {
    let (ks, vs) = (size_of::<K>(), size_of::<V>());
    let n = keys.len().checked_div(ks).unwrap_or(0);
    let whole = keys.len() == n * ks && values.len() == n * vs;
    // A zero-sized type would make any number of entries fit: none here.
    if !whole || ks == 0 || vs == 0 {
        return Err(DecodeError {
            keys: keys.len(),
            values: values.len(),
            key_size: ks,
            value_size: vs,
        });
    }
    Ok(keys
        .chunks_exact(ks)
        .zip(values.chunks_exact(vs))
        .map(|(k, v)| (read(k), read(v)))
        .collect())
}

/// An array's elements in use: an array element always exists, and a free
/// one is all zero.
pub fn in_use<K, V: Default + PartialEq>(entries: &mut Vec<(K, V)>) {
    let free = V::default();
    entries.retain(|(_, v)| *v != free);
}

/// `bytes` as a `T`; `bytes` holds exactly `size_of::<T>()` of them.
fn read<T: Pod>(bytes: &[u8]) -> T {
    assert_eq!(bytes.len(), size_of::<T>(), "one whole value");
    // SAFETY: `bytes` holds size_of::<T>() readable bytes (asserted above;
    // the callers pass `chunks_exact` chunks), the read makes no alignment
    // assumption, and `T: Pod` is valid for every bit pattern.
    unsafe { bytes.as_ptr().cast::<T>().read_unaligned() }
}

#[cfg(test)]
mod tests {
    use lb_common::{Frontend4Key, FrontendId};

    use super::*;

    #[test]
    fn entries_are_read_back_to_back_in_native_order() {
        let keys = [10, 0, 0, 1, 0, 80, 6, 0, 10, 0, 0, 2, 0, 53, 17, 0];
        let values = [7u32.to_ne_bytes(), 9u32.to_ne_bytes()].concat();
        let got = entries::<Frontend4Key, FrontendId>(&keys, &values).unwrap();
        let key = |addr_be, port: u16, proto| Frontend4Key {
            addr_be,
            port_be: port.to_be(),
            proto,
            scope: 0,
        };
        assert_eq!(
            got,
            [
                (key([10, 0, 0, 1], 80, 6), FrontendId { id: 7 }),
                (key([10, 0, 0, 2], 53, 17), FrontendId { id: 9 }),
            ]
        );
        assert_eq!(entries::<Frontend4Key, FrontendId>(&[], &[]), Ok(vec![]));
    }

    #[test]
    fn partial_entries_are_refused() {
        let err = |k: usize, v: usize| entries::<u32, u64>(&vec![0; k], &vec![0; v]).unwrap_err();
        // A key cut short, a value cut short, one value too many.
        assert_eq!(err(7, 16).keys, 7);
        assert_eq!(err(8, 15).values, 15);
        assert_eq!(err(8, 24).value_size, 8);
    }

    #[test]
    fn free_array_elements_are_dropped() {
        let mut all = vec![(0u32, 0u64), (1, 5), (2, 0)];
        in_use(&mut all);
        assert_eq!(all, [(1, 5)]);
    }
}
