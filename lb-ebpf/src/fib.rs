//! Asking the kernel's FIB where a packet goes from the device a tc
//! program runs on: whether a DSR flow's answer can leave by that device,
//! and by which device an answer the program writes itself leaves (sent
//! with `bpf_redirect_neigh`, which resolves its neighbour). (The XDP fast
//! path has its own lookup, which must leave the frame untouched unless it
//! forwards it.)

use aya_ebpf::{
    bindings::{BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup},
    helpers::bpf_fib_lookup as fib_lookup,
};

use crate::{ctx::PacketCtx, packet::Ip};

/// Where the FIB sends a packet from `src` to `dst` (as packets hold them)
/// that arrived on the program's device, as the kernel would forward it:
/// the index of the device it leaves by (its neighbour need not be known
/// yet), or 0 when it is not forwarded (a local address, a broadcast, no
/// route, forwarding off). A BPF function of its own: its 64 bytes of
/// parameters stay off its callers' stacks.
#[inline(never)]
pub fn out_device<C: PacketCtx, A: Ip>(ctx: &C, src: &A, dst: &A, proto: u8) -> u32 {
    // SAFETY: the lookup's parameters are plain integers and arrays, for
    // which all zero is valid (and what the kernel wants of the fields not
    // set).
    let mut f: bpf_fib_lookup = unsafe { core::mem::zeroed() };
    f.family = A::AF;
    f.l4_protocol = proto;
    f.ifindex = ctx.ifindex();
    f.__bindgen_anon_3.ipv6_src = src.fib_words();
    f.__bindgen_anon_4.ipv6_dst = dst.fib_words();
    // SAFETY: the context is the program's; the parameters are a valid
    // `bpf_fib_lookup` of the size given.
    let ret = unsafe { fib_lookup(ctx.raw(), &raw mut f, size_of::<bpf_fib_lookup>() as i32, 0) };
    if ret == i64::from(BPF_FIB_LKUP_RET_SUCCESS) || ret == i64::from(BPF_FIB_LKUP_RET_NO_NEIGH) {
        f.ifindex
    } else {
        0
    }
}
