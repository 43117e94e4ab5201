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

#[cfg(feature = "user")]
mod pod {
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
