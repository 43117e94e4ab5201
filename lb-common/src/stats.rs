//! Datapath counters: `LB_STATS`, a per-CPU array of `u64` indexed by
//! these constants. Incremented by the programs; summed over CPUs by the
//! agent (`lb-agent dump --stats`, `/metrics`).

/// `connect4` rewrote a frontend to a backend.
pub const STAT_CONNECT_TRANSLATED: u32 = 0;
/// `sendmsg4` rewrote a frontend to a backend (unconnected UDP).
pub const STAT_SENDMSG_TRANSLATED: u32 = 1;
/// `recvmsg4`/`getpeername4` showed the application its frontend again.
pub const STAT_REVERSED: u32 = 2;
/// Refused with ECONNREFUSED: the frontend has no usable endpoint.
pub const STAT_REFUSED_NO_ENDPOINTS: u32 = 3;
/// Refused with ECONNREFUSED: a slot or backend the frontend's state names
/// was missing. The write protocol rules this out; the counter proves it.
pub const STAT_REFUSED_INCONSISTENT: u32 = 4;
/// Passed on untranslated: the address was a frontend that is being removed.
pub const STAT_PASSED_REMOVED: u32 = 5;
/// Translated, but the reverse-NAT entry could not be stored, so
/// `recvmsg`/`getpeername` will show the backend.
pub const STAT_REVNAT_FAILED: u32 = 6;

/// Refused with ECONNREFUSED: a Service address, on a port or protocol
/// the Service does not define.
pub const STAT_REFUSED_UNKNOWN_PORT: u32 = 7;
/// Refused with EHOSTUNREACH: `internalTrafficPolicy: Local` and no
/// endpoint on this node.
pub const STAT_REFUSED_NO_LOCAL: u32 = 8;
/// Session affinity sent a client to its remembered backend.
pub const STAT_AFFINITY_HIT: u32 = 9;

/// tc ingress: a new flow from outside the node was sent to a backend.
pub const STAT_TC_NEW_FLOW: u32 = 10;
/// tc ingress dropped a new flow: `externalTrafficPolicy: Local` and no
/// endpoint on this node (kube-proxy drops it too).
pub const STAT_TC_DROP_NO_LOCAL: u32 = 11;
/// tc ingress rejected a new flow: the Service has no usable endpoint.
pub const STAT_TC_REJECT_NO_ENDPOINTS: u32 = 12;
/// tc egress dropped a packet: no free SNAT port (or no SNAT address
/// configured).
pub const STAT_TC_DROP_SNAT_EXHAUSTED: u32 = 13;

/// tc ingress dropped a new flow to a load-balancer IP from a source
/// outside its `loadBalancerSourceRanges`.
pub const STAT_TC_DROP_SOURCE_RANGE: u32 = 14;

/// tc dropped a fragment whose first fragment it had not seen (so it
/// cannot know its ports, nor whether it is ours).
pub const STAT_TC_DROP_FRAGMENT: u32 = 15;
/// tc dropped a reject (TCP reset or port unreachable) its frontend had no
/// tokens left for.
pub const STAT_TC_DROP_REJECT_LIMIT: u32 = 16;
/// tc left a packet to the kernel: TCP without SYN and without a flow of
/// ours (a flow the kernel's conntrack may translate, kube-proxy's for
/// one), or a flow found in the kernel's conntrack at the takeover.
pub const STAT_TC_PASSED_UNTRACKED: u32 = 17;
/// tc dropped the first packet of a flow it could not record.
pub const STAT_TC_DROP_CT_FULL: u32 = 18;

/// The IPv6 twins of the tc counters `STAT_TC_NEW_FLOW` ..=
/// `STAT_TC_DROP_CT_FULL` are at their index plus this: IPv4 and IPv6
/// external traffic are counted apart (`tc6_*`).
pub const STAT_TC6_OFFSET: u32 = 9;
/// tc passed on an IPv6 packet whose extension headers it gave up walking
/// (more than `lb_ebpf`'s bound, or of a kind it does not walk): it cannot
/// tell whether the packet is ours.
pub const STAT_TC6_PASSED_EXT_HEADERS: u32 = 28;

/// XDP recorded a new flow to a remote backend (and forwarded its first
/// packet). The XDP counters follow the tc ones, which keep their indices.
pub const STAT_XDP_NEW_FLOW: u32 = 29;
/// XDP translated a packet and sent it on itself (`XDP_TX`): tc never saw
/// it.
pub const STAT_XDP_FORWARDED: u32 = 30;
/// XDP left a packet of an external frontend's flow to tc untouched: its
/// backend is local or behind another device, the FIB lookup failed, or
/// its TTL ran out.
pub const STAT_XDP_PASSED_TO_TC: u32 = 31;
/// XDP dropped the first packet of a flow it could not record.
pub const STAT_XDP_DROP_CT_FULL: u32 = 32;
/// XDP dropped a packet that found no SNAT port.
pub const STAT_XDP_DROP_SNAT_EXHAUSTED: u32 = 33;
/// The IPv6 twins of the XDP counters are at their index plus this.
pub const STAT_XDP6_OFFSET: u32 = 5;

/// tc dropped the SYN of a new IPv4 flow: its CPU's budget of
/// unconfirmed flows was spent (a SYN flood, see [`crate::SynBucket`]).
pub const STAT_TC_DROP_SYN_BUDGET: u32 = 39;
/// The same for IPv6.
pub const STAT_TC6_DROP_SYN_BUDGET: u32 = 40;
/// XDP dropped it (IPv4), before the kernel allocated anything.
pub const STAT_XDP_DROP_SYN_BUDGET: u32 = 41;
/// XDP dropped it (IPv6).
pub const STAT_XDP6_DROP_SYN_BUDGET: u32 = 42;
/// tc on a backend's node learned an IPv4 DSR flow from the frontend its
/// packet carried (a new reply entry), and took the option out.
pub const STAT_TC_DSR_RESTORED: u32 = 43;
/// The same for IPv6 (the destination-options header).
pub const STAT_TC6_DSR_RESTORED: u32 = 44;
/// tc took over an IPv4 TCP flow mid-flow (a segment without SYN, at a
/// frontend with Maglev and DSR): another node had balanced it.
pub const STAT_TC_MIDFLOW_TAKEN_OVER: u32 = 45;
/// The same for IPv6.
pub const STAT_TC6_MIDFLOW_TAKEN_OVER: u32 = 46;

/// tc took a packet on XDP's word, without a lookup: XDP had found it no
/// frontend's nor any flow's of ours ([`crate::XDP_META_NOT_OURS`]), and tc
/// passed it; or a flow of ours that XDP advanced or recorded and handed
/// over ([`crate::XdpFound`]), and tc rewrote or passed it. Both families.
pub const STAT_TC_PASSED_XDP_CHECKED: u32 = 47;

/// tc dropped an IPv4 packet carrying a DSR frontend it could not be
/// sent: not to an endpoint on this node of that frontend, from a source
/// the reply would not go back to through the device it came in on (a
/// local address), over a live entry of another flow, or without a token
/// of the budget (that one counted as such).
pub const STAT_TC_DROP_DSR_INVALID: u32 = 48;
/// The same for IPv6 (the destination-options header).
pub const STAT_TC6_DROP_DSR_INVALID: u32 = 49;
/// tc answered an IPv4 packet of a DSR flow that the option would take
/// over its device's MTU with ICMP fragmentation needed (don't fragment
/// set, or TCP).
pub const STAT_TC_DSR_TOO_BIG: u32 = 50;
/// tc answered an IPv6 packet of a DSR flow that the extension header
/// would take over its device's MTU with ICMPv6 Packet Too Big.
pub const STAT_TC6_DSR_TOO_BIG: u32 = 51;
/// tc SNATed, rather than sent by DSR, an IPv4 datagram without don't
/// fragment that the option would take over its device's MTU (and its
/// flow's later packets).
pub const STAT_TC_DSR_SNAT_TOO_BIG: u32 = 52;
/// tc SNATed a new flow of a DSR frontend whose client is on its
/// backend's node (the answer would never leave that node by a device of
/// ours), IPv4.
pub const STAT_TC_DSR_SNAT_HAIRPIN: u32 = 53;
/// The same for IPv6.
pub const STAT_TC6_DSR_SNAT_HAIRPIN: u32 = 54;

/// Number of counters (entries of `LB_STATS`).
pub const STATS_COUNT: u32 = 55;

/// Each counter's name, indexed by its constant: the `reason` label on
/// `/metrics` and the row name in `lb-agent dump --stats`.
pub const STAT_NAMES: [&str; STATS_COUNT as usize] = [
    "connect_translated",
    "sendmsg_translated",
    "reversed",
    "refused_no_endpoints",
    "refused_inconsistent",
    "passed_frontend_removed",
    "revnat_update_failed",
    "refused_unknown_port",
    "refused_no_local_endpoints",
    "affinity_hit",
    "tc_new_flow",
    "tc_drop_no_local_endpoints",
    "tc_reject_no_endpoints",
    "tc_drop_snat_exhausted",
    "tc_drop_source_range",
    "tc_drop_fragment_unknown",
    "tc_drop_reject_rate_limited",
    "tc_passed_untracked",
    "tc_drop_conntrack_insert",
    "tc6_new_flow",
    "tc6_drop_no_local_endpoints",
    "tc6_reject_no_endpoints",
    "tc6_drop_snat_exhausted",
    "tc6_drop_source_range",
    "tc6_drop_fragment_unknown",
    "tc6_drop_reject_rate_limited",
    "tc6_passed_untracked",
    "tc6_drop_conntrack_insert",
    "tc6_passed_ext_headers",
    "xdp_new_flow",
    "xdp_forwarded",
    "xdp_passed_to_tc",
    "xdp_drop_conntrack_insert",
    "xdp_drop_snat_exhausted",
    "xdp6_new_flow",
    "xdp6_forwarded",
    "xdp6_passed_to_tc",
    "xdp6_drop_conntrack_insert",
    "xdp6_drop_snat_exhausted",
    "tc_drop_syn_budget",
    "tc6_drop_syn_budget",
    "xdp_drop_syn_budget",
    "xdp6_drop_syn_budget",
    "tc_dsr_restored",
    "tc6_dsr_restored",
    "tc_midflow_taken_over",
    "tc6_midflow_taken_over",
    "tc_passed_xdp_checked",
    "tc_drop_dsr_invalid",
    "tc6_drop_dsr_invalid",
    "tc_dsr_too_big",
    "tc6_dsr_too_big",
    "tc_dsr_snat_too_big",
    "tc_dsr_snat_hairpin",
    "tc6_dsr_snat_hairpin",
];
const _: () = assert!(STAT_TC_DROP_CT_FULL + STAT_TC6_OFFSET + 1 == STAT_TC6_PASSED_EXT_HEADERS);
const _: () =
    assert!(STAT_XDP_DROP_SNAT_EXHAUSTED + STAT_XDP6_OFFSET + 1 == STAT_TC_DROP_SYN_BUDGET);
const _: () = assert!(STAT_TC6_DSR_SNAT_HAIRPIN + 1 == STATS_COUNT);
