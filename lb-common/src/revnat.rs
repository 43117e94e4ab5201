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

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size asserts equal the sum of
    // the fields), and valid for any bit pattern.
    unsafe impl aya::Pod for super::RevNat4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RevNat4Value {}
}
