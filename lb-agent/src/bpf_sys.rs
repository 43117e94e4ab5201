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
