//! Single-element `bpf()` commands that aya 0.14 has no fitting API for:
//! an insert that must not replace a newer entry (`BPF_NOEXIST`, reporting
//! a present key as such rather than as an error), setting or emptying
//! slot 0 of an array of maps (aya's `ArrayOfMaps` cannot delete), and
//! reading a value whose size only the map knows (an older layout's).

use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd},
};

use aya::{
    maps::{MapData, MapError, MapType},
    sys::SyscallError,
};

use super::batch::Typed;

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
///
/// # Safety
///
/// `key` must reference a live key of the map's key size, and `value`
/// (unless null) a live value of the map's value size, writable for a
/// lookup: the kernel reads (and writes) them at the map's sizes.
unsafe fn call(
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
    // SAFETY: attr is a valid `bpf_attr.elem`; its key (and value) are of
    // the map's key (and value) size and outlive the call (the caller's
    // obligation), which reads them (and writes the value of a lookup).
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
/// was written.
pub(super) fn insert_absent<K: aya::Pod, V: aya::Pod>(
    map: &Typed<K, V>,
    key: &K,
    value: &V,
) -> io::Result<bool> {
    let k = (key as *const K).cast::<u8>();
    let v = (value as *const V).cast::<u8>().cast_mut();
    // SAFETY: the map's keys are `K`s and its values `V`s (`Typed`), and
    // `key` and `value` outlive the call, which only reads them.
    match unsafe {
        call(
            BPF_MAP_UPDATE_ELEM,
            map.map().fd().as_fd(),
            k,
            v,
            BPF_NOEXIST,
        )
    } {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The value of `key` in `map`, as the bytes of the map's value size,
/// whatever it is; `None` if absent.
pub(super) fn lookup_raw<K: aya::Pod>(map: &MapData, key: &K) -> Result<Option<Vec<u8>>, MapError> {
    let info = map.info()?;
    let (size, expected) = (size_of::<K>(), info.key_size() as usize);
    if size != expected {
        return Err(MapError::InvalidKeySize { size, expected });
    }
    let mut value = vec![0u8; info.value_size() as usize];
    let k = (key as *const K).cast::<u8>();
    // SAFETY: `key` is of the map's key size and `value` holds the map's
    // value size (both as the kernel reported them just now); both
    // outlive the call.
    match unsafe {
        call(
            BPF_MAP_LOOKUP_ELEM,
            map.fd().as_fd(),
            k,
            value.as_mut_ptr(),
            0,
        )
    } {
        Ok(()) => Ok(Some(value)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(MapError::SyscallError(SyscallError {
            call: "bpf_map_lookup_elem",
            io_error: e,
        })),
    }
}

/// An array of maps (a previous-map slot): its keys are `u32` indices and
/// its values `u32` map fds, whatever its inner maps.
#[derive(Debug)]
pub(super) struct Slots(MapData);

impl Slots {
    /// `map`, if the kernel reports it as an array of maps.
    pub(super) fn new(map: MapData) -> Result<Self, MapError> {
        match map.info()?.map_type()? {
            MapType::ArrayOfMaps => Ok(Self(map)),
            other => Err(MapError::InvalidMapType {
                map_type: other as u32,
            }),
        }
    }

    /// Puts `inner` in slot 0. The kernel refuses (`EINVAL`) a map whose
    /// type, key or value size or flags differ from the slot's template.
    pub(super) fn set_inner(&self, inner: BorrowedFd<'_>) -> io::Result<()> {
        let key = 0u32;
        let fd = inner.as_raw_fd() as u32;
        // SAFETY: an array of maps has 4-byte keys and values (fds); `key`
        // and `fd` outlive the call, which only reads them.
        unsafe {
            call(
                BPF_MAP_UPDATE_ELEM,
                self.0.fd().as_fd(),
                (&key as *const u32).cast(),
                (&fd as *const u32).cast::<u8>().cast_mut(),
                BPF_ANY,
            )
        }
    }

    /// Empties slot 0; an empty slot is fine.
    pub(super) fn clear_inner(&self) -> io::Result<()> {
        let key = 0u32;
        // SAFETY: an array of maps has 4-byte keys; `key` outlives the
        // call, which only reads it.
        let done = unsafe {
            call(
                BPF_MAP_DELETE_ELEM,
                self.0.fd().as_fd(),
                (&key as *const u32).cast(),
                std::ptr::null_mut(),
                0,
            )
        };
        match done {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
            _ => Ok(()),
        }
    }
}
