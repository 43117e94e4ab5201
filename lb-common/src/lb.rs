//! The load-balancing maps: frontends, their state, backend slots, backends.
//!
//! Each family has its own maps (`LB4_*`, `LB6_*`) of the same shape;
//! slots, members and ids are family-independent types, but each family's
//! ids are its own. A lookup goes `LB4_FRONTENDS[vip:port/proto]` -> frontend id ->
//! `LB4_FE_STATE[id]` (read under its spin lock: owner, revision, count) ->
//! `LB4_SLOTS[id, rev, rand % count]` -> backend id -> `LB4_BACKENDS[id]`.
//! With session affinity, `LB4_AFFINITY` (see [`crate::affinity`]) and
//! `LB4_MEMBERS` come first.
//!
//! Only the state array is ever changed in place, and only under its lock.
//! Entries of the three hash maps are written once and never updated; the
//! agent deletes them only when no program can still reach them, so a
//! program never finds a slot or backend missing and never reads an element
//! the kernel has recycled for another key. ARCHITECTURE.md gives the
//! argument in full.

use crate::SpinLock;

/// Key of `LB4_FRONTENDS` (`A` = `[u8; 4]`) and `LB6_FRONTENDS` (`A` =
/// `[u8; 16]`): one frontend, `addr:port/proto` in a scope.
///
/// Written by the agent. Also stored in [`FrontendState::owner`], which is
/// how a program checks that the state it read belongs to its frontend.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrontendKey<A> {
    /// The frontend address (ClusterIP), network byte order.
    pub addr_be: A,
    /// The frontend port, network byte order.
    pub port_be: u16,
    /// IP protocol number ([`crate::PROTO_TCP`] or [`crate::PROTO_UDP`]).
    pub proto: u8,
    /// [`SCOPE_INTERNAL`] (the socket hooks) or [`SCOPE_EXTERNAL`] (the
    /// external-traffic-policy view of an external frontend, for tc).
    pub scope: u8,
}
/// `LB4_FRONTENDS`' key.
pub type Frontend4Key = FrontendKey<[u8; 4]>;
/// `LB6_FRONTENDS`' key.
pub type Frontend6Key = FrontendKey<[u8; 16]>;
const _: () = assert!(size_of::<Frontend4Key>() == 8);
const _: () = assert!(size_of::<Frontend6Key>() == 20);

impl<A: Copy> FrontendKey<A> {
    /// The key standing for every other port and protocol of this one's
    /// address ([`WILDCARD_PORT`]).
    #[inline(always)]
    pub fn wildcard(&self) -> Self {
        Self {
            port_be: WILDCARD_PORT,
            proto: WILDCARD_PROTO,
            ..*self
        }
    }
}

/// The frontend as seen by traffic from inside the cluster (socket hooks).
pub const SCOPE_INTERNAL: u8 = 0;
/// The frontend as seen by traffic from outside the node (tc).
pub const SCOPE_EXTERNAL: u8 = 1;

/// Value of `LB4_FRONTENDS`: the frontend's id, its index in `LB4_FE_STATE`.
///
/// Host byte order. Written by the agent once, when the frontend is added;
/// never updated while the key exists.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrontendId {
    /// Index into `LB4_FE_STATE` and first field of every slot key; never 0.
    pub id: u32,
}
const _: () = assert!(size_of::<FrontendId>() == 4);

/// Value of `LB4_FE_STATE` and `LB6_FE_STATE` (arrays indexed by frontend
/// id), owned by a [`FrontendKey<A>`]: which revision of the frontend's
/// backend list is current.
///
/// All fields but the lock are host byte order except `owner`. Written by
/// the agent only with `BPF_F_LOCK` (in place, under `lock`); read by
/// programs only while holding `lock`, so a reader always sees one whole
/// value. An entry whose `owner` is not the frontend a program looked up is
/// free, being reused, or being removed: the program treats the address as
/// no frontend of ours.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrontendState<A> {
    pub lock: SpinLock,
    /// The frontend this entry belongs to; all zero when free.
    pub owner: FrontendKey<A>,
    /// The current revision: slots `(id, rev, 0..count)` hold its backends.
    pub rev: u16,
    /// Number of backends. 0 means the frontend has no usable endpoint and
    /// connections are refused with ECONNREFUSED.
    pub count: u16,
    /// `FE_F_*` bits: how the frontend picks a backend or refuses.
    pub flags: u16,
    pub _pad0: [u8; 2],
    /// `sessionAffinity: ClientIP` timeout in seconds, when `flags` has
    /// [`FE_F_AFFINITY`]; 0 otherwise.
    pub affinity_timeout: u32,
    /// Entries of the revision's Maglev table (`LB4_MAGLEV`, see
    /// [`crate::maglev`]) when `flags` has [`FE_F_MAGLEV`]; 0 otherwise.
    pub maglev_size: u32,
}
/// `LB4_FE_STATE`'s value.
pub type Frontend4State = FrontendState<[u8; 4]>;
/// `LB6_FE_STATE`'s value.
pub type Frontend6State = FrontendState<[u8; 16]>;
const _: () = assert!(size_of::<Frontend4State>() == 28);
const _: () = assert!(size_of::<Frontend6State>() == 40);

/// `sessionAffinity: ClientIP`: a client (network namespace) keeps its
/// backend while it stays in the revision (`LB4_MEMBERS`) and it used it
/// within `affinity_timeout` seconds (`LB4_AFFINITY`).
pub const FE_F_AFFINITY: u16 = 1;
/// `internalTrafficPolicy: Local`: the revision holds only this node's
/// endpoints. Informational (listings); the datapath needs no branch.
pub const FE_F_LOCAL: u16 = 1 << 1;
/// `count` is 0 because no endpoint is on this node while others exist:
/// refuse with EHOSTUNREACH instead of ECONNREFUSED.
pub const FE_F_NO_LOCAL_ENDPOINTS: u16 = 1 << 2;
/// Bits 3-4: which address of its Service the frontend is, one of the
/// `FE_KIND_*` values. Informational (listings); the datapath needs no branch.
pub const FE_KIND_MASK: u16 = 0b11 << 3;
/// A cluster IP (and its wildcard).
pub const FE_KIND_CLUSTER_IP: u16 = 0;
/// `nodeAddress:nodePort`.
pub const FE_KIND_NODE_PORT: u16 = 1 << 3;
/// `spec.externalIPs`.
pub const FE_KIND_EXTERNAL_IP: u16 = 2 << 3;
/// `status.loadBalancer.ingress[].ip`.
pub const FE_KIND_LOAD_BALANCER: u16 = 3 << 3;
/// An external frontend of a Service with `externalTrafficPolicy: Local`.
/// Informational: from inside the node it serves the cluster endpoints all
/// the same, as kube-proxy short-circuits such traffic.
pub const FE_F_EXTERNAL_LOCAL: u16 = 1 << 5;

/// The frontend admits new flows only from the sources of its
/// `LB4_SRC_RANGES` entries (`loadBalancerSourceRanges`; tc only, and
/// only `SCOPE_EXTERNAL` frontends have it).
pub const FE_F_SOURCE_RANGES: u16 = 1 << 6;

/// New flows pick their backend from the revision's Maglev table by a hash
/// of the flow, the same on every node (tc only, and only `SCOPE_EXTERNAL`
/// frontends have it); without it, at random.
pub const FE_F_MAGLEV: u16 = 1 << 7;

/// New flows to a backend on another node go by direct server return: DNAT
/// without SNAT, the frontend's address and port carried to the backend's
/// node in an IP option, which answers the client itself (tc only, and
/// only `SCOPE_EXTERNAL` frontends of `externalTrafficPolicy: Cluster`
/// Services have it); without it, SNAT to the node's address.
pub const FE_F_DSR: u16 = 1 << 8;

/// Port and protocol of a frontend key that stands for every other port and
/// protocol of its address: a connect to a Service address on a port the
/// Service does not define finds it (`count` 0) and is refused, as
/// kube-proxy's catch-all reject for cluster IPs.
pub const WILDCARD_PORT: u16 = 0;
/// See [`WILDCARD_PORT`]; no real frontend has protocol 0.
pub const WILDCARD_PROTO: u8 = 0;

/// Key of `LB4_SLOTS`: slot `slot` (0-based, below the revision's count) of
/// revision `rev` of frontend `fe_id`. Host byte order. Written by the agent.
///
/// Every revision is a complete, immutable backend list: a change of a
/// frontend's backends writes a new revision, then points the state at it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotKey {
    pub fe_id: u32,
    pub rev: u16,
    pub slot: u16,
}
const _: () = assert!(size_of::<SlotKey>() == 8);

/// Value of `LB4_SLOTS`: which backend the slot holds. Host byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Slot {
    /// Key of `LB4_BACKENDS`; never 0.
    pub backend_id: u32,
}
const _: () = assert!(size_of::<Slot>() == 4);

/// Value of `LB4_BACKENDS` and `LB6_BACKENDS` (key: backend id, `u32`,
/// host byte order): one backend address. Written by the agent before any
/// slot names it; an id keeps its address until the id is deleted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend<A> {
    /// Backend IP, network byte order.
    pub addr_be: A,
    /// Backend (target) port, network byte order.
    pub port_be: u16,
    /// IP protocol number.
    pub proto: u8,
    /// `BACKEND_STATE_*`; only [`BACKEND_STATE_ACTIVE`] is used today.
    pub state: u8,
}
/// `LB4_BACKENDS`' value.
pub type Backend4 = Backend<[u8; 4]>;
/// `LB6_BACKENDS`' value.
pub type Backend6 = Backend<[u8; 16]>;
const _: () = assert!(size_of::<Backend4>() == 8);
const _: () = assert!(size_of::<Backend6>() == 20);

/// Key of `LB4_MEMBERS`: backend `backend_id` is in revision `rev` of
/// frontend `fe_id`. Host byte order. Written by the agent with the
/// revision's slots, only for frontends with [`FE_F_AFFINITY`]; deleted with
/// them. Lets a program check in one lookup that a client's remembered
/// backend is still a candidate.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberKey {
    pub fe_id: u32,
    pub rev: u16,
    pub _pad0: [u8; 2],
    pub backend_id: u32,
}
const _: () = assert!(size_of::<MemberKey>() == 12);

/// Value of `LB4_MEMBERS`: the slot the backend holds in the revision (for
/// listings; programs only test for presence). Host byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Member {
    pub slot: u32,
}
const _: () = assert!(size_of::<Member>() == 4);

/// Backend state: eligible for new connections.
pub const BACKEND_STATE_ACTIVE: u8 = 0;

/// Highest number of backends one frontend may hold (`count` is a `u16`).
pub const MAX_BACKENDS_PER_FRONTEND: u16 = u16::MAX;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), padded explicitly (no implicit padding:
    // the size asserts above equal the sum of the fields), and every bit
    // pattern is a valid value of every field.
    // (`Address` is sealed to the two addresses of the asserts).
    unsafe impl<A: crate::Address> aya::Pod for super::FrontendKey<A> {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FrontendId {}
    // SAFETY: as above.
    unsafe impl<A: crate::Address> aya::Pod for super::FrontendState<A> {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SlotKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Slot {}
    // SAFETY: as above.
    unsafe impl<A: crate::Address> aya::Pod for super::Backend<A> {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::MemberKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Member {}
}
