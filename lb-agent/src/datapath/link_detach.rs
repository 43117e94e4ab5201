//! Detaching a pinned link's program whoever else holds the link.
//!
//! Unpinning a link (removing its pin, or renaming another pin over it)
//! drops only the pin's reference, and not at once: bpffs drops it when it
//! frees the inode, from an RCU callback, and the link is released from a
//! workqueue after that (measured on this kernel: the old program was still
//! attached right after the rename in 94 of 100 trials at load 2, for up to
//! 5 ms, and in 177 of 200 at load 13, for up to 75 ms). And the program
//! stays attached for as long as any process holds a descriptor of the
//! link (a `bpftool`, a monitor or a backup that opened the pin). A cgroup
//! hook runs every program attached there, the oldest first, so an old
//! `connect4` left behind keeps translating from the maps it was loaded
//! with, which after a migration the new programs no longer read (the
//! migration's grace period and last copy assume that no old program runs
//! once the links are replaced). `BPF_LINK_DETACH` detaches the program
//! before it returns, whoever holds the link; the link stays valid,
//! defunct, until its last reference goes.
//!
//! aya 0.14 has no call for it, hence the raw `bpf(2)` of [`crate::bpf_sys`].

use std::{
    ffi::CString,
    io,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
        unix::ffi::OsStrExt as _,
    },
    path::Path,
};

use crate::bpf_sys::bpf;

const BPF_OBJ_GET: libc::c_long = 7;
const BPF_LINK_DETACH: libc::c_long = 34;

/// `union bpf_attr`'s `BPF_OBJ_GET` prefix.
#[repr(C)]
#[derive(Default)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// `union bpf_attr`'s `link_detach` prefix.
#[repr(C)]
#[derive(Default)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// A link opened from its pin, to be detached once its replacement runs.
#[derive(Debug)]
pub(super) struct OldLink(OwnedFd);

impl OldLink {
    /// Opens the object pinned at `path`; `None` if nothing is pinned
    /// there.
    pub(super) fn open(path: &Path) -> io::Result<Option<Self>> {
        let name = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut attr = ObjGetAttr {
            pathname: name.as_ptr() as u64,
            ..ObjGetAttr::default()
        };
        // SAFETY: `ObjGetAttr` is `BPF_OBJ_GET`'s prefix; `name` is a
        // NUL-terminated string that outlives the call.
        match unsafe { bpf(BPF_OBJ_GET, &mut attr) } {
            // SAFETY: a new descriptor the kernel just returned, owned by
            // nothing else.
            Ok(fd) => Ok(Some(Self(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Detaches the link's program from its hook, whoever holds the link.
    /// A link already detached (its cgroup or device gone) detaches again
    /// without error.
    pub(super) fn detach(self) -> io::Result<()> {
        let mut attr = LinkDetachAttr {
            link_fd: self.0.as_raw_fd() as u32,
        };
        // SAFETY: `LinkDetachAttr` is `BPF_LINK_DETACH`'s prefix; it holds
        // no pointer, and `self.0` is open for the call.
        unsafe { bpf(BPF_LINK_DETACH, &mut attr) }.map(drop)
    }
}
