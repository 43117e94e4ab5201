//! Connection tracking of traffic from outside the node (the tc programs):
//! `LB4_CT` and `LB6_CT` (the same types over each family's addresses), and
//! the state machine every entry follows.
//!
//! A flow from a client to an external frontend (NodePort, externalIP,
//! LoadBalancer IP) is translated by halves, as iptables does it in
//! PREROUTING and POSTROUTING, so that the kernel routes every packet:
//!
//! * tc ingress, client -> frontend: the `CT_DIR_IN` entry (created with the
//!   flow) names the backend; the packet is DNATed and routed, to a local
//!   pod or out again towards another node.
//! * tc egress, client -> remote backend (`externalTrafficPolicy: Cluster`
//!   only): SNAT to the node address and a port of `LB4_NAT`'s (see
//!   [`crate::nat`]), so that the backend's replies come back through this
//!   node.
//! * tc ingress, backend -> node:port: `LB4_NAT` gives the client back.
//! * tc egress, backend -> client: the `CT_DIR_OUT` entry restores the
//!   frontend as the source, so the client sees the address it sent to.
//!
//! # One lifetime per flow
//!
//! A flow's entries (`CT_DIR_IN`, `CT_DIR_OUT` and its `LB4_NAT` mapping)
//! share one state and one expiry, as the kernel's conntrack keeps one
//! entry per connection: each packet advances the state of the entry it
//! hits ([`ct_advance`]), and when that changes anything (at most once a
//! second for the expiry) the programs write the same into the flow's
//! other entries. Each direction owns one byte of the state
//! ([`CtValue::seen_client`], [`CtValue::seen_backend`]), so two CPUs
//! taking a packet of each direction at once never undo each other's bits.
//!
//! * TCP: an entry is created by a SYN only (a packet without SYN and
//!   without an entry belongs to a flow the kernel may know, kube-proxy's
//!   for one, and is left to it), and lives the SYN timeout; the backend
//!   answering does not extend it. Once the client acknowledged the
//!   backend's answer, the flow is established and lives the TCP timeout,
//!   also while half-closed. Once both sides sent a FIN, or either a RST,
//!   it is closed: it lives the FIN timeout from then, and
//!   [`CT_TIME_WAIT`] when the backend closed first (its socket then waits
//!   in TIME_WAIT on the node's SNAT port, which must not go to another
//!   client meanwhile). A closed flow's packets no longer extend it, and a
//!   new SYN from its client reopens it as a new flow.
//! * Other protocols: every packet, either way, gives the flow the
//!   non-TCP timeout, so a one-way stream keeps its mapping while it flows.
//! * A DSR flow on the node that balanced it is seen one side only: its
//!   backend answers around the node. Its client's segments alone drive it
//!   ([`ct_advance_one_sided`]), and nothing there can confirm it.
//!
//! Timeouts are settings of the agent ([`crate::DatapathConfig`]), with
//! Cilium's defaults and names. The agent deletes expired entries, and
//! those of flows whose backend stopped serving their frontend; the map is
//! LRU, so a full map evicts the oldest flows instead of failing new ones.

use crate::PROTO_TCP;

/// Key of `LB4_CT` (`A` = `[u8; 4]`) and `LB6_CT` (`[u8; 16]`): one
/// direction of a translated flow, as the packet that looks it up carries
/// it. Addresses and ports in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CtKey<A> {
    pub saddr_be: A,
    pub daddr_be: A,
    pub sport_be: u16,
    pub dport_be: u16,
    /// IP protocol number.
    pub proto: u8,
    /// [`CT_DIR_IN`] or [`CT_DIR_OUT`] (a flow from outside the node), or
    /// [`CT_DIR_POD_IN`] or [`CT_DIR_POD_OUT`] (a flow of a pod that opted
    /// out of socket load balancing): the two kinds never share a key, so
    /// that no packet from outside finds or replaces a pod's entry.
    pub dir: u8,
    pub _pad0: [u8; 2],
}
/// `LB4_CT`'s key.
pub type Ct4Key = CtKey<[u8; 4]>;
/// `LB6_CT`'s key.
pub type Ct6Key = CtKey<[u8; 16]>;
const _: () = assert!(size_of::<Ct4Key>() == 16);
const _: () = assert!(size_of::<Ct6Key>() == 40);

/// A packet from the client to the frontend, seen at tc ingress; the value
/// names the backend.
pub const CT_DIR_IN: u8 = 0;
/// A packet from the backend to the client, seen at tc egress; the value
/// names the frontend.
pub const CT_DIR_OUT: u8 = 1;
/// As [`CT_DIR_IN`], for a pod's packet at tc ingress of its host-side
/// interface (`lb_tc_pod_in`).
pub const CT_DIR_POD_IN: u8 = 2;
/// As [`CT_DIR_OUT`], for the reply to a pod at tc egress of its host-side
/// interface (`lb_tc_pod_out`).
pub const CT_DIR_POD_OUT: u8 = 3;

/// Whether an entry of direction `dir` is a flow's client -> frontend one
/// ([`CT_DIR_IN`], [`CT_DIR_POD_IN`]), which names the backend.
#[inline(always)]
pub const fn ct_dir_forward(dir: u8) -> bool {
    dir & 1 == 0
}

impl<A: Copy> CtKey<A> {
    /// The key of the flow's other direction, given this entry's value:
    /// `CT_DIR_IN` (client -> frontend, naming the backend) <-> `CT_DIR_OUT`
    /// (backend -> client, naming the frontend), and the same between
    /// `CT_DIR_POD_IN` and `CT_DIR_POD_OUT`.
    #[inline(always)]
    pub const fn partner(&self, value: &CtValue<A>) -> Self {
        let dir = self.dir ^ 1;
        let (saddr_be, sport_be, daddr_be, dport_be) = if ct_dir_forward(self.dir) {
            // Backend -> client.
            (value.addr_be, value.port_be, self.saddr_be, self.sport_be)
        } else {
            // Client -> frontend.
            (self.daddr_be, self.dport_be, value.addr_be, value.port_be)
        };
        Self {
            saddr_be,
            daddr_be,
            sport_be,
            dport_be,
            proto: self.proto,
            dir,
            _pad0: [0; 2],
        }
    }
}

/// Value of `LB4_CT` (`A` = `[u8; 4]`) and `LB6_CT` (`[u8; 16]`). Written
/// by the tc programs (and by the agent when it carries entries into new
/// maps or seeds a takeover); deleted by the agent.
///
/// Layout 4's value has the same size and fields but kept each direction's
/// TCP state in `flags` ([`CT_LEGACY_MASK`]) and zero in the two `seen_*`
/// bytes; [`CtValue::upgraded`] reads it as this one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtValue<A> {
    /// `CT_DIR_IN`: the backend, the new destination. `CT_DIR_OUT`: the
    /// frontend, the source to restore. Network byte order.
    pub addr_be: A,
    /// The port that goes with `addr_be`, network byte order.
    pub port_be: u16,
    /// `CT_F_*` bits, fixed when the flow is created.
    pub flags: u16,
    /// `CT_DIR_OUT` of a flow with [`CT_F_SNAT`]: the node address and port
    /// its packets to the backend leave with, once the first one has left
    /// (`nat_port_be` 0 before). Network byte order.
    pub nat_addr_be: A,
    pub nat_port_be: u16,
    /// `CT_SEEN_*` bits of the packets the client sent; written only by
    /// them.
    pub seen_client: u8,
    /// `CT_SEEN_*` bits of the packets the backend sent; written only by
    /// them.
    pub seen_backend: u8,
    /// The backend's id in `LB4_BACKENDS` (`LB6_BACKENDS`) when the flow was created (host
    /// byte order), for listings; 0 when unknown (a kernel flow, or an
    /// entry of an older program).
    pub backend_id: u32,
    /// `bpf_ktime_get_coarse_ns()` in seconds (the boot-time monotonic
    /// clock) after which the flow is dead; host byte order.
    pub expires: u32,
}
/// `LB4_CT`'s value.
pub type Ct4Value = CtValue<[u8; 4]>;
/// `LB6_CT`'s value.
pub type Ct6Value = CtValue<[u8; 16]>;
const _: () = assert!(size_of::<Ct4Value>() == 24);
const _: () = assert!(size_of::<Ct6Value>() == 48);

/// The flow's packets to the backend are SNATed when they leave through an
/// external device (`externalTrafficPolicy: Cluster`).
pub const CT_F_SNAT: u16 = 1;
/// A direct-server-return flow. On the node that load-balanced it: its
/// packets to a backend on another node leave DNATed, not SNATed, with
/// the frontend in an IPv4 option. On the backend's node (a `CT_DIR_OUT`
/// entry keyed by the backend's reply, made from that option): the reply
/// leaves with the frontend as its source, straight to the client.
pub const CT_F_DSR: u16 = 1 << 4;
/// A flow the kernel's conntrack translates (kube-proxy's, found when the
/// agent took over): its packets are left to the kernel.
pub const CT_F_KERNEL: u16 = 1 << 8;
/// Layout 4's per-direction TCP state bits of `flags` (closing, established,
/// reset), which [`CtValue::upgraded`] turns into `seen_*` bits. Never set
/// by this layout's programs.
pub const CT_LEGACY_MASK: u16 = 0b1110;
const CT_LEGACY_CLOSING: u16 = 1 << 1;
const CT_LEGACY_ESTABLISHED: u16 = 1 << 2;
const CT_LEGACY_RESET: u16 = 1 << 3;

/// A `seen_*` bit: any packet in that direction.
pub const CT_SEEN: u8 = 1 << 4;
/// TCP: a packet without SYN in that direction.
pub const CT_SEEN_ACK: u8 = 1 << 5;
/// TCP: a FIN in that direction.
pub const CT_SEEN_FIN: u8 = 1 << 6;
/// TCP: a RST in that direction.
pub const CT_SEEN_RST: u8 = 1 << 7;

/// TCP flag bits (byte 13 of the header).
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;

/// Seconds the backend's socket waits in TIME_WAIT after closing first
/// (Linux's `TCP_TIMEWAIT_LEN`): a flow closed that way is held that long,
/// so that its SNAT port does not go to another client meanwhile.
pub const CT_TIME_WAIT: u32 = 60;

/// Seconds an established TCP flow lives without traffic (Cilium's
/// `--bpf-ct-timeout-regular-tcp`).
pub const DEFAULT_CT_TIMEOUT_TCP: u32 = 21_600;
/// Seconds a TCP flow lives before its handshake completes (Cilium's
/// `--bpf-ct-timeout-regular-tcp-syn`).
pub const DEFAULT_CT_TIMEOUT_TCP_SYN: u32 = 60;
/// Seconds a closed TCP flow lives (Cilium's
/// `--bpf-ct-timeout-regular-tcp-fin`).
pub const DEFAULT_CT_TIMEOUT_TCP_FIN: u32 = 10;
/// Seconds a non-TCP flow lives without traffic (Cilium's
/// `--bpf-ct-timeout-regular-any`).
pub const DEFAULT_CT_TIMEOUT_ANY: u32 = 60;

/// The conntrack timeouts, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp: u32,
    pub tcp_syn: u32,
    pub tcp_fin: u32,
    pub any: u32,
}

impl Timeouts {
    /// Cilium's defaults.
    pub const DEFAULT: Self = Self {
        tcp: DEFAULT_CT_TIMEOUT_TCP,
        tcp_syn: DEFAULT_CT_TIMEOUT_TCP_SYN,
        tcp_fin: DEFAULT_CT_TIMEOUT_TCP_FIN,
        any: DEFAULT_CT_TIMEOUT_ANY,
    };
}

impl Default for Timeouts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Whether an entry whose `expires` is `expires` is dead at `now` (both in
/// the programs' clock, seconds). Compared as a signed difference, so it
/// holds across the counter's wrap. The programs and the agent's collector
/// decide alike.
#[inline(always)]
pub const fn ct_expired(expires: u32, now: u32) -> bool {
    (now.wrapping_sub(expires) as i32) > 0
}

/// The `seen_*` bits a packet of `proto` with TCP flags `tcp_flags` sets in
/// its direction's byte.
#[inline(always)]
pub const fn seen_bits(proto: u8, tcp_flags: u8) -> u8 {
    if proto != PROTO_TCP {
        return CT_SEEN;
    }
    let mut bits = CT_SEEN;
    if tcp_flags & TCP_SYN == 0 {
        bits |= CT_SEEN_ACK;
    }
    if tcp_flags & TCP_FIN != 0 {
        bits |= CT_SEEN_FIN;
    }
    if tcp_flags & TCP_RST != 0 {
        bits |= CT_SEEN_RST;
    }
    bits
}

/// TCP: whether a flow whose directions saw `client` and `backend` is over:
/// both sides sent a FIN, or either a RST.
#[inline(always)]
pub const fn ct_closed(client: u8, backend: u8) -> bool {
    (client | backend) & CT_SEEN_RST != 0 || client & backend & CT_SEEN_FIN != 0
}

/// TCP: whether the handshake is done: the client sent a packet without
/// SYN and the backend answered.
#[inline(always)]
pub const fn ct_established(client: u8, backend: u8) -> bool {
    client & CT_SEEN_ACK != 0 && backend & CT_SEEN != 0
}

/// A flow's state after one packet: its direction's new `seen_*` byte and
/// the flow's new expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advanced {
    pub seen: u8,
    pub expires: u32,
}

/// The state of a flow whose directions saw `client` and `backend` bits and
/// which expires at `expires`, after a packet of `proto` with `tcp_flags`
/// from the client (`from_client`) or the backend, at `now`. See the
/// module's documentation for the rules.
#[expect(
    clippy::too_many_arguments,
    reason = "the programs call it with values they hold in registers"
)]
#[inline(always)]
pub const fn ct_advance(
    t: &Timeouts,
    proto: u8,
    tcp_flags: u8,
    from_client: bool,
    client: u8,
    backend: u8,
    expires: u32,
    now: u32,
) -> Advanced {
    let bits = seen_bits(proto, tcp_flags);
    let (own, other) = if from_client {
        (client, backend)
    } else {
        (backend, client)
    };
    let seen = own | bits;
    if proto != PROTO_TCP {
        return Advanced {
            seen,
            expires: now.wrapping_add(t.any),
        };
    }
    let (c, b) = if from_client {
        (seen, backend)
    } else {
        (client, seen)
    };
    let expires = if ct_closed(client, backend) {
        // Closed already: its last segments do not extend it.
        expires
    } else if ct_closed(c, b) {
        // The client's FIN closing a flow the backend closed first: the
        // backend's socket waits in TIME_WAIT.
        let backend_first = from_client && other & CT_SEEN_FIN != 0 && bits & CT_SEEN_RST == 0;
        let hold = if backend_first && t.tcp_fin < CT_TIME_WAIT {
            CT_TIME_WAIT
        } else {
            t.tcp_fin
        };
        now.wrapping_add(hold)
    } else if ct_established(c, b) {
        now.wrapping_add(t.tcp)
    } else if from_client {
        now.wrapping_add(t.tcp_syn)
    } else {
        // An answer to a handshake the client has not finished (a SYN from
        // a spoofed source, say): only the client keeps it alive.
        expires
    };
    Advanced { seen, expires }
}

/// The expiry of a new flow whose first packet is of `proto`: as if it
/// were a SYN, whatever it is.
#[inline(always)]
pub const fn ct_new_expiry(t: &Timeouts, proto: u8, now: u32) -> u32 {
    now.wrapping_add(if proto == PROTO_TCP { t.tcp_syn } else { t.any })
}

/// TCP, a flow this node sees one side of: a direct-server-return flow on
/// the node that balanced it (its `CT_DIR_IN` entry with [`CT_F_DSR`]),
/// whose backend answers the client around it. Whether the client closed
/// it: a FIN or a RST.
#[inline(always)]
pub const fn ct_closing_one_sided(client: u8) -> bool {
    client & (CT_SEEN_FIN | CT_SEEN_RST) != 0
}

/// [`ct_advance`] for a packet from the client of a flow seen from the
/// client's side only. The backend's answer can never confirm it, so the
/// client's segments alone drive it, as IPVS's direct routing does for the
/// connections it sees one way: a SYN lives the SYN timeout; any segment
/// without SYN the TCP timeout (an idle connection keeps its backend); a
/// FIN the FIN timeout, at least [`CT_TIME_WAIT`], from each segment (the
/// backend may still be sending, and the client acknowledging); a RST
/// closes it for good, the FIN timeout from then. A flow started by a
/// segment without SYN (taken over mid-flow) is advanced from no bits.
#[inline(always)]
pub const fn ct_advance_one_sided(
    t: &Timeouts,
    tcp_flags: u8,
    client: u8,
    expires: u32,
    now: u32,
) -> Advanced {
    let seen = client | seen_bits(PROTO_TCP, tcp_flags);
    let expires = if client & CT_SEEN_RST != 0 {
        expires
    } else if seen & CT_SEEN_RST != 0 {
        now.wrapping_add(t.tcp_fin)
    } else if seen & CT_SEEN_FIN != 0 {
        now.wrapping_add(if t.tcp_fin < CT_TIME_WAIT {
            CT_TIME_WAIT
        } else {
            t.tcp_fin
        })
    } else if seen & CT_SEEN_ACK != 0 {
        now.wrapping_add(t.tcp)
    } else {
        now.wrapping_add(t.tcp_syn)
    };
    Advanced { seen, expires }
}

/// Whether a new TCP flow whose client's first packet set `client` bits
/// takes a token of the budget of unconfirmed flows
/// ([`crate::SynBucket`]): every flow no backend answered yet, however it
/// starts; a flow seen one side only ([`ct_advance_one_sided`]) is never
/// answered where it is seen, and holds its token until the client closes
/// it, unless it starts closed.
#[inline(always)]
pub const fn ct_takes_token(one_sided: bool, client: u8) -> bool {
    !one_sided || !ct_closing_one_sided(client)
}

impl<A: Copy> CtValue<A> {
    /// This entry as this layout keeps it. An entry of layout 4 kept only
    /// its own direction's TCP state, in `flags` (`CT_DIR_IN`: the
    /// client's; `CT_DIR_OUT`: the backend's): it becomes that direction's
    /// `seen_*` byte, and an established one has seen both directions.
    /// Other entries are returned as they are.
    #[inline(always)]
    pub const fn upgraded(mut self, dir: u8) -> Self {
        let legacy = self.flags & CT_LEGACY_MASK;
        if legacy == 0 {
            return self;
        }
        let mut own = CT_SEEN;
        if legacy & CT_LEGACY_ESTABLISHED != 0 {
            own |= CT_SEEN_ACK;
            if dir == CT_DIR_IN {
                self.seen_backend |= CT_SEEN;
            } else {
                self.seen_client |= CT_SEEN | CT_SEEN_ACK;
            }
        }
        if legacy & CT_LEGACY_RESET != 0 {
            own |= CT_SEEN_RST;
        } else if legacy & CT_LEGACY_CLOSING != 0 {
            own |= CT_SEEN_FIN;
        }
        if dir == CT_DIR_IN {
            self.seen_client |= own;
        } else {
            self.seen_backend |= own;
        }
        self.flags &= !CT_LEGACY_MASK;
        self
    }
}

/// Default capacity of `LB4_CT` and of `LB6_CT` (both directions of a flow
/// count).
pub const DEFAULT_CT_MAX: u32 = 262_144;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), padded explicitly (no implicit padding:
    // the size asserts above equal the sum of the fields), and every bit
    // pattern is a valid value of every field.
    // (`Address` is sealed to the two addresses of the asserts).
    unsafe impl<A: crate::Address> aya::Pod for super::CtKey<A> {}
    // SAFETY: as above.
    unsafe impl<A: crate::Address> aya::Pod for super::CtValue<A> {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::PROTO_UDP;

    const T: Timeouts = Timeouts {
        tcp: 1000,
        tcp_syn: 60,
        tcp_fin: 10,
        any: 30,
    };
    const SYN: u8 = TCP_SYN;
    const SYN_ACK: u8 = TCP_SYN | TCP_ACK;
    const ACK: u8 = TCP_ACK;
    const FIN: u8 = TCP_FIN | TCP_ACK;
    const RST: u8 = TCP_RST;

    /// Replays `packets` (from the client?, TCP flags, time) on a flow
    /// created by a SYN at 0: the bytes and the expiry after each.
    fn replay(packets: &[(bool, u8, u32)]) -> Vec<(u8, u8, u32)> {
        let (mut c, mut b) = (seen_bits(PROTO_TCP, SYN), 0);
        let mut expires = ct_new_expiry(&T, PROTO_TCP, 0);
        packets
            .iter()
            .map(|&(from_client, flags, now)| {
                let a = ct_advance(&T, PROTO_TCP, flags, from_client, c, b, expires, now);
                if from_client {
                    c = a.seen;
                } else {
                    b = a.seen;
                }
                expires = a.expires;
                (c, b, expires)
            })
            .collect()
    }

    fn expiries(packets: &[(bool, u8, u32)]) -> Vec<u32> {
        replay(packets).into_iter().map(|(.., e)| e).collect()
    }

    #[test]
    fn a_handshake_moves_the_flow_from_the_syn_timeout_to_the_tcp_one() {
        // The answer alone does not extend it; the client's ACK does.
        assert_eq!(
            expiries(&[(false, SYN_ACK, 1), (true, ACK, 2), (false, ACK, 3)]),
            [60, 1002, 1003]
        );
    }

    #[test]
    fn answers_to_an_unfinished_handshake_do_not_keep_it_alive() {
        assert_eq!(
            expiries(&[
                (false, SYN_ACK, 1),
                (false, SYN_ACK, 3),
                (false, SYN_ACK, 7)
            ]),
            [60, 60, 60]
        );
        // A retransmitted SYN does.
        assert_eq!(expiries(&[(true, SYN, 5)]), [65]);
    }

    #[test]
    fn a_bare_ack_without_an_answer_is_no_handshake() {
        assert_eq!(expiries(&[(true, ACK, 2), (true, ACK, 4)]), [62, 64]);
    }

    #[test]
    fn a_half_closed_flow_stays_established_until_the_other_fin() {
        let e = expiries(&[
            (false, SYN_ACK, 1),
            (true, ACK, 2),
            (true, FIN, 3),
            (false, ACK, 20),
            (false, ACK, 400),
        ]);
        assert_eq!(e, [60, 1002, 1003, 1020, 1400]);
    }

    #[test]
    fn both_fins_close_the_flow_and_later_segments_do_not_extend_it() {
        let e = expiries(&[
            (false, SYN_ACK, 1),
            (true, ACK, 2),
            (true, FIN, 3),
            (false, FIN, 5),
            (true, ACK, 6),
            (true, ACK, 9),
        ]);
        assert_eq!(e, [60, 1002, 1003, 15, 15, 15]);
        let (c, b, _) = replay(&[(true, FIN, 3), (false, FIN, 5)])[1];
        assert!(ct_closed(c, b));
    }

    #[test]
    fn a_backend_that_closes_first_holds_the_flow_for_time_wait() {
        let e = expiries(&[
            (false, SYN_ACK, 1),
            (true, ACK, 2),
            (false, FIN, 3),
            (true, FIN, 5),
        ]);
        assert_eq!(e, [60, 1002, 1003, 5 + CT_TIME_WAIT]);
    }

    #[test]
    fn a_reset_from_either_side_closes_the_flow() {
        for from_client in [true, false] {
            let e = expiries(&[(false, SYN_ACK, 1), (true, ACK, 2), (from_client, RST, 4)]);
            assert_eq!(e, [60, 1002, 14], "from the client: {from_client}");
        }
    }

    #[test]
    fn other_protocols_live_the_non_tcp_timeout_from_each_packet_either_way() {
        assert_eq!(ct_new_expiry(&T, PROTO_UDP, 5), 35);
        let a = ct_advance(&T, PROTO_UDP, 0, true, CT_SEEN, 0, 35, 9);
        assert_eq!((a.seen, a.expires), (CT_SEEN, 39));
        let a = ct_advance(&T, PROTO_UDP, 0, false, CT_SEEN, 0, 39, 50);
        assert_eq!((a.seen, a.expires), (CT_SEEN, 80));
    }

    #[test]
    fn a_layout_4_entry_becomes_its_directions_bits() {
        let v = Ct4Value {
            flags: CT_F_SNAT | CT_LEGACY_ESTABLISHED,
            ..Ct4Value::default()
        };
        let u = v.upgraded(CT_DIR_OUT);
        assert_eq!(u.flags, CT_F_SNAT);
        assert_eq!(u.seen_backend, CT_SEEN | CT_SEEN_ACK);
        assert!(ct_established(u.seen_client, u.seen_backend));
        let v = Ct4Value {
            flags: CT_LEGACY_CLOSING | CT_LEGACY_ESTABLISHED,
            ..Ct4Value::default()
        };
        let u = v.upgraded(CT_DIR_IN);
        assert_eq!(u.seen_client, CT_SEEN | CT_SEEN_ACK | CT_SEEN_FIN);
        assert!(!ct_closed(u.seen_client, u.seen_backend));
        // This layout's entries stay as they are.
        let v = Ct4Value {
            flags: CT_F_SNAT,
            seen_client: CT_SEEN,
            ..Ct4Value::default()
        };
        assert_eq!(v.upgraded(CT_DIR_IN), v);
    }

    /// Replays client segments on a one-sided flow whose first packet
    /// has `first` flags at 0: the client's bits and the expiry after each.
    fn replay_one_sided(first: u8, packets: &[(u8, u32)]) -> Vec<(u8, u32)> {
        let a = ct_advance_one_sided(&T, first, 0, 0, 0);
        let (mut c, mut expires) = (a.seen, a.expires);
        let mut out = Vec::from([(c, expires)]);
        for &(flags, now) in packets {
            let a = ct_advance_one_sided(&T, flags, c, expires, now);
            (c, expires) = (a.seen, a.expires);
            out.push((c, expires));
        }
        out
    }

    #[test]
    fn a_one_sided_flow_lives_on_the_clients_segments_alone() {
        let after = replay_one_sided(SYN, &[(ACK, 5), (ACK, 500), (FIN, 600), (ACK, 650)]);
        let e: Vec<u32> = after.iter().map(|&(_, e)| e).collect();
        // SYN: the SYN timeout; ACKs: the TCP timeout from each; the
        // client's FIN: TIME_WAIT (longer than T's FIN timeout), extended
        // by its later acknowledgments (the backend may still send).
        assert_eq!(e, [60, 1005, 1500, 660, 710]);
        assert!(!ct_closing_one_sided(after[2].0));
        assert!(ct_closing_one_sided(after[3].0));
        // A RST closes it for good.
        let after = replay_one_sided(SYN, &[(ACK, 5), (RST, 7), (ACK, 9)]);
        assert_eq!(after[2].1, 17);
        assert_eq!(after[3].1, 17);
    }

    #[test]
    fn a_flow_taken_over_mid_flow_starts_as_its_first_segment_says() {
        // An ACK: an established connection, the TCP timeout.
        assert_eq!(replay_one_sided(ACK, &[])[0].1, 1000);
        // A FIN or a RST: closing already, the closing timeout.
        assert_eq!(replay_one_sided(FIN, &[])[0].1, CT_TIME_WAIT);
        assert_eq!(replay_one_sided(RST, &[])[0].1, 10);
        // Only a flow that does not start closed takes a token.
        assert!(ct_takes_token(true, seen_bits(PROTO_TCP, ACK)));
        assert!(ct_takes_token(true, seen_bits(PROTO_TCP, SYN)));
        assert!(!ct_takes_token(true, seen_bits(PROTO_TCP, RST)));
        assert!(!ct_takes_token(true, seen_bits(PROTO_TCP, FIN)));
        // A flow seen both ways always does: no backend answered yet.
        assert!(ct_takes_token(false, seen_bits(PROTO_TCP, RST)));
    }

    #[test]
    fn a_partner_key_leads_back() {
        let k = Ct4Key {
            saddr_be: [198, 51, 100, 7],
            daddr_be: [192, 0, 2, 10],
            sport_be: 40000u16.to_be(),
            dport_be: 30080u16.to_be(),
            proto: PROTO_TCP,
            dir: CT_DIR_IN,
            _pad0: [0; 2],
        };
        let to_backend = Ct4Value {
            addr_be: [10, 1, 0, 5],
            port_be: 8080u16.to_be(),
            ..Ct4Value::default()
        };
        let out = k.partner(&to_backend);
        assert_eq!(
            (out.saddr_be, out.daddr_be, out.dir),
            ([10, 1, 0, 5], [198, 51, 100, 7], CT_DIR_OUT)
        );
        let to_frontend = Ct4Value {
            addr_be: k.daddr_be,
            port_be: k.dport_be,
            ..Ct4Value::default()
        };
        assert_eq!(out.partner(&to_frontend), k);
        // A pod's flow pairs its own directions, never a node's.
        let pod = Ct4Key {
            dir: CT_DIR_POD_IN,
            ..k
        };
        let reply = pod.partner(&to_backend);
        assert_eq!(reply.dir, CT_DIR_POD_OUT);
        assert_eq!(reply.partner(&to_frontend), pod);
        assert!(ct_dir_forward(CT_DIR_IN) && ct_dir_forward(CT_DIR_POD_IN));
        assert!(!ct_dir_forward(CT_DIR_OUT) && !ct_dir_forward(CT_DIR_POD_OUT));
    }
}
