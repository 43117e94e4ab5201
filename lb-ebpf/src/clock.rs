//! The programs' clock: ground level.

use aya_ebpf::helpers::bpf_ktime_get_coarse_ns;

/// The boot-time monotonic clock in seconds, as `expires` fields hold it.
#[inline(always)]
pub fn now() -> u32 {
    // SAFETY: the helper has no preconditions.
    (unsafe { bpf_ktime_get_coarse_ns() } / 1_000_000_000) as u32
}
