//! `BPF_MAP_UPDATE_BATCH`: many map updates in one syscall. aya 0.14 has no
//! batch API, and one `bpf()` call per entry was most of a cold sync's time
//! (the kernel copies and allocates per call).

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

/// `BPF_MAP_UPDATE_BATCH` from `enum bpf_cmd` (kernel >= 5.6).
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;

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

/// Writes `keys[i] -> values[i]` in order (`BPF_ANY`). `K` and `V` must be
/// the map's key and value layouts exactly, as the kernel steps through the
/// arrays by the map's key and value sizes. On failure returns how many
/// entries were written before it.
pub fn update<K: aya::Pod, V: aya::Pod>(
    map: BorrowedFd<'_>,
    keys: &[K],
    values: &[V],
) -> Result<(), (usize, io::Error)> {
    assert_eq!(keys.len(), values.len(), "one value per key");
    if keys.is_empty() {
        return Ok(());
    }
    let count = u32::try_from(keys.len()).map_err(|_| (0, io::Error::other("batch too large")))?;
    let mut attr = BatchAttr {
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count,
        map_fd: map.as_raw_fd() as u32,
        ..BatchAttr::default()
    };
    // SAFETY: attr describes `count` keys and values that live for the call;
    // the kernel only reads them, and writes the processed count into attr.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_BATCH,
            &mut attr as *mut BatchAttr,
            size_of::<BatchAttr>() as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err((attr.count as usize, io::Error::last_os_error()))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd as _, FromRawFd as _, OwnedFd};

    use super::*;

    /// A fresh BPF hash map of `u32 -> u64` holding at most `max` entries.
    fn hash_map(max: u32) -> OwnedFd {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (BPF)");
        // The leading fields of `union bpf_attr` for BPF_MAP_CREATE.
        #[repr(C)]
        struct CreateAttr {
            map_type: u32,
            key_size: u32,
            value_size: u32,
            max_entries: u32,
            map_flags: u32,
        }
        let attr = CreateAttr {
            map_type: 1, // BPF_MAP_TYPE_HASH
            key_size: 4,
            value_size: 8,
            max_entries: max,
            map_flags: 0,
        };
        // SAFETY: BPF_MAP_CREATE (0) reads attr and returns a new fd.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                0,
                &attr as *const CreateAttr,
                size_of::<CreateAttr>() as libc::c_uint,
            )
        };
        assert!(fd >= 0, "BPF_MAP_CREATE: {}", io::Error::last_os_error());
        // SAFETY: the kernel just gave us this fd.
        unsafe { OwnedFd::from_raw_fd(fd as i32) }
    }

    #[test]
    fn a_full_map_reports_how_many_entries_were_written() {
        let map = hash_map(4);
        assert!(update(map.as_fd(), &[1u32, 2], &[10u64, 20]).is_ok());
        // Replacing keys that exist needs no room; the fifth key does not fit.
        let (written, e) = update(map.as_fd(), &[1u32, 2, 3, 4, 5, 6], &[1u64; 6])
            .expect_err("the map holds four");
        assert_eq!(written, 4);
        assert_eq!(e.raw_os_error(), Some(libc::E2BIG), "{e}");
        assert!(update(map.as_fd(), &[] as &[u32], &[] as &[u64]).is_ok());
    }
}
