//! Single-element `bpf()` commands that aya 0.14 has no fitting API for:
//! an insert that must not replace a newer entry (`BPF_NOEXIST`, reporting
//! a present key as such rather than as an error), setting or emptying
//! slot 0 of an array of maps (aya's `ArrayOfMaps` cannot delete), and
//! reading a value whose size only the map knows (an older layout's).

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
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
    value: *mut u8,
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
    // reads them (and writes the value of a lookup).
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
    let v = (value as *const V).cast::<u8>().cast_mut();
    match call(BPF_MAP_UPDATE_ELEM, map, k, v, BPF_NOEXIST) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The value of `key` in `map`, as `value_size` bytes (the map's value
/// size, which the caller read from the map); `None` if absent.
pub fn lookup_raw<K: aya::Pod>(
    map: BorrowedFd<'_>,
    key: &K,
    value_size: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut value = vec![0u8; value_size];
    let k = (key as *const K).cast::<u8>();
    match call(BPF_MAP_LOOKUP_ELEM, map, k, value.as_mut_ptr(), 0) {
        Ok(()) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
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
        (&fd as *const u32).cast::<u8>().cast_mut(),
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
        std::ptr::null_mut(),
        0,
    ) {
        Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
        _ => Ok(()),
    }
}
