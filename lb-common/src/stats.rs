//! Datapath counters: `LB_STATS`, a per-CPU array of `u64` indexed by a
//! [`StatKey`]: what happened ([`Reason`]), where ([`At`]: the hook and
//! the direction) and to which address family. Incremented by the
//! programs; summed over CPUs by the agent (`lb-agent dump --stats`,
//! `/metrics`).
//!
//! The key is packed into the index ([`StatKey::index`]) rather than kept
//! in a hash map: the programs count with a constant index, one array
//! lookup, and a new reason is one more block of [`PER_REASON`] entries.

/// Which programs counted an event.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatHook {
    /// The cgroup socket programs (`connect`, `sendmsg`, `recvmsg`,
    /// `getpeername`).
    Sock = 0,
    /// The tc programs on the node's external devices.
    Tc = 1,
    /// The XDP program on the node's external devices.
    Xdp = 2,
    /// The tc programs on the host-side interfaces of pods that opted out
    /// of socket load balancing (`lb_tc_pod_in`, `lb_tc_pod_out`).
    Pod = 3,
}

/// Which way the packet, or the socket call, went.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatDir {
    /// Into the node: tc ingress, XDP; at the socket, `recvmsg` and
    /// `getpeername` (what the application is shown).
    Ingress = 0,
    /// Out of the node: tc egress; at the socket, `connect` and `sendmsg`
    /// (where the application sends).
    Egress = 1,
}

/// The address family of the packet or socket address.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatFamily {
    V4 = 0,
    V6 = 1,
}

/// Where an event was counted: a hook and a direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct At {
    pub hook: StatHook,
    pub dir: StatDir,
}

impl At {
    /// `connect` and `sendmsg`: translating where a socket sends.
    pub const SOCK_OUT: Self = Self::new(StatHook::Sock, StatDir::Egress);
    /// `recvmsg` and `getpeername`: showing the frontend again.
    pub const SOCK_IN: Self = Self::new(StatHook::Sock, StatDir::Ingress);
    /// tc ingress.
    pub const TC_IN: Self = Self::new(StatHook::Tc, StatDir::Ingress);
    /// tc egress.
    pub const TC_OUT: Self = Self::new(StatHook::Tc, StatDir::Egress);
    /// XDP (ingress only).
    pub const XDP: Self = Self::new(StatHook::Xdp, StatDir::Ingress);
    /// tc ingress of a pod's host-side interface: the pod's packets.
    pub const POD_IN: Self = Self::new(StatHook::Pod, StatDir::Ingress);
    /// tc egress of a pod's host-side interface: packets to the pod.
    pub const POD_OUT: Self = Self::new(StatHook::Pod, StatDir::Egress);

    pub const fn new(hook: StatHook, dir: StatDir) -> Self {
        Self { hook, dir }
    }
}

/// Defines [`Reason`] with each reason's name and the places it is
/// counted at, in order.
macro_rules! reasons {
    ($($(#[$doc:meta])* $reason:ident = $name:literal at [$($at:ident),+],)*) => {
        /// What a program did with a packet or a socket call, or why it
        /// did not. Its discriminant numbers its block of `LB_STATS`: a new
        /// reason goes at the end.
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Reason {
            $($(#[$doc])* $reason,)*
        }

        impl Reason {
            /// Every reason, in discriminant order.
            pub const ALL: &[Reason] = &[$(Reason::$reason),*];

            /// Its `reason` label on `/metrics` and in `lb-agent dump --stats`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Reason::$reason => $name,)*
                }
            }

            /// Where the programs count it: the agent shows these
            /// counters from the start, at 0 until something happens.
            pub const fn places(self) -> &'static [At] {
                match self {
                    $(Reason::$reason => &[$(At::$at),+],)*
                }
            }
        }
    };
}

reasons! {
    /// `connect` rewrote a frontend to a backend.
    ConnectTranslated = "connect_translated" at [SOCK_OUT],
    /// `sendmsg` rewrote a frontend to a backend (unconnected UDP).
    SendmsgTranslated = "sendmsg_translated" at [SOCK_OUT],
    /// `recvmsg`/`getpeername` showed the application its frontend again.
    Reversed = "reversed" at [SOCK_IN],
    /// Refused (ECONNREFUSED at the socket, a reject at tc): the frontend
    /// has no usable endpoint.
    RefusedNoEndpoints = "refused_no_endpoints" at [SOCK_OUT, TC_IN, POD_IN],
    /// Refused: a slot or backend the frontend's state names was missing.
    /// The write protocol rules this out; the counter proves it.
    RefusedInconsistent = "refused_inconsistent" at [SOCK_OUT, TC_IN, POD_IN],
    /// Passed on untranslated: the address was a frontend being removed.
    PassedFrontendRemoved = "passed_frontend_removed" at [SOCK_OUT, TC_IN, POD_IN],
    /// Translated, but the reverse-NAT entry could not be stored, so
    /// `recvmsg`/`getpeername` will show the backend.
    RevnatUpdateFailed = "revnat_update_failed" at [SOCK_OUT],
    /// Refused with ECONNREFUSED: a Service address, on a port or protocol
    /// the Service does not define.
    RefusedUnknownPort = "refused_unknown_port" at [SOCK_OUT, POD_IN],
    /// Refused with EHOSTUNREACH: `internalTrafficPolicy: Local` and no
    /// endpoint on this node.
    RefusedNoLocalEndpoints = "refused_no_local_endpoints" at [SOCK_OUT],
    /// Session affinity sent a client to its remembered backend.
    AffinityHit = "affinity_hit" at [SOCK_OUT],
    /// A new flow from outside the node was sent to a backend (and
    /// recorded).
    NewFlow = "new_flow" at [TC_IN, XDP, POD_IN],
    /// A new flow was dropped: `externalTrafficPolicy: Local` and no
    /// endpoint on this node (kube-proxy drops it too).
    DropNoLocalEndpoints = "drop_no_local_endpoints" at [TC_IN, POD_IN],
    /// A packet was dropped: no free SNAT port (or no SNAT address
    /// configured).
    DropSnatExhausted = "drop_snat_exhausted" at [TC_OUT, XDP, POD_OUT],
    /// A new flow to a load-balancer IP from a source outside its
    /// `loadBalancerSourceRanges` was dropped (and, with
    /// `--bpf-lb-source-range-all-types`, to a NodePort or external IP
    /// from outside, or to a cluster IP from a pod or the node: refused at
    /// the socket with EPERM, dropped at a pod's interface).
    DropSourceRange = "drop_source_range" at [TC_IN, SOCK_OUT, POD_IN],
    /// A fragment whose first fragment was not seen (so its ports, and
    /// whether it is ours, are unknown) was dropped.
    DropFragmentUnknown = "drop_fragment_unknown" at [TC_IN, TC_OUT, POD_IN, POD_OUT],
    /// A reject (TCP reset, port unreachable, DSR's fragmentation needed)
    /// its frontend had no tokens left for was dropped.
    DropRejectRateLimited = "drop_reject_rate_limited" at [TC_IN, TC_OUT],
    /// A packet was left to the kernel: TCP without SYN and without a flow
    /// of ours (a flow the kernel's conntrack may translate, kube-proxy's
    /// for one), or a flow found in the kernel's conntrack at the takeover.
    PassedUntracked = "passed_untracked" at [TC_IN, POD_IN],
    /// The first packet of a flow that could not be recorded was dropped.
    DropConntrackInsert = "drop_conntrack_insert" at [TC_IN, XDP, POD_IN],
    /// An IPv6 packet was passed on whose extension headers were given up
    /// (more than `lb_ebpf`'s bound, or of a kind it does not walk): whether
    /// it is ours cannot be told.
    PassedExtHeaders = "passed_ext_headers" at [TC_IN, TC_OUT, XDP, POD_IN, POD_OUT],
    /// XDP translated a packet and sent it on itself: tc never saw it.
    Forwarded = "forwarded" at [XDP],
    /// XDP left a packet of an external frontend's flow to tc: its backend
    /// is local or behind another device, the FIB lookup failed, or its
    /// TTL ran out.
    PassedToTc = "passed_to_tc" at [XDP],
    /// The SYN of a new flow was dropped: its CPU's budget of unconfirmed
    /// flows was spent (a SYN flood, see [`crate::SynBucket`]).
    DropSynBudget = "drop_syn_budget" at [TC_IN, XDP, POD_IN],
    /// tc on a backend's node learned a DSR flow from the frontend its
    /// packet carried (a new reply entry), and took the option out.
    DsrRestored = "dsr_restored" at [TC_IN],
    /// tc took over a TCP flow mid-flow (a segment without SYN, at a
    /// frontend with Maglev and DSR): another node had balanced it.
    MidflowTakenOver = "midflow_taken_over" at [TC_IN],
    /// tc took a packet on XDP's word, without a lookup: XDP had found it
    /// no frontend's nor any flow's of ours ([`crate::XDP_META_NOT_OURS`]),
    /// and tc passed it; or a flow of ours that XDP advanced or recorded
    /// and handed over ([`crate::XdpFound`]), and tc rewrote or passed it.
    PassedXdpChecked = "passed_xdp_checked" at [TC_IN],
    /// A packet carrying a DSR frontend was dropped: not to an endpoint on
    /// this node of that frontend, from a source the reply would not go
    /// back to through the device it came in on (a local address), over a
    /// live entry of another flow, or without a token of the budget (that
    /// one counted as such).
    DropDsrInvalid = "drop_dsr_invalid" at [TC_IN],
    /// A packet of a DSR flow that the option (IPv4) or extension header
    /// (IPv6) would take over its device's MTU was answered with ICMP
    /// fragmentation needed or ICMPv6 Packet Too Big.
    DsrTooBig = "dsr_too_big" at [TC_OUT],
    /// A datagram without don't fragment that the DSR option would take
    /// over its device's MTU was SNATed rather than sent by DSR (and its
    /// flow's later packets).
    DsrSnatTooBig = "dsr_snat_too_big" at [TC_OUT],
    /// A new flow of a DSR frontend whose client is on its backend's node
    /// was SNATed (the answer would never leave that node by a device of
    /// ours).
    DsrSnatHairpin = "dsr_snat_hairpin" at [TC_IN, XDP],
    /// `connect`/`sendmsg` left a frontend alone: the socket's network
    /// namespace opted out of socket load balancing (a pod's, or any but
    /// the host's with `--bpf-lb-sock-hostns-only`), and the pod's
    /// packets are translated at its host-side interface instead.
    PassedSockOptOut = "passed_sock_opt_out" at [SOCK_OUT],
    /// A pod's new flow to its own address through a Service (hairpin) was
    /// SNATed to the node's address, so that its answer comes back through
    /// the pod's interface.
    PodSnatHairpin = "pod_snat_hairpin" at [POD_IN],
}

/// Entries per reason: two bits of hook, one of direction, one of family.
pub const PER_REASON: u32 = 16;

/// Number of entries of `LB_STATS`.
pub const STATS_COUNT: u32 = Reason::ALL.len() as u32 * PER_REASON;

/// One counter of `LB_STATS`; ordered by hook, direction, family, then
/// reason, as `lb-agent dump --stats` lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatKey {
    pub at: At,
    pub family: StatFamily,
    pub reason: Reason,
}

impl StatKey {
    pub const fn new(at: At, family: StatFamily, reason: Reason) -> Self {
        Self { at, family, reason }
    }

    /// Its index in `LB_STATS`.
    pub const fn index(self) -> u32 {
        (self.reason as u32 * PER_REASON)
            | ((self.at.hook as u32) << 2)
            | ((self.at.dir as u32) << 1)
            | self.family as u32
    }

    /// The key at `index`, if an index names one.
    pub fn from_index(index: u32) -> Option<Self> {
        let reason = *Reason::ALL.get(usize::try_from(index / PER_REASON).ok()?)?;
        let hook = match (index >> 2) & 3 {
            0 => StatHook::Sock,
            1 => StatHook::Tc,
            2 => StatHook::Xdp,
            _ => StatHook::Pod,
        };
        let dir = if index & 2 == 0 {
            StatDir::Ingress
        } else {
            StatDir::Egress
        };
        let family = if index & 1 == 0 {
            StatFamily::V4
        } else {
            StatFamily::V6
        };
        Some(Self::new(At::new(hook, dir), family, reason))
    }
}

/// Every counter the programs may count: each reason at each of its
/// places, in both families.
pub fn counted_keys() -> impl Iterator<Item = StatKey> {
    Reason::ALL.iter().flat_map(|&reason| {
        reason.places().iter().flat_map(move |&at| {
            [StatFamily::V4, StatFamily::V6].map(|family| StatKey::new(at, family, reason))
        })
    })
}

impl StatHook {
    /// Its `hook` label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Sock => "sock",
            Self::Tc => "tc",
            Self::Xdp => "xdp",
            Self::Pod => "tc_pod",
        }
    }
}

impl StatDir {
    /// Its `direction` label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Egress => "egress",
        }
    }
}

impl StatFamily {
    /// Its `family` label.
    pub const fn name(self) -> &'static str {
        match self {
            Self::V4 => "ipv4",
            Self::V6 => "ipv6",
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn every_key_has_an_index_of_its_own_within_the_map_and_reads_back() {
        let hooks = [StatHook::Sock, StatHook::Tc, StatHook::Xdp, StatHook::Pod];
        let dirs = [StatDir::Ingress, StatDir::Egress];
        let mut seen = std::collections::BTreeSet::new();
        for &reason in Reason::ALL {
            for hook in hooks {
                for dir in dirs {
                    for family in [StatFamily::V4, StatFamily::V6] {
                        let key = StatKey::new(At::new(hook, dir), family, reason);
                        let index = key.index();
                        assert!(index < STATS_COUNT, "{key:?}: {index}");
                        assert!(seen.insert(index), "{key:?}: {index} twice");
                        assert_eq!(StatKey::from_index(index), Some(key));
                    }
                }
            }
        }
        assert_eq!(StatKey::from_index(STATS_COUNT), None);
    }

    #[test]
    fn reasons_are_numbered_in_order_with_distinct_names() {
        for (i, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
        let names: std::collections::BTreeSet<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
