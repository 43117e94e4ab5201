//! Counting datapath events in `LB_STATS`, keyed by [`lb_common::StatKey`].

use lb_common::{At, Reason, StatFamily, StatKey};

use crate::{addr::Addr6, maps::LB_STATS};

/// An address of the family whose counters it keys.
pub trait Counted {
    const FAMILY: StatFamily;
}

impl Counted for [u8; 4] {
    const FAMILY: StatFamily = StatFamily::V4;
}

impl Counted for [u8; 16] {
    const FAMILY: StatFamily = StatFamily::V6;
}

impl Counted for Addr6 {
    const FAMILY: StatFamily = StatFamily::V6;
}

/// Adds one, on this CPU, to the counter of `reason` at `at` for the
/// family of addresses `A`. Every argument is a constant where it is
/// called, and so is the index.
#[inline(always)]
pub fn count<A: Counted>(at: At, reason: Reason) {
    if let Some(value) = LB_STATS.get_ptr_mut(StatKey::new(at, A::FAMILY, reason).index()) {
        // SAFETY: an array element lives as long as the map, and this CPU's
        // copy is ours alone but for a program that preempts this one on the
        // same CPU: then one of the two increments may be lost, never more.
        // (The BPF target offers no atomic add through `core`.)
        unsafe { *value += 1 };
    }
}
