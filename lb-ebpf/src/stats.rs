//! Counting datapath events in `LB_STATS`.

use crate::maps::LB_STATS;

/// Adds one to counter `stat` (a `lb_common::STAT_*`) on this CPU.
#[inline(always)]
pub fn count(stat: u32) {
    if let Some(value) = LB_STATS.get_ptr_mut(stat) {
        // SAFETY: an array element lives as long as the map, and this CPU's
        // copy is ours alone but for a program that preempts this one on the
        // same CPU: then one of the two increments may be lost, never more.
        // (The BPF target offers no atomic add through `core`.)
        unsafe { *value += 1 };
    }
}
