//! The atomic operations the programs need of map values, which `core`
//! does not give the BPF target: ground level.

use core::intrinsics::{AtomicOrdering::Relaxed, atomic_cxchg};

/// Swaps the `u64` at `ptr` from `old` to `new`: whether it was `old`.
///
/// # Safety
///
/// `ptr` is an 8-byte aligned word of a live map value.
#[inline(always)]
pub unsafe fn cas(ptr: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: the caller's contract; the kernel allows atomic operations on
    // map values (BPF_CMPXCHG).
    unsafe { atomic_cxchg::<u64, { Relaxed }, { Relaxed }>(ptr, old, new) }.1
}
