//! `lb_iter_udp`: a socket iterator over the UDP sockets of the namespace
//! that opens it, writing a [`UdpSockRecord`] for each one with
//! `LB_SOCK_REVNAT` storage. The stale-UDP reaper reads it: `SOCK_DIAG`
//! reports no socket storage of UDP sockets, and a connected UDP socket's
//! reverse-NAT entry lives only there.

use core::{ffi::c_void, ptr};

use aya_ebpf::helpers::generated::{bpf_get_socket_cookie, bpf_seq_write, bpf_sk_storage_get};
use lb_common::{SockRevNat, UdpSockRecord};
use lb_ebpf::maps::LB_SOCK_REVNAT;

/// The kernel's `struct bpf_iter_meta`: only `seq` is read.
#[repr(C)]
pub(crate) struct IterMeta {
    seq: *mut c_void,
}

/// The kernel's `struct bpf_iter__udp`, the context of `iter/udp`.
#[repr(C)]
pub(crate) struct IterUdp {
    meta: *mut IterMeta,
    /// `struct udp_sock *`; null on the call after the last socket.
    udp_sk: *mut c_void,
}

#[unsafe(link_section = "iter/udp")]
#[unsafe(no_mangle)]
pub(crate) extern "C" fn lb_iter_udp(ctx: *mut IterUdp) -> i32 {
    // SAFETY: the kernel passes a valid context; each field is read with
    // one 64-bit load, the only access its BTF allows.
    let (meta, sk) = unsafe {
        (
            ptr::read_volatile(&raw const (*ctx).meta),
            ptr::read_volatile(&raw const (*ctx).udp_sk),
        )
    };
    if sk.is_null() {
        return 0;
    }
    let map = ptr::from_ref(&LB_SOCK_REVNAT).cast_mut().cast::<c_void>();
    // SAFETY: `sk` is the iterated socket (a udp_sock starts with its
    // sock_common), held by the iterator for this call; no creation.
    let entry = unsafe { bpf_sk_storage_get(map, sk, ptr::null_mut(), 0) }.cast::<SockRevNat>();
    if entry.is_null() {
        return 0;
    }
    let record = UdpSockRecord {
        // SAFETY: as above.
        cookie: unsafe { bpf_get_socket_cookie(sk) },
        // SAFETY: the storage lives while the iterator holds the socket.
        entry: unsafe { *entry },
    };
    // SAFETY: `meta` is the iterator's, `seq` its seq_file; a full seq
    // buffer makes the kernel call again for this socket.
    unsafe {
        let seq = ptr::read_volatile(&raw const (*meta).seq);
        bpf_seq_write(
            seq.cast(),
            ptr::from_ref(&record).cast(),
            size_of::<UdpSockRecord>() as u32,
        );
    }
    0
}
