//! What the XDP program tells the tc programs about a packet it passes
//! up, in the packet's metadata (`lb_common::xdp`): ground level, for the
//! full path (`xdp`) and the flow cache (`flow_cache`) alike.

use aya_ebpf::{helpers::bpf_xdp_adjust_meta, programs::XdpContext};
use lb_common::{XDP_META_FOUND, XdpFound};

/// Leaves `what` in the packet's metadata for tc: whether there was room
/// (a driver without metadata support has none; tc then looks the packet
/// up again).
#[inline(always)]
pub fn tell_tc<T>(ctx: &XdpContext, what: T) -> bool {
    // SAFETY: the helper checks the context and the room it grows into.
    if unsafe { bpf_xdp_adjust_meta(ctx.ctx, -(size_of::<T>() as i32)) } != 0 {
        return false;
    }
    let (meta, data) = (ctx.metadata(), ctx.data());
    if meta + size_of::<T>() > data {
        return false;
    }
    // SAFETY: the bytes before the frame are metadata, just checked.
    unsafe { (meta as *mut T).write_unaligned(what) };
    true
}

/// [`tell_tc`] of an [`XdpFound`]: 0 if told. A BPF function of its own:
/// the value it makes stays off the frame of the step that calls it.
#[inline(never)]
pub fn tell_tc_found<A: Copy>(ctx: &XdpContext, addr: &A, port_be: u16, what: u8) -> u32 {
    let found = XdpFound {
        tag: XDP_META_FOUND,
        addr_be: *addr,
        port_be,
        what,
        addr_len: size_of::<A>() as u8,
    };
    u32::from(!tell_tc(ctx, found))
}
