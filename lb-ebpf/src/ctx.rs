//! The packet a per-packet program runs on, behind one trait, so that the
//! NodePort logic (`nodeport`) is written once for every hook that sees
//! packets: tc (`TcContext`) and XDP (`XdpContext`).

use core::mem::MaybeUninit;

use crate::csum::{csum_add, csum_replace4};
use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        BPF_F_MARK_MANGLED_0, BPF_F_RECOMPUTE_CSUM,
        bpf_adj_room_mode::{BPF_ADJ_ROOM_MAC, BPF_ADJ_ROOM_NET},
        bpf_check_mtu_ret::BPF_MTU_CHK_RET_FRAG_NEEDED,
        xdp_action,
    },
    cty::c_void,
    helpers::{
        bpf_check_mtu, bpf_csum_update, bpf_redirect, bpf_redirect_neigh, bpf_skb_change_tail,
        bpf_skb_load_bytes, bpf_xdp_load_bytes, bpf_xdp_store_bytes,
    },
    programs::{TcContext, XdpContext},
};

/// What the NodePort logic needs of a packet: its bytes (in place, or
/// copied by helpers), checksum updates, and reshaping it into an answer
/// sent back where it came from. Offsets count from the link-layer header.
pub trait PacketCtx {
    /// The start and end of the packet's linear part, for reads in place.
    fn data(&self) -> usize;
    /// The `T` the XDP program left at the start of the packet's metadata
    /// (`lb_common::XDP_META_NOT_OURS`, `lb_common::XdpFound`), if the
    /// metadata is that long: only XDP programs on the device can write it.
    fn xdp_meta<T: Copy>(&self) -> Option<T> {
        None
    }
    fn data_end(&self) -> usize;
    /// The context as the kernel's helpers take it.
    fn raw(&self) -> *mut c_void;
    /// The index of the device the program runs on.
    fn ifindex(&self) -> u32;
    /// The device's MTU, if `grow` more bytes would take the packet over
    /// it (a GSO packet's segments are cut to fit when it grows, so it
    /// never is). XDP never grows a packet: `None`.
    fn too_big(&self, _grow: i32) -> Option<u32> {
        None
    }
    /// Stores `v` at `off`, as [`Self::store`], where no checksum in the
    /// packet covers the bytes (IPv6's next header and payload length, an
    /// inserted extension header): a checksum the device computed over
    /// the whole packet (`CHECKSUM_COMPLETE`) is updated for them.
    fn store_summed<T>(&self, off: usize, v: &T) -> Result<(), i64> {
        self.store(off, v)
    }
    /// Adds `diff` (a 32-bit one's complement sum) to the checksum the
    /// device computed over the whole packet (`CHECKSUM_COMPLETE`), for
    /// bytes changed without [`Self::store_summed`]; nothing for any other
    /// packet (and at XDP, which has no such sum).
    fn sum_changed(&self, _diff: u32) {}
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
    /// Inserts `len` bytes (removes `-len`) right behind the first 20 bytes
    /// of the IPv4 header (the kernel's `BPF_ADJ_ROOM_NET`), where IP
    /// options begin; the header's fields are the caller's to fix.
    fn adjust_net(&self, len: i32) -> Result<(), i64>;
    /// The verdict that sends the packet back out of the device it came in
    /// on.
    fn bounce(&self) -> i32;
    /// Sends the packet out of device `ifindex` once the program returns
    /// the redirect verdict, its link-layer header as the kernel's route
    /// and neighbour (resolved if need be) say (tc only).
    fn redirect_neigh(&self, _ifindex: u32) {}
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
    fn xdp_meta<T: Copy>(&self) -> Option<T> {
        let skb = self.skb.skb;
        // SAFETY: the program's own context; `data_meta` and `data` are the
        // kernel's pointers into the packet, as 32-bit fields.
        let (meta, data) = unsafe { ((*skb).data_meta as usize, (*skb).data as usize) };
        if meta + size_of::<T>() > data {
            // Without metadata `meta` equals `data`.
            return None;
        }
        // SAFETY: the bytes from `meta` lie before `data`, just checked;
        // `T` is plain data (any bytes are one).
        Some(unsafe { (meta as *const T).read_unaligned() })
    }

    #[inline(always)]
    fn raw(&self) -> *mut c_void {
        self.as_ptr()
    }

    #[inline(always)]
    fn ifindex(&self) -> u32 {
        // SAFETY: the program's own context.
        unsafe { (*self.skb.skb).ifindex }
    }

    #[inline(always)]
    fn too_big(&self, grow: i32) -> Option<u32> {
        let mut mtu = 0u32;
        // SAFETY: the context is the program's own skb; the helper writes
        // the device's MTU to `mtu` (ifindex 0: the skb's device).
        let ret = unsafe { bpf_check_mtu(self.as_ptr(), 0, &raw mut mtu, grow, 0) };
        (ret == i64::from(BPF_MTU_CHK_RET_FRAG_NEEDED)).then_some(mtu)
    }

    #[inline(always)]
    fn store_summed<T>(&self, off: usize, v: &T) -> Result<(), i64> {
        TcContext::store(self, off, v, u64::from(BPF_F_RECOMPUTE_CSUM))
    }

    #[inline(always)]
    fn sum_changed(&self, diff: u32) {
        // SAFETY: the context is the program's own skb; the helper only
        // adds to its sum, and only a CHECKSUM_COMPLETE one.
        unsafe { bpf_csum_update(self.skb.skb, diff) };
    }

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
    fn adjust_net(&self, len: i32) -> Result<(), i64> {
        self.adjust_room(len, BPF_ADJ_ROOM_NET, 0)
    }

    #[inline(always)]
    fn redirect_neigh(&self, ifindex: u32) {
        // SAFETY: the helper has no preconditions; without neighbour
        // parameters (null, 0) the kernel routes the packet itself. It
        // records the device for the verdict the program returns.
        unsafe { bpf_redirect_neigh(ifindex, core::ptr::null_mut(), 0, 0) };
    }

    #[inline(always)]
    fn bounce(&self) -> i32 {
        // SAFETY: the context is the program's own skb.
        let ifindex = unsafe { (*self.skb.skb).ifindex };
        // SAFETY: the helper has no preconditions; it returns the verdict.
        unsafe { bpf_redirect(ifindex, 0) as i32 }
    }
}

/// `EOPNOTSUPP`: what XDP cannot do to a packet (reshaping it into an
/// answer). The XDP program never asks: such packets go to tc untouched.
const EOPNOTSUPP: i64 = -95;

/// XDP has no skb: the bytes are copied with the `bpf_xdp_*_bytes` helpers
/// (which also reach the fragments of a multi-buffer frame), and the
/// checksums are updated here in place. A frame at XDP comes from the wire
/// with its checksums complete (no `CHECKSUM_PARTIAL` state as an skb may
/// carry; see the README on veth senders), so every update is the plain
/// incremental one of RFC 1624, pseudo-header flag or not.
impl PacketCtx for XdpContext {
    #[inline(always)]
    fn data(&self) -> usize {
        XdpContext::data(self)
    }

    #[inline(always)]
    fn raw(&self) -> *mut c_void {
        self.as_ptr()
    }

    #[inline(always)]
    fn ifindex(&self) -> u32 {
        self.ingress_ifindex() as u32
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        XdpContext::data_end(self)
    }

    #[inline(always)]
    fn load<T>(&self, off: usize) -> Result<T, i64> {
        let mut v = MaybeUninit::<T>::uninit();
        // SAFETY: `v` is writable for `size_of::<T>()` bytes; the helper
        // fills all of them or fails, and the programs load only plain
        // bytes, for which any bit pattern is valid.
        errno(unsafe {
            bpf_xdp_load_bytes(
                self.ctx,
                off as u32,
                v.as_mut_ptr().cast(),
                size_of::<T>() as u32,
            )
        })?;
        // SAFETY: initialized by the helper, as it succeeded.
        Ok(unsafe { v.assume_init() })
    }

    #[inline(always)]
    fn load_into<T: Copy>(&self, off: usize, dst: &mut T) -> Result<(), i64> {
        // SAFETY: as in `load`: `dst` is a writable `T` of plain bytes.
        errno(unsafe {
            bpf_xdp_load_bytes(
                self.ctx,
                off as u32,
                core::ptr::from_mut(dst).cast(),
                size_of::<T>() as u32,
            )
        })
    }

    #[inline(always)]
    fn store<T>(&self, off: usize, v: &T) -> Result<(), i64> {
        // SAFETY: `v` is readable for `size_of::<T>()` bytes; the helper
        // only reads them.
        errno(unsafe {
            bpf_xdp_store_bytes(
                self.ctx,
                off as u32,
                core::ptr::from_ref(v).cast_mut().cast(),
                size_of::<T>() as u32,
            )
        })
    }

    #[inline(always)]
    fn l3_csum_replace(&self, off: usize, from: u64, to: u64, size: u64) -> Result<(), i64> {
        let csum: u16 = self.load(off)?;
        let new = if size == 2 {
            csum_add(csum, (!(from as u32) & 0xffff) + (to as u32 & 0xffff))
        } else {
            csum_replace4(csum, from as u32, to as u32)
        };
        self.store(off, &new)
    }

    #[inline(always)]
    fn l4_csum_replace(&self, off: usize, from: u64, to: u64, flags: u64) -> Result<(), i64> {
        let csum: u16 = self.load(off)?;
        let mangled_0 = flags & u64::from(BPF_F_MARK_MANGLED_0) != 0;
        if mangled_0 && csum == 0 {
            // A UDP datagram without a checksum keeps none.
            return Ok(());
        }
        let mut new = match flags & 0xf {
            2 => csum_add(csum, (!(from as u32) & 0xffff) + (to as u32 & 0xffff)),
            4 => csum_replace4(csum, from as u32, to as u32),
            // Size 0: `to` is a checksum difference.
            _ => csum_add(csum, to as u32),
        };
        if mangled_0 && new == 0 {
            // 0 means "none" in UDP: a computed 0 is sent as its other
            // form, as the kernel's `CSUM_MANGLED_0`.
            new = 0xffff;
        }
        self.store(off, &new)
    }

    #[inline(always)]
    fn change_tail(&self, _len: u32) -> Result<(), i64> {
        Err(EOPNOTSUPP)
    }

    #[inline(always)]
    fn grow_below_l2(&self, _len: i32) -> Result<(), i64> {
        Err(EOPNOTSUPP)
    }

    #[inline(always)]
    fn adjust_net(&self, _len: i32) -> Result<(), i64> {
        Err(EOPNOTSUPP)
    }

    #[inline(always)]
    fn bounce(&self) -> i32 {
        xdp_action::XDP_TX as i32
    }
}
