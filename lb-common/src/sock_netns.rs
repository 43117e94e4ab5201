//! Which network namespaces the socket programs leave alone:
//! `LB_SOCK_NETNS`, network namespace cookie (`bpf_get_netns_cookie`, host
//! byte order) -> `SOCK_NETNS_*` (`u32`). Written by the agent.
//!
//! A pod whose sockets must see the Service address (a sidecar reading
//! `SO_ORIGINAL_DST`, a sandbox or VM behind the pod's interface) opts
//! out: its namespace is [`SOCK_NETNS_OPT_OUT`], `connect`/`sendmsg` leave
//! its frontends alone, and the tc programs on its host-side interface
//! translate its packets instead. The agent writes the entry only once
//! those programs are there, so a pod it has not found yet keeps socket
//! load balancing (with `--bpf-lb-sock-hostns-only`, every pod opts out).

/// The namespace of a pod that opted out of socket load balancing.
pub const SOCK_NETNS_OPT_OUT: u32 = 1;

/// Default capacity of `LB_SOCK_NETNS`: far more pods than a node runs.
pub const DEFAULT_SOCK_NETNS_MAX: u32 = 16_384;

/// Whether the socket programs balance a socket of a namespace whose
/// `LB_SOCK_NETNS` entry is `entry` (`None`: none).
#[inline(always)]
pub const fn sock_balanced(entry: Option<u32>) -> bool {
    !matches!(entry, Some(SOCK_NETNS_OPT_OUT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_opted_out_namespace_is_left_alone() {
        assert!(sock_balanced(None));
        assert!(!sock_balanced(Some(SOCK_NETNS_OPT_OUT)));
        // An unknown value reads as none.
        assert!(sock_balanced(Some(7)));
    }
}
