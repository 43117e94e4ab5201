//! What the socket programs know of a network namespace: `LB_SOCK_NETNS`,
//! network namespace cookie (`bpf_get_netns_cookie`, host byte order) ->
//! [`SockNetns`]. Written by the agent.
//!
//! A pod whose sockets must see the Service address (a sidecar reading
//! `SO_ORIGINAL_DST`, a sandbox or VM behind the pod's interface) opts
//! out: its namespace has [`SOCK_NETNS_OPT_OUT`], `connect`/`sendmsg` leave
//! its frontends alone, and the tc programs on its host-side interface
//! translate its packets instead. The agent writes the flag only once
//! those programs are there, so a pod it has not found yet keeps socket
//! load balancing (with `--bpf-lb-sock-hostns-only`, every pod opts out).
//!
//! With `--bpf-lb-source-range-all-types`, a cluster IP is guarded by its
//! Service's `loadBalancerSourceRanges` from pods and the node too: a
//! connect has no source address yet, so the entry names the one its
//! namespace's sockets send from (the pod's address; the node's primary
//! address for the node's namespace).

/// The namespace of a pod that opted out of socket load balancing.
pub const SOCK_NETNS_OPT_OUT: u32 = 1;
/// [`SockNetns::addr4_be`] holds the namespace's IPv4 address.
pub const SOCK_NETNS_ADDR4: u32 = 1 << 1;
/// [`SockNetns::addr6_be`] holds the namespace's IPv6 address.
pub const SOCK_NETNS_ADDR6: u32 = 1 << 2;

/// Value of `LB_SOCK_NETNS`. Written by the agent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SockNetns {
    /// `SOCK_NETNS_*` bits.
    pub flags: u32,
    /// The address its sockets send from, of each family, network byte
    /// order, where the flags say so.
    pub addr4_be: [u8; 4],
    pub addr6_be: [u8; 16],
}
const _: () = assert!(size_of::<SockNetns>() == 24);

/// Default capacity of `LB_SOCK_NETNS`: far more pods than a node runs.
pub const DEFAULT_SOCK_NETNS_MAX: u32 = 16_384;

/// Whether the socket programs balance a socket of a namespace whose
/// `LB_SOCK_NETNS` flags are `flags` (0: no entry).
#[inline(always)]
pub const fn sock_balanced(flags: u32) -> bool {
    flags & SOCK_NETNS_OPT_OUT == 0
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (the size assert equals the sum of the
    // fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::SockNetns {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_opted_out_namespace_is_left_alone() {
        assert!(sock_balanced(0));
        assert!(sock_balanced(SOCK_NETNS_ADDR4 | SOCK_NETNS_ADDR6));
        assert!(!sock_balanced(SOCK_NETNS_OPT_OUT));
        assert!(!sock_balanced(SOCK_NETNS_OPT_OUT | SOCK_NETNS_ADDR4));
    }
}
