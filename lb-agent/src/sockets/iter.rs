//! The `lb_iter_udp` socket iterator, read in the calling thread's network
//! namespace: which UDP sockets there have `LB_SOCK_REVNAT` storage (a
//! connected socket's reverse-NAT entry lives only there, and `SOCK_DIAG`
//! reports no socket storage of UDP sockets).
//!
//! The agent loads the program once; each read makes a link and an
//! iterator of it (`BPF_LINK_CREATE`, `BPF_ITER_CREATE`). The kernel takes
//! the namespace to iterate from the thread that creates the iterator, so
//! a pass that has entered a namespace reads that namespace's sockets.
//! aya 0.14 makes one iterator per link and needs the program's `Ebpf`,
//! hence the raw calls.

use std::{
    collections::HashMap,
    fs::File,
    io::{self, Read as _},
    os::fd::{AsFd, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
    sync::Arc,
};

use lb_common::{SockRevNat, UdpSockRecord};

use crate::bpf_sys::bpf;

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
/// `enum bpf_attach_type`'s `BPF_TRACE_ITER`.
const BPF_TRACE_ITER: u32 = 28;

/// `union bpf_attr`'s `link_create` prefix, for an iterator with no
/// `iter_info` (the UDP iterator takes none).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    _pad: u32,
}

/// `union bpf_attr`'s `iter_create`.
#[repr(C)]
#[derive(Default)]
struct IterCreateAttr {
    link_fd: u32,
    flags: u32,
}

/// The loaded `lb_iter_udp` program.
#[derive(Clone, Debug)]
pub struct UdpIter(Arc<OwnedFd>);

impl UdpIter {
    /// `program`: the loaded `lb_iter_udp`'s descriptor.
    pub fn new(program: OwnedFd) -> Self {
        Self(Arc::new(program))
    }

    /// Each UDP socket of the calling thread's namespace that has storage,
    /// by cookie.
    pub(super) fn read_here(&self) -> io::Result<HashMap<u64, SockRevNat>> {
        let link = create(
            BPF_LINK_CREATE,
            &mut LinkCreateAttr {
                prog_fd: fd_u32(self.0.as_fd()),
                attach_type: BPF_TRACE_ITER,
                ..LinkCreateAttr::default()
            },
        )?;
        let iter = create(
            BPF_ITER_CREATE,
            &mut IterCreateAttr {
                link_fd: fd_u32(link.as_fd()),
                flags: 0,
            },
        )?;
        let mut bytes = Vec::new();
        File::from(iter).read_to_end(&mut bytes)?;
        Ok(parse(&bytes))
    }
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    fd.as_raw_fd() as u32
}

/// A `bpf(2)` command that returns a new descriptor.
fn create<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is the command's `repr(C)` prefix of `union bpf_attr`
    // and holds no pointer.
    let fd = unsafe { bpf(cmd, attr) }?;
    // SAFETY: on success both commands return a descriptor the caller owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The iterator's output: whole [`UdpSockRecord`]s, back to back (a
/// record never straddles reads: the kernel writes or retries it whole).
fn parse(bytes: &[u8]) -> HashMap<u64, SockRevNat> {
    bytes
        .chunks_exact(size_of::<UdpSockRecord>())
        .map(|chunk| {
            // SAFETY: the chunk is exactly one record's size, and a
            // `UdpSockRecord` (plain integers, explicitly padded) is valid
            // for any bytes; the read is unaligned.
            let r: UdpSockRecord =
                unsafe { chunk.as_ptr().cast::<UdpSockRecord>().read_unaligned() };
            (r.cookie, r.entry)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_whole_and_by_cookie() {
        let entry = SockRevNat {
            backend_be: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            frontend_be: [10, 96, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            backend_port_be: 5353u16.to_be(),
            frontend_port_be: 53u16.to_be(),
            family: lb_common::SOCK_REVNAT_V4,
            _pad0: [0; 3],
        };
        let mut bytes = Vec::new();
        for cookie in [7u64, 9] {
            let r = UdpSockRecord { cookie, entry };
            // SAFETY: a plain `repr(C)` value viewed as its bytes.
            bytes.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    std::ptr::from_ref(&r).cast::<u8>(),
                    size_of::<UdpSockRecord>(),
                )
            });
        }
        let read = parse(&bytes);
        assert_eq!(read.len(), 2);
        assert_eq!(read[&7], entry);
        assert_eq!(read[&9], entry);
    }
}
