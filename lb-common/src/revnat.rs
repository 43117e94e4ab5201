//! Socket reverse NAT: what `recvmsg4`/`getpeername4` show the application.

/// Key of `LB4_REVNAT`: the socket and the backend it was sent to.
///
/// Written by `connect4`/`sendmsg4` when they translate; read by
/// `recvmsg4`/`getpeername4` to show the application the frontend instead.
/// Byte-identical to layout 1's key, so a migration copies entries as they are.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNat4Key {
    /// `bpf_get_socket_cookie()` of the socket, host byte order.
    pub cookie: u64,
    /// Backend IP, network byte order.
    pub addr_be: [u8; 4],
    /// Backend port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 2],
}
const _: () = assert!(size_of::<RevNat4Key>() == 16);

/// Value of `LB4_REVNAT`: the frontend the application addressed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNat4Value {
    /// The frontend address, network byte order.
    pub addr_be: [u8; 4],
    /// The frontend port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 2],
}
const _: () = assert!(size_of::<RevNat4Value>() == 8);

/// Key of `LB6_REVNAT`: [`RevNat4Key`] with an IPv6 backend address. An
/// IPv4 backend reached from an AF_INET6 socket through `::ffff:a.b.c.d` is
/// remembered here, v4-mapped, as the application sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNat6Key {
    /// `bpf_get_socket_cookie()` of the socket, host byte order.
    pub cookie: u64,
    /// Backend IP, network byte order.
    pub addr_be: [u8; 16],
    /// Backend port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 6],
}
const _: () = assert!(size_of::<RevNat6Key>() == 32);

/// Value of `LB6_REVNAT`: the frontend the application addressed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNat6Value {
    /// The frontend address, network byte order.
    pub addr_be: [u8; 16],
    /// The frontend port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 2],
}
const _: () = assert!(size_of::<RevNat6Value>() == 20);

/// `sockaddr` family tags of [`SockRevNat::family`].
pub const SOCK_REVNAT_V4: u8 = 4;
/// See [`SOCK_REVNAT_V4`].
pub const SOCK_REVNAT_V6: u8 = 6;

/// Value of `LB_SOCK_REVNAT`, the socket-local storage of a socket the
/// programs translated: the backend it was sent to and the frontend the
/// application addressed.
///
/// Written by `connect*` (every time) and `sendmsg*` (the first frontend of
/// an unconnected socket; further ones go to `LB4_REVNAT`/`LB6_REVNAT`);
/// read by `recvmsg*`/`getpeername*` and by the agent's stale-UDP reaper
/// (through `SOCK_DIAG`). It lives and dies with the socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockRevNat {
    /// Backend IP, network byte order; an IPv4 one (also when reached as
    /// `::ffff:a.b.c.d`) in the first four bytes, the rest zero.
    pub backend_be: [u8; 16],
    /// Frontend IP, as `backend_be`.
    pub frontend_be: [u8; 16],
    /// Backend port, network byte order.
    pub backend_port_be: u16,
    /// Frontend port, network byte order.
    pub frontend_port_be: u16,
    /// [`SOCK_REVNAT_V4`] or [`SOCK_REVNAT_V6`]: which maps translated it.
    pub family: u8,
    pub _pad0: [u8; 3],
}
const _: () = assert!(size_of::<SockRevNat>() == 40);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: as below.
    unsafe impl aya::Pod for super::SockRevNat {}
    // SAFETY: repr(C), padded explicitly (the size asserts equal the sum of
    // the fields), and valid for any bit pattern.
    unsafe impl aya::Pod for super::RevNat4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RevNat4Value {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RevNat6Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RevNat6Value {}
}
