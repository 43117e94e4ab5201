//! The packet a per-packet program runs on, behind one trait, so that the
//! NodePort logic (`nodeport`) is written once for every hook that sees
//! packets: tc now (`TcContext`), XDP next.

use aya_ebpf::{
    EbpfContext as _,
    bindings::bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    helpers::{bpf_redirect, bpf_skb_change_tail, bpf_skb_load_bytes},
    programs::TcContext,
};

/// What the NodePort logic needs of a packet: its bytes (in place, or
/// copied by helpers), checksum updates, and reshaping it into an answer
/// sent back where it came from. Offsets count from the link-layer header.
pub trait PacketCtx {
    /// The start and end of the packet's linear part, for reads in place.
    fn data(&self) -> usize;
    fn data_end(&self) -> usize;
    /// Copies a `T` out of the packet at `off`.
    fn load<T>(&self, off: usize) -> Result<T, i64>;
    /// Copies the packet's bytes at `off` into `dst`, in place: no
    /// temporary on the stack, as a returned value would need.
    fn load_into<T: Copy>(&self, off: usize, dst: &mut T) -> Result<(), i64>;
    /// Stores `v` at `off` in the packet.
    fn store<T>(&self, off: usize, v: &T) -> Result<(), i64>;
    /// Updates the IPv4 header checksum at `off` for a `size`-byte field
    /// that changed from `from` to `to`.
    fn l3_csum_replace(&self, off: usize, from: u64, to: u64, size: u64) -> Result<(), i64>;
    /// Updates the L4 checksum at `off` (the kernel's `BPF_F_*` flags:
    /// field size, pseudo-header, "0 stays 0"; size 0: `to` is a checksum
    /// difference).
    fn l4_csum_replace(&self, off: usize, from: u64, to: u64, flags: u64) -> Result<(), i64>;
    /// Makes the packet `len` bytes long, cutting or growing its tail.
    fn change_tail(&self, len: u32) -> Result<(), i64>;
    /// Inserts `len` bytes right behind the link-layer header.
    fn grow_below_l2(&self, len: i32) -> Result<(), i64>;
    /// The verdict that sends the packet back out of the device it came in
    /// on.
    fn bounce(&self) -> i32;
}

/// A helper's return code (0: done) as a result.
#[inline(always)]
pub(crate) fn errno(ret: i64) -> Result<(), i64> {
    if ret == 0 { Ok(()) } else { Err(ret) }
}

/// A result as a helper's return code, for the BPF functions that must
/// return what fits a register (see `nodeport::settle`).
#[inline(always)]
pub(crate) fn code(r: Result<(), i64>) -> i64 {
    r.err().unwrap_or(0)
}

impl PacketCtx for TcContext {
    #[inline(always)]
    fn data(&self) -> usize {
        TcContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        TcContext::data_end(self)
    }

    #[inline(always)]
    fn load<T>(&self, off: usize) -> Result<T, i64> {
        TcContext::load(self, off)
    }

    #[inline(always)]
    fn load_into<T: Copy>(&self, off: usize, dst: &mut T) -> Result<(), i64> {
        // SAFETY: `dst` is a valid, writable `T` of plain bytes; the helper
        // writes exactly `size_of::<T>()` bytes to it or fails.
        errno(unsafe {
            bpf_skb_load_bytes(
                self.as_ptr().cast(),
                off as u32,
                core::ptr::from_mut(dst).cast(),
                size_of::<T>() as u32,
            )
        })
    }

    #[inline(always)]
    fn store<T>(&self, off: usize, v: &T) -> Result<(), i64> {
        TcContext::store(self, off, v, 0)
    }

    #[inline(always)]
    fn l3_csum_replace(&self, off: usize, from: u64, to: u64, size: u64) -> Result<(), i64> {
        TcContext::l3_csum_replace(self, off, from, to, size)
    }

    #[inline(always)]
    fn l4_csum_replace(&self, off: usize, from: u64, to: u64, flags: u64) -> Result<(), i64> {
        TcContext::l4_csum_replace(self, off, from, to, flags)
    }

    #[inline(always)]
    fn change_tail(&self, len: u32) -> Result<(), i64> {
        // SAFETY: the context is the program's own skb; the helper only
        // changes its length.
        errno(unsafe { bpf_skb_change_tail(self.as_ptr().cast(), len, 0) })
    }

    #[inline(always)]
    fn grow_below_l2(&self, len: i32) -> Result<(), i64> {
        self.adjust_room(len, BPF_ADJ_ROOM_MAC, 0)
    }

    #[inline(always)]
    fn bounce(&self) -> i32 {
        // SAFETY: the context is the program's own skb.
        let ifindex = unsafe { (*self.skb.skb).ifindex };
        // SAFETY: the helper has no preconditions; it returns the verdict.
        unsafe { bpf_redirect(ifindex, 0) as i32 }
    }
}
