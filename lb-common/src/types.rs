//! The `#[repr(C)]` map types.

/// Key of `LB4_SERVICES`: one frontend (`vip_be:port_be/proto`) and a slot.
///
/// Slot 0 is the frontend entry; slots `1..=count` hold backend ids.
/// Written by the agent, read by the eBPF programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Service4Key {
    /// The virtual IP, network byte order.
    pub vip_be: [u8; 4],
    /// The service port, network byte order.
    pub port_be: u16,
    /// IP protocol number ([`crate::PROTO_TCP`] or [`crate::PROTO_UDP`]).
    pub proto: u8,
    pub _pad0: u8,
    /// 0 for the frontend entry, `1..=count` for backend slots. Host order.
    pub slot: u16,
    pub _pad1: [u8; 2],
}
const _: () = assert!(size_of::<Service4Key>() == 12);

/// Value of `LB4_SERVICES` (and of the future `LB6_SERVICES`).
///
/// In slot 0: `count` backends, the frontend's `svc_id` and `flags`, and
/// `backend_id` 0. In slots `1..=count`: `backend_id`, with `svc_id` repeated
/// so a dump can be read slot by slot. `count == 0` in slot 0 means the
/// service has no usable endpoints and is rejected with ECONNREFUSED.
/// All fields are host byte order. Written by the agent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServiceValue {
    /// Backend id (key of `LB4_BACKENDS`); 0 in slot 0.
    pub backend_id: u32,
    /// Stable id of the frontend, allocated by the agent (never 0).
    pub svc_id: u32,
    /// Number of backend slots; only meaningful in slot 0.
    pub count: u16,
    /// Frontend flags, reserved for affinity and traffic-policy bits (0 today);
    /// only meaningful in slot 0.
    pub flags: u8,
    pub _pad0: u8,
}
const _: () = assert!(size_of::<ServiceValue>() == 12);

/// Value of `LB4_BACKENDS` (key: backend id, `u32`, host byte order).
///
/// One backend address. Written by the agent before any slot refers to it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend4 {
    /// Backend IP, network byte order.
    pub ip_be: [u8; 4],
    /// Backend (target) port, network byte order.
    pub port_be: u16,
    /// IP protocol number.
    pub proto: u8,
    /// `BACKEND_STATE_*`; only [`BACKEND_STATE_ACTIVE`] is used today.
    pub state: u8,
}
const _: () = assert!(size_of::<Backend4>() == 8);

/// Backend state: eligible for new connections.
pub const BACKEND_STATE_ACTIVE: u8 = 0;

/// Key of `LB4_REVNAT`: the socket and the backend it was sent to.
///
/// Written by `connect4`/`sendmsg4` when they translate; read by
/// `recvmsg4`/`getpeername4` to show the application the VIP instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNat4Key {
    /// `bpf_get_socket_cookie()` of the socket, host byte order.
    pub cookie: u64,
    /// Backend IP, network byte order.
    pub ip_be: [u8; 4],
    /// Backend port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 2],
}
const _: () = assert!(size_of::<RevNat4Key>() == 16);

/// Value of `LB4_REVNAT`: the frontend the application addressed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNat4Value {
    /// The virtual IP, network byte order.
    pub vip_be: [u8; 4],
    /// The service port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 2],
}
const _: () = assert!(size_of::<RevNat4Value>() == 8);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all types are repr(C), padded explicitly, and valid for any bit pattern.
    unsafe impl aya::Pod for super::Service4Key {}
    unsafe impl aya::Pod for super::ServiceValue {}
    unsafe impl aya::Pod for super::Backend4 {}
    unsafe impl aya::Pod for super::RevNat4Key {}
    unsafe impl aya::Pod for super::RevNat4Value {}
}
