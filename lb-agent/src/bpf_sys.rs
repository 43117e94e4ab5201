//! The raw `bpf(2)` call, for the commands aya 0.14 has no call for
//! (`BPF_LINK_DETACH`, and a socket iterator opened more than once).

use std::io;

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
///
/// `T` must be the `repr(C)` prefix of `union bpf_attr` that `cmd` reads,
/// and every pointer in `attr` must reference memory that outlives the
/// call.
pub(crate) unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: the caller's obligation: `attr` is a live, writable prefix
    // of `union bpf_attr` for `cmd` of the size passed, and its pointers
    // outlive the call; the kernel zero-fills the rest of the union.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A fresh BPF map for the tests (root only: fails loudly otherwise).
#[cfg(test)]
pub(crate) fn test_map(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd as _;

    lb_test_netns::require_root();
    /// The leading fields of `union bpf_attr` for `BPF_MAP_CREATE`.
    #[repr(C)]
    struct CreateAttr {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }
    let mut attr = CreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags: 0,
    };
    const BPF_MAP_CREATE: libc::c_long = 0;
    // SAFETY: `CreateAttr` is the prefix of `union bpf_attr` that
    // BPF_MAP_CREATE reads; it holds no pointers.
    let fd =
        unsafe { bpf(BPF_MAP_CREATE, &mut attr) }.unwrap_or_else(|e| panic!("BPF_MAP_CREATE: {e}"));
    // SAFETY: the kernel just gave us this fd, owned by nobody else.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
}
