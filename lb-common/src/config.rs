//! The tc programs' settings: `LB_CONFIG`, an array of one.

use crate::{
    DEFAULT_CT_TIMEOUT_ANY, DEFAULT_CT_TIMEOUT_TCP, DEFAULT_CT_TIMEOUT_TCP_FIN,
    DEFAULT_CT_TIMEOUT_TCP_SYN, Timeouts,
};

/// Value of `LB_CONFIG` (key 0). Written by the agent; all zero means "not
/// configured": the programs then SNAT nothing and use the default
/// timeouts. Host byte order unless the name says otherwise.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DatapathConfig {
    /// The IPv4 address flows are SNATed to (the node's primary address),
    /// network byte order; all zero: no SNAT, such flows are dropped.
    pub snat4_be: [u8; 4],
    /// The SNAT port range, inclusive: where new flows take their ports.
    pub nat_port_min: u16,
    pub nat_port_max: u16,
    /// Mixed into where a client's SNAT ports land
    /// ([`crate::nat_first_offset`]); random, chosen by the agent.
    pub nat_seed: u32,
    /// `CFG_F_*` bits.
    pub flags: u32,
    /// Conntrack timeouts in seconds (0: the default); see [`Timeouts`].
    pub timeout_tcp: u32,
    pub timeout_tcp_syn: u32,
    pub timeout_tcp_fin: u32,
    pub timeout_any: u32,
    /// The ports replies to the SNAT address are looked up in `LB4_NAT`
    /// for, inclusive: the SNAT range, widened to every port an earlier
    /// range's flows may still hold (after a change of range or an
    /// upgrade). 0, 0: the SNAT range.
    pub nat_reply_min: u16,
    pub nat_reply_max: u16,
    /// The IPv6 address IPv6 flows are SNATed to, as `snat4_be`; all zero:
    /// no IPv6 SNAT. The port range and timeouts are shared.
    pub snat6_be: [u8; 16],
    /// Seeds the flow hash that indexes Maglev tables
    /// ([`crate::maglev::flow_hash`]); the same on every node.
    pub maglev_seed: u32,
    /// Unconfirmed TCP flows each CPU may hold at once ([`crate::SynBucket`]);
    /// 0: no budget.
    pub syn_budget: u32,
    /// Tokens each CPU's budget gets back a second.
    pub syn_refill: u32,
}
const _: () = assert!(size_of::<DatapathConfig>() == 64);

/// A migration is in progress: the previous maps of the stateful maps are
/// in their `*_PREV` slots, and the programs look there for what their own
/// maps lack.
pub const CFG_F_PREV: u32 = 1;
/// Mid-flow failover: a TCP segment without SYN and without a flow of
/// ours, to a frontend with both a Maglev table and DSR, starts a flow of
/// ours, to the backend the node that had the flow picked (the tables
/// agree on every node). Set by the agent once the kernel's flows are left
/// to it, so that no connection the kernel's conntrack translates
/// (kube-proxy's) is taken from it.
pub const CFG_F_MIDFLOW: u32 = 1 << 1;
/// The XDP fast path runs on the node's devices: tc ingress passes at once
/// a packet XDP marked as no frontend's nor flow's of ours
/// ([`crate::XDP_META_NOT_OURS`]). Without it tc never reads metadata.
/// Set by the agent's datapath.
pub const CFG_F_XDP: u32 = 1 << 2;

impl DatapathConfig {
    /// Whether a reply to the SNAT address on `port` (host order) may be
    /// one of a SNATed flow's.
    #[inline(always)]
    pub const fn nat_reply_port(&self, port: u16) -> bool {
        let (min, max) = if self.nat_reply_max == 0 {
            (self.nat_port_min, self.nat_port_max)
        } else {
            (self.nat_reply_min, self.nat_reply_max)
        };
        min <= port && port <= max
    }

    /// The conntrack timeouts, defaults for those not set.
    #[inline(always)]
    pub const fn timeouts(&self) -> Timeouts {
        const fn or(v: u32, default: u32) -> u32 {
            if v == 0 { default } else { v }
        }
        Timeouts {
            tcp: or(self.timeout_tcp, DEFAULT_CT_TIMEOUT_TCP),
            tcp_syn: or(self.timeout_tcp_syn, DEFAULT_CT_TIMEOUT_TCP_SYN),
            tcp_fin: or(self.timeout_tcp_fin, DEFAULT_CT_TIMEOUT_TCP_FIN),
            any: or(self.timeout_any, DEFAULT_CT_TIMEOUT_ANY),
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size assert equals the sum of
    // the fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::DatapathConfig {}
}
