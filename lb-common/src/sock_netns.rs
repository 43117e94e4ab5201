//! Which network namespaces the socket programs leave alone:
//! `LB_SOCK_NETNS`, network namespace cookie (`bpf_get_netns_cookie`, host
//! byte order) -> `SOCK_NETNS_*` (`u32`). Written by the agent.
//!
//! A pod whose sockets must see the Service address (a sidecar reading
//! `SO_ORIGINAL_DST`, a sandbox or VM behind the pod's interface) opts
//! out: its namespace is [`SOCK_NETNS_OPT_OUT`], `connect`/`sendmsg` leave
//! its frontends alone, and the tc programs on its host-side interface
//! translate its packets instead. With `--bpf-lb-sock-hostns-only`
//! ([`crate::CFG_F_SOCK_HOSTNS_ONLY`]) only the node's own namespace,
//! [`SOCK_NETNS_HOST`], is balanced at the socket.

/// The namespace of a pod that opted out of socket load balancing.
pub const SOCK_NETNS_OPT_OUT: u32 = 1;
/// The node's own namespace (the agent's, with host networking).
pub const SOCK_NETNS_HOST: u32 = 2;

/// Default capacity of `LB_SOCK_NETNS`: far more pods than a node runs.
pub const DEFAULT_SOCK_NETNS_MAX: u32 = 16_384;

/// Whether the socket programs balance a socket of a namespace whose
/// `LB_SOCK_NETNS` entry is `entry` (`None`: none), under the `CFG_F_*`
/// `flags`.
#[inline(always)]
pub const fn sock_balanced(entry: Option<u32>, flags: u32) -> bool {
    match entry {
        Some(SOCK_NETNS_OPT_OUT) => false,
        Some(SOCK_NETNS_HOST) => true,
        _ => flags & crate::CFG_F_SOCK_HOSTNS_ONLY == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CFG_F_SOCK_HOSTNS_ONLY;

    #[test]
    fn an_opted_out_namespace_is_left_alone_and_hostns_only_balances_the_host_alone() {
        let only = CFG_F_SOCK_HOSTNS_ONLY;
        assert!(sock_balanced(None, 0));
        assert!(!sock_balanced(Some(SOCK_NETNS_OPT_OUT), 0));
        assert!(sock_balanced(Some(SOCK_NETNS_HOST), 0));
        assert!(!sock_balanced(None, only));
        assert!(!sock_balanced(Some(SOCK_NETNS_OPT_OUT), only));
        assert!(sock_balanced(Some(SOCK_NETNS_HOST), only));
        // An unknown value reads as none.
        assert!(sock_balanced(Some(7), 0));
        assert!(!sock_balanced(Some(7), only));
    }
}
