//! The atomic operations the programs need of map values, which `core`
//! does not give the BPF target: ground level.

use core::intrinsics::{AtomicOrdering::SeqCst, atomic_cxchg, atomic_or};

/// Swaps the `u64` at `ptr` from `old` to `new`: whether it was `old`.
/// A full barrier, for the compiler as for the CPU: no access of the
/// program's moves across it (BPF_CMPXCHG is fully ordered).
///
/// # Safety
///
/// `ptr` is an 8-byte aligned word of a live map value.
#[inline(always)]
pub unsafe fn cas(ptr: *mut u64, old: u64, new: u64) -> bool {
    // SAFETY: the caller's contract; the kernel allows atomic operations on
    // map values (BPF_CMPXCHG).
    unsafe { atomic_cxchg::<u64, { SeqCst }, { SeqCst }>(ptr, old, new) }.1
}

/// Reads the `u64` at `ptr` as a full barrier: no later read of the
/// program's, the compiler's or the CPU's, moves ahead of it. (The BPF
/// target has no acquire load before cpu v4: an atomic OR of nothing,
/// fully ordered as every BPF_FETCH operation is, stands in for one.)
///
/// # Safety
///
/// `ptr` is an 8-byte aligned word of a live map value.
#[inline(always)]
pub unsafe fn load(ptr: *mut u64) -> u64 {
    // SAFETY: the caller's contract; the kernel allows atomic operations on
    // map values (BPF_OR | BPF_FETCH), and OR-ing 0 changes nothing.
    unsafe { atomic_or::<u64, u64, { SeqCst }>(ptr, 0) }
}
