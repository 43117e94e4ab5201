//! Single-element `bpf()` commands that aya 0.14 has no fitting API for:
//! an insert that must not replace a newer entry (`BPF_NOEXIST`, reporting
//! a present key as such rather than as an error), and setting or emptying
//! slot 0 of an array of maps (aya's `ArrayOfMaps` cannot delete).

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_ANY: u64 = 0;
const BPF_NOEXIST: u64 = 1;

/// The `elem` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad0: u32,
    key: u64,
    value: u64,
    flags: u64,
}
const _: () = assert!(size_of::<ElemAttr>() == 32);

/// Runs one element command on `map` with `key` and `value` (a null
/// pointer for none).
fn call(
    cmd: libc::c_long,
    map: BorrowedFd<'_>,
    key: *const u8,
    value: *const u8,
    flags: u64,
) -> io::Result<()> {
    let attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key as u64,
        value: value as u64,
        flags,
        ..ElemAttr::default()
    };
    // SAFETY: attr is a valid `bpf_attr.elem`; the caller passes a key (and
    // value) of the map's key (and value) size that outlive the call, which
    // only reads them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &attr as *const ElemAttr,
            size_of::<ElemAttr>() as libc::c_uint,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `key -> value` into `map` unless the key is present; whether it
/// was written. `K` and `V` must be exactly the map's key and value sizes,
/// which the caller checked against the map.
pub fn insert_absent<K: aya::Pod, V: aya::Pod>(
    map: BorrowedFd<'_>,
    key: &K,
    value: &V,
) -> io::Result<bool> {
    let k = (key as *const K).cast::<u8>();
    let v = (value as *const V).cast::<u8>();
    match call(BPF_MAP_UPDATE_ELEM, map, k, v, BPF_NOEXIST) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Puts `inner` in slot 0 of the array of maps `outer`. The kernel refuses
/// (`EINVAL`) a map whose type, key or value size or flags differ from the
/// slot's template.
pub fn set_inner(outer: BorrowedFd<'_>, inner: BorrowedFd<'_>) -> io::Result<()> {
    let key = 0u32;
    let fd = inner.as_raw_fd() as u32;
    call(
        BPF_MAP_UPDATE_ELEM,
        outer,
        (&key as *const u32).cast(),
        (&fd as *const u32).cast(),
        BPF_ANY,
    )
}

/// Empties slot 0 of the array of maps `outer`; an empty slot is fine.
pub fn clear_inner(outer: BorrowedFd<'_>) -> io::Result<()> {
    let key = 0u32;
    match call(
        BPF_MAP_DELETE_ELEM,
        outer,
        (&key as *const u32).cast(),
        std::ptr::null(),
        0,
    ) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(()),
    }
}
