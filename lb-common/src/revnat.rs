//! Socket reverse NAT: what `recvmsg4`/`getpeername4` show the application.

/// Key of `LB4_REVNAT` (`A` = `[u8; 4]`, `P` = `[u8; 2]`) and
/// `LB6_REVNAT` (`[u8; 16]`, `[u8; 6]`: the padding to the cookie's
/// alignment): the socket and the backend it was sent to.
///
/// Written by `connect4`/`sendmsg4` when they translate; read by
/// `recvmsg4`/`getpeername4` to show the application the frontend instead.
/// IPv4's is byte-identical to layout 1's key, so a migration copies
/// entries as they are. An IPv4 backend reached from an AF_INET6 socket
/// through `::ffff:a.b.c.d` is remembered in `LB6_REVNAT`, v4-mapped, as
/// the application sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNatKey<A, P> {
    /// `bpf_get_socket_cookie()` of the socket, host byte order.
    pub cookie: u64,
    /// Backend IP, network byte order.
    pub addr_be: A,
    /// Backend port, network byte order.
    pub port_be: u16,
    pub _pad0: P,
}
/// `LB4_REVNAT`'s key.
pub type RevNat4Key = RevNatKey<[u8; 4], [u8; 2]>;
/// `LB6_REVNAT`'s key.
pub type RevNat6Key = RevNatKey<[u8; 16], [u8; 6]>;
const _: () = assert!(size_of::<RevNat4Key>() == 16);
const _: () = assert!(size_of::<RevNat6Key>() == 32);

/// Value of `LB4_REVNAT` and `LB6_REVNAT`: the frontend the application
/// addressed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RevNatValue<A> {
    /// The frontend address, network byte order.
    pub addr_be: A,
    /// The frontend port, network byte order.
    pub port_be: u16,
    pub _pad0: [u8; 2],
}
/// `LB4_REVNAT`'s value.
pub type RevNat4Value = RevNatValue<[u8; 4]>;
/// `LB6_REVNAT`'s value.
pub type RevNat6Value = RevNatValue<[u8; 16]>;
const _: () = assert!(size_of::<RevNat4Value>() == 8);
const _: () = assert!(size_of::<RevNat6Value>() == 20);

/// `sockaddr` family tags of [`SockRevNat::family`].
pub const SOCK_REVNAT_V4: u8 = 4;
/// See [`SOCK_REVNAT_V4`].
pub const SOCK_REVNAT_V6: u8 = 6;

/// Value of `LB_SOCK_REVNAT`, the socket-local storage of a socket the
/// programs translated: the backend it was sent to and the frontend the
/// application addressed.
///
/// Written by `connect*` (every time) and `sendmsg*` (a long-lived
/// unconnected socket's last destination; each destination also goes to
/// `LB4_REVNAT`/`LB6_REVNAT`); read by `recvmsg*`/`getpeername*` and, for
/// UDP sockets, by the `lb_iter_udp` iterator for the agent's stale-UDP
/// reaper ([`UdpSockRecord`]). It lives and dies with the socket.
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

/// One record the `lb_iter_udp` socket iterator writes, per UDP socket of
/// the namespace it iterates that has `LB_SOCK_REVNAT` storage; read by
/// the agent's stale-UDP reaper (`SOCK_DIAG` reports no socket storage of
/// UDP sockets).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpSockRecord {
    /// The socket's cookie (`bpf_get_socket_cookie`), host byte order.
    pub cookie: u64,
    pub entry: SockRevNat,
}
const _: () = assert!(size_of::<UdpSockRecord>() == 48);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: as below.
    unsafe impl aya::Pod for super::SockRevNat {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::UdpSockRecord {}
    // SAFETY: repr(C), padded explicitly (the size asserts equal the sum of
    // the fields), and valid for any bit pattern.
    unsafe impl aya::Pod for super::RevNat4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RevNat6Key {}
    // SAFETY: as above (`Address` is sealed to the two addresses of the
    // asserts).
    unsafe impl<A: crate::Address> aya::Pod for super::RevNatValue<A> {}
}
