//! Rate limits of the rejects the tc programs send for frontends without
//! endpoints (a TCP reset or an ICMP port unreachable, as kube-proxy's
//! `REJECT`): `LB4_REJECTS` and `LB6_REJECTS`. Without one, a frontend without endpoints
//! would answer every spoofed packet, a reflector.

/// Value of `LB4_REJECTS` (`LB6_REJECTS`), keyed by the frontend's `Frontend4Key` (`Frontend6Key`): a token
/// bucket. Written by the tc programs (without a lock: two CPUs may each
/// take a token from the same count, so the limit is approximate); LRU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RejectBucket {
    /// When `tokens` was last counted: `bpf_ktime_get_ns()`, host order.
    pub stamp_ns: u64,
    /// Rejects that may still be sent at `stamp_ns`.
    pub tokens: u32,
    pub _pad0: [u8; 4],
}
const _: () = assert!(size_of::<RejectBucket>() == 16);

/// Rejects a frontend may send per second, once its burst is spent.
pub const REJECTS_PER_SECOND: u32 = 100;
/// Rejects a frontend may send at once.
pub const REJECT_BURST: u32 = 200;

/// Frontends whose rejects are counted at once; the least recently used
/// start over with a full burst.
pub const REJECTS_MAX: u32 = 4_096;

impl RejectBucket {
    /// Takes a token at `now_ns`, if one is left after refilling the
    /// bucket at [`REJECTS_PER_SECOND`] up to [`REJECT_BURST`]. A new
    /// frontend's bucket (all zero) starts full.
    #[inline(always)]
    pub const fn take(&mut self, now_ns: u64) -> bool {
        const NS_PER_TOKEN: u64 = 1_000_000_000 / REJECTS_PER_SECOND as u64;
        if self.stamp_ns == 0 {
            self.stamp_ns = now_ns;
            self.tokens = REJECT_BURST;
        }
        let earned = now_ns.saturating_sub(self.stamp_ns) / NS_PER_TOKEN;
        if earned > 0 {
            let tokens = self.tokens as u64 + earned;
            self.tokens = if tokens > REJECT_BURST as u64 {
                REJECT_BURST
            } else {
                tokens as u32
            };
            self.stamp_ns += earned * NS_PER_TOKEN;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size assert equals the sum of
    // the fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::RejectBucket {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let mut b = RejectBucket::default();
        let t0 = 5_000_000_000;
        let sent = (0..1000).filter(|_| b.take(t0)).count();
        assert_eq!(sent, REJECT_BURST as usize);
        // A second later, a second's worth.
        let sent = (0..1000).filter(|_| b.take(t0 + 1_000_000_000)).count();
        assert_eq!(sent, REJECTS_PER_SECOND as usize);
        // Idle for long: a full burst again, never more.
        let sent = (0..1000).filter(|_| b.take(t0 + 100_000_000_000)).count();
        assert_eq!(sent, REJECT_BURST as usize);
    }
}
