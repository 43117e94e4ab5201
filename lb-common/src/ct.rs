//! Connection tracking and source NAT for traffic from outside the node
//! (the tc programs): `LB4_CT`, `LB4_NAT`, `LB_CONFIG`, and the
//! `loadBalancerSourceRanges` of external frontends, `LB4_SRC_RANGES`.
//!
//! A flow from a client to an external frontend (NodePort, externalIP,
//! LoadBalancer IP) is translated by halves, as iptables does it in
//! PREROUTING and POSTROUTING, so that the kernel routes every packet:
//!
//! * tc ingress, client -> frontend: the `CT_DIR_IN` entry (created with the
//!   flow) names the backend; the packet is DNATed and routed, to a local
//!   pod or out again towards another node.
//! * tc egress, client -> remote backend (`externalTrafficPolicy: Cluster`
//!   only): SNAT to the node address and a port of `LB4_NAT`'s, so that the
//!   backend's replies come back through this node.
//! * tc ingress, backend -> node:port: `LB4_NAT` gives the client back.
//! * tc egress, backend -> client: the `CT_DIR_OUT` entry restores the
//!   frontend as the source, so the client sees the address it sent to.
//!
//! Entries are refreshed by the packets that hit them and age out by their
//! `expires` time; the agent deletes expired entries and those of removed
//! backends. All maps are LRU, so a full map evicts the oldest flows instead
//! of failing new ones.

/// Key of `LB4_CT`: one direction of a translated flow, as the packet that
/// looks it up carries it. Addresses and ports in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ct4Key {
    pub saddr_be: [u8; 4],
    pub daddr_be: [u8; 4],
    pub sport_be: u16,
    pub dport_be: u16,
    /// IP protocol number.
    pub proto: u8,
    /// [`CT_DIR_IN`] or [`CT_DIR_OUT`].
    pub dir: u8,
    pub _pad0: [u8; 2],
}
const _: () = assert!(size_of::<Ct4Key>() == 16);

/// A packet from the client to the frontend, seen at tc ingress; the value
/// names the backend.
pub const CT_DIR_IN: u8 = 0;
/// A packet from the backend to the client, seen at tc egress; the value
/// names the frontend.
pub const CT_DIR_OUT: u8 = 1;

/// Value of `LB4_CT`. Written by the tc programs; deleted by the agent (GC).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ct4Value {
    /// `CT_DIR_IN`: the backend, the new destination. `CT_DIR_OUT`: the
    /// frontend, the source to restore. Network byte order.
    pub addr_be: [u8; 4],
    /// The port that goes with `addr_be`, network byte order.
    pub port_be: u16,
    /// `CT_F_*` bits.
    pub flags: u16,
    /// `CT_DIR_OUT` of a flow with [`CT_F_SNAT`]: the node address and port
    /// its packets to the backend leave with, once the first one has left
    /// (`nat_port_be` 0 before). Network byte order.
    pub nat_addr_be: [u8; 4],
    pub nat_port_be: u16,
    pub _pad0: [u8; 2],
    /// The backend's id in `LB4_BACKENDS` when the flow was created (host
    /// byte order), for listings and the GC, in both directions (0 in
    /// `CT_DIR_OUT` entries written by programs older than that: unknown).
    pub backend_id: u32,
    /// `bpf_ktime_get_coarse_ns()` in seconds (the boot-time monotonic
    /// clock) after which the entry is dead; host byte order.
    pub expires: u32,
}
const _: () = assert!(size_of::<Ct4Value>() == 24);

/// The flow's packets to the backend are SNATed when they leave through an
/// external device (`externalTrafficPolicy: Cluster`).
pub const CT_F_SNAT: u16 = 1;
/// TCP: a FIN or RST was seen in this direction; the entry lives
/// [`CT_CLOSING_TIMEOUT`] from then.
pub const CT_F_CLOSING: u16 = 1 << 1;
/// TCP: a packet without SYN was seen in this direction, so the handshake
/// is done; the entry lives [`CT_TCP_TIMEOUT`].
pub const CT_F_ESTABLISHED: u16 = 1 << 2;
/// TCP: a RST was seen in this direction (with [`CT_F_CLOSING`]): the
/// connection is gone at both ends.
pub const CT_F_RESET: u16 = 1 << 3;

/// Key of `LB4_NAT`: a reply from a remote backend to the node address and
/// port its flow was SNATed to. Network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nat4Key {
    /// The backend.
    pub saddr_be: [u8; 4],
    /// The node address of [`DatapathConfig::snat4_be`].
    pub daddr_be: [u8; 4],
    pub sport_be: u16,
    /// The port the SNAT allocated.
    pub dport_be: u16,
    /// IP protocol number.
    pub proto: u8,
    pub _pad0: [u8; 3],
}
const _: () = assert!(size_of::<Nat4Key>() == 16);

/// Value of `LB4_NAT`: the client the reply goes back to. Written by tc
/// egress when it allocates the port; deleted by the agent (GC).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nat4Value {
    /// The client address, network byte order.
    pub addr_be: [u8; 4],
    /// The client port, network byte order.
    pub port_be: u16,
    /// `CT_F_*` bits of the reply direction (TCP state).
    pub flags: u16,
    /// As [`Ct4Value::expires`].
    pub expires: u32,
}
const _: () = assert!(size_of::<Nat4Value>() == 12);

/// Value of `LB_CONFIG` (an array of one, key 0): settings of the tc
/// programs. Written by the agent; all zero means "not configured", and the
/// programs then translate nothing that needs SNAT.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DatapathConfig {
    /// The IPv4 address flows are SNATed to (the node's primary address),
    /// network byte order; all zero: no SNAT, such flows are dropped.
    pub snat4_be: [u8; 4],
    /// The SNAT port range, inclusive, host byte order.
    pub nat_port_min: u16,
    pub nat_port_max: u16,
}
const _: () = assert!(size_of::<DatapathConfig>() == 8);

/// Whether an entry whose `expires` is `expires` is dead at `now` (both in
/// the programs' clock, seconds). Compared as a signed difference, so it
/// holds across the counter's wrap. The programs and the agent's collector
/// decide alike.
#[inline(always)]
pub const fn ct_expired(expires: u32, now: u32) -> bool {
    (now.wrapping_sub(expires) as i32) > 0
}

/// Whether the SNAT port of `LB4_NAT` entry `nat` may go to a new flow at
/// `now`: its flow is dead, was reset, or has been closing (a FIN seen) for
/// more than a second, so that only its last segments could still be on
/// the way; Linux's NAT likewise reuses a tuple in TIME_WAIT. Without this
/// a backend's ports would stay taken for the whole closing timeout, and a
/// busy NodePort would run out of them.
#[inline(always)]
pub const fn nat_port_reusable(nat: &Nat4Value, now: u32) -> bool {
    ct_expired(nat.expires, now)
        || nat.flags & CT_F_RESET != 0
        || (nat.flags & CT_F_CLOSING != 0
            && ct_expired(nat.expires, now.wrapping_add(CT_CLOSING_TIMEOUT - 1)))
}

/// Default SNAT port range: Cilium's, above Linux's ephemeral ports.
pub const DEFAULT_NAT_PORT_MIN: u16 = 61_000;
/// See [`DEFAULT_NAT_PORT_MIN`].
pub const DEFAULT_NAT_PORT_MAX: u16 = 65_535;
/// How many random ports tc egress tries before it counts the SNAT ports
/// as exhausted and drops the packet.
pub const NAT_PORT_TRIES: u32 = 16;

/// Seconds an established TCP entry lives without traffic (Cilium's
/// `--bpf-ct-timeout-regular-tcp`).
pub const CT_TCP_TIMEOUT: u32 = 21_600;
/// Seconds a TCP entry lives before its handshake completes, and any
/// non-TCP entry (Cilium's SYN and non-TCP timeouts).
pub const CT_SYN_TIMEOUT: u32 = 60;
/// Seconds a TCP entry lives after a FIN or RST (Cilium's `…-fin`).
pub const CT_CLOSING_TIMEOUT: u32 = 10;

/// The data of an `LB4_SRC_RANGES` key (an LPM trie: the key is this
/// behind a `u32` prefix length in bits): `loadBalancerSourceRanges` entry
/// `src_be/n` of the external frontend `addr_be:port_be/proto` has prefix
/// length [`SOURCE_RANGE_PREFIX`] + n. Network byte order. Written by the
/// agent; the value (`u32`) is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceRange4 {
    pub addr_be: [u8; 4],
    pub port_be: u16,
    pub proto: u8,
    pub _pad0: u8,
    pub src_be: [u8; 4],
}
const _: () = assert!(size_of::<SourceRange4>() == 12);

/// Bits of a [`SourceRange4`] before the source address: the frontend.
pub const SOURCE_RANGE_PREFIX: u32 = 64;

/// Default capacity of `LB4_SRC_RANGES`.
pub const DEFAULT_SOURCE_RANGES_MAX: u32 = 16_384;

/// Default capacity of `LB4_CT` (both directions of a flow count).
pub const DEFAULT_CT_MAX: u32 = 262_144;
/// Default capacity of `LB4_NAT`.
pub const DEFAULT_NAT_MAX: u32 = 131_072;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), padded explicitly (no implicit padding:
    // the size asserts above equal the sum of the fields), and every bit
    // pattern is a valid value of every field.
    unsafe impl aya::Pod for super::Ct4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Ct4Value {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Nat4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Nat4Value {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::DatapathConfig {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SourceRange4 {}
}
