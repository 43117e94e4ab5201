//! The budget of unconfirmed TCP flows: `LB_SYN_BUDGET`, a per-CPU array of
//! one [`SynBucket`].
//!
//! A SYN flood's flows never finish their handshake. In the LRU conntrack
//! and SNAT maps their entries would push out established flows that are
//! merely idle, where the kernel's conntrack early-drops only unconfirmed
//! entries. So a new TCP flow takes a token from its CPU's bucket and gives
//! it back once its handshake is done; without a token its SYN is dropped
//! and counted (`*_drop_syn_budget`), by XDP where it runs. Tokens also
//! come back at `syn_refill` a second, the pace at which unconfirmed
//! entries expire and are collected, up to `syn_budget`: unconfirmed flows
//! never hold more than that share of the maps ([`crate::DatapathConfig`],
//! written by the agent; 0 turns the budget off).

/// Value of `LB_SYN_BUDGET` (key 0, one per CPU). Written by the programs
/// only; all zero until this CPU's first new flow, which finds it full.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SynBucket {
    /// When `tokens` was last refilled: `bpf_ktime_get_ns()`, host order.
    pub stamp_ns: u64,
    /// Unconfirmed flows this CPU may still start.
    pub tokens: u32,
    pub _pad0: [u8; 4],
}
const _: () = assert!(size_of::<SynBucket>() == 16);

impl SynBucket {
    /// Takes a token at `now_ns`, if one is left after refilling `refill`
    /// a second up to `cap`. A `cap` of 0 is no budget: always granted.
    #[inline(always)]
    pub const fn take(&mut self, cap: u32, refill: u32, now_ns: u64) -> bool {
        if cap == 0 {
            return true;
        }
        if self.stamp_ns == 0 {
            self.stamp_ns = now_ns;
            self.tokens = cap;
        }
        // Checked divisions: the programs must hold no panic path.
        if let Some(ns) = 1_000_000_000u64.checked_div(refill as u64) {
            let ns_per_token = if ns == 0 { 1 } else { ns };
            if let Some(earned) = now_ns
                .saturating_sub(self.stamp_ns)
                .checked_div(ns_per_token)
                && earned > 0
            {
                self.tokens = min(self.tokens as u64 + earned, cap);
                self.stamp_ns += earned * ns_per_token;
            }
        }
        // A smaller budget written meanwhile applies at once.
        self.tokens = min(self.tokens as u64, cap);
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// Gives back the token of a flow whose handshake is done, up to `cap`.
    #[inline(always)]
    pub const fn give_back(&mut self, cap: u32) {
        self.tokens = min(self.tokens as u64 + 1, cap);
    }
}

#[inline(always)]
const fn min(v: u64, cap: u32) -> u32 {
    if v > cap as u64 { cap } else { v as u32 }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size assert equals the sum of
    // the fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::SynBucket {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_bucket_starts_full_and_refuses_once_empty() {
        let mut b = SynBucket::default();
        for _ in 0..3 {
            assert!(b.take(3, 1, S));
        }
        assert!(!b.take(3, 1, S));
        // A confirmed flow gives its token back.
        b.give_back(3);
        assert!(b.take(3, 1, S));
        assert!(!b.take(3, 1, S));
    }

    #[test]
    fn tokens_come_back_at_the_refill_rate_up_to_the_cap() {
        let mut b = SynBucket::default();
        for _ in 0..4 {
            assert!(b.take(4, 2, S));
        }
        // Two a second: one after half a second, none more before.
        assert!(!b.take(4, 2, S + S / 4));
        assert!(b.take(4, 2, S + S / 2));
        assert!(!b.take(4, 2, S + S / 2));
        // Long idle: full again, not more.
        for _ in 0..4 {
            assert!(b.take(4, 2, 100 * S));
        }
        assert!(!b.take(4, 2, 100 * S));
        for _ in 0..10 {
            b.give_back(4);
        }
        assert_eq!(b.tokens, 4);
    }

    #[test]
    fn no_cap_is_no_budget_and_a_smaller_cap_applies_at_once() {
        let mut b = SynBucket::default();
        for _ in 0..1000 {
            assert!(b.take(0, 0, S));
        }
        assert!(b.take(8, 0, S));
        assert_eq!(b.tokens, 7);
        assert!(b.take(2, 0, S));
        assert_eq!(b.tokens, 1);
    }
}
