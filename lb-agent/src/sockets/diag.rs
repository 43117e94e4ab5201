//! NETLINK_SOCK_DIAG: dump a namespace's connected UDP sockets, IPv4 and
//! IPv6, and destroy one (`SOCK_DESTROY`, kernel `CONFIG_INET_DIAG_DESTROY`).
//!
//! A netlink socket stays in the network namespace it was created in, and
//! the kernel answers about (and destroys) sockets of that namespace only.

use std::{io, net::SocketAddr as InetAddr};

use netlink_packet_core::{
    DecodeError, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable,
};
use netlink_packet_sock_diag::{
    AF_INET, AF_INET6, IPPROTO_UDP, SockDiagDestroy, SockDiagMessage,
    inet::{ExtensionFlags, InetRequest, SocketId, StateFlags},
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_SOCK_DIAG};

#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    #[error("opening a NETLINK_SOCK_DIAG socket")]
    Open(#[source] io::Error),
    #[error("sending a sock_diag request")]
    Send(#[source] io::Error),
    #[error("receiving sock_diag replies")]
    Recv(#[source] io::Error),
    #[error("parsing a sock_diag reply")]
    Parse(#[source] DecodeError),
    #[error("the kernel refused the UDP socket dump")]
    Dump(#[source] io::Error),
    #[error("the kernel refused SOCK_DESTROY")]
    Destroy(#[source] io::Error),
}

/// A connected UDP socket, as the kernel reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ConnectedUdp {
    /// The kernel's id, echoed whole to destroy the socket.
    id: SocketId,
    /// `AF_INET` or `AF_INET6`: the socket's family, which the destroy
    /// request must name.
    family: u8,
    /// `SO_COOKIE`, as `bpf_get_socket_cookie()` gives it.
    pub cookie: u64,
    /// The address it is connected to (v4-mapped for an AF_INET6 socket
    /// connected to an IPv4 address).
    pub peer: InetAddr,
}

impl ConnectedUdp {
    /// `None` for what is not a connected socket.
    fn from_id(id: SocketId, family: u8) -> Option<Self> {
        let ip = id.destination_address;
        if ip.is_unspecified() || id.destination_port == 0 {
            return None;
        }
        Some(Self {
            cookie: cookie(id.cookie),
            peer: InetAddr::new(ip, id.destination_port),
            family,
            id,
        })
    }
}

/// `inet_diag_sockid.idiag_cookie` is two `u32`s in host order, low half
/// first (`sock_diag_save_cookie`).
fn cookie(raw: [u8; 8]) -> u64 {
    let [a, b, c, d, e, f, g, h] = raw;
    let low = u32::from_ne_bytes([a, b, c, d]);
    let high = u32::from_ne_bytes([e, f, g, h]);
    u64::from(high) << 32 | u64::from(low)
}

/// What a `SOCK_DESTROY` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Destroyed {
    Yes,
    /// The socket had closed (or its id now names another socket).
    Gone,
}

/// A sock_diag socket in the calling thread's network namespace.
pub(super) struct Diag {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

/// A dump part is at most 32 KiB (the kernel's cap on `max_recvmsg_len`).
const RECV_BUF: usize = 64 * 1024;

impl Diag {
    pub(super) fn open() -> Result<Self, DiagError> {
        let mut socket = Socket::new(NETLINK_SOCK_DIAG).map_err(DiagError::Open)?;
        socket.bind_auto().map_err(DiagError::Open)?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(DiagError::Open)?;
        Ok(Self {
            socket,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Every connected UDP socket of the namespace, IPv4 then IPv6.
    pub(super) fn connected_udp(&mut self) -> Result<Vec<ConnectedUdp>, DiagError> {
        let mut found = self.connected_udp_of(AF_INET, SocketId::new_v4())?;
        found.extend(self.connected_udp_of(AF_INET6, SocketId::new_v6())?);
        Ok(found)
    }

    /// The connected UDP sockets of `family` (a connected UDP socket is in
    /// `TCP_ESTABLISHED`; the kernel filters on it).
    fn connected_udp_of(
        &mut self,
        family: u8,
        any: SocketId,
    ) -> Result<Vec<ConnectedUdp>, DiagError> {
        let request =
            SockDiagMessage::InetRequest(udp_request(family, StateFlags::ESTABLISHED, any));
        let seq = self.send(request, NLM_F_REQUEST | NLM_F_DUMP)?;
        let mut found = Vec::new();
        loop {
            for message in self.recv(seq)? {
                match message.payload {
                    NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => {
                        found.extend(ConnectedUdp::from_id(r.header.socket_id, family));
                    }
                    NetlinkPayload::Done(done) if done.code != 0 => {
                        return Err(DiagError::Dump(io::Error::from_raw_os_error(
                            done.code.abs(),
                        )));
                    }
                    NetlinkPayload::Done(_) => return Ok(found),
                    NetlinkPayload::Error(e) if e.code.is_some() => {
                        return Err(DiagError::Dump(e.to_io()));
                    }
                    _ => {}
                }
            }
        }
    }

    /// Destroys `socket`: the kernel disconnects it, and its owner's next
    /// receive fails with `ECONNABORTED`.
    pub(super) fn destroy(&mut self, socket: &ConnectedUdp) -> Result<Destroyed, DiagError> {
        let request = SockDiagDestroy::new(SockDiagMessage::InetRequest(udp_request(
            socket.family,
            StateFlags::all(),
            socket.id.clone(),
        )));
        let seq = self.send(request, NLM_F_REQUEST | NLM_F_ACK)?;
        loop {
            for message in self.recv(seq)? {
                if let NetlinkPayload::Error(ack) = message.payload {
                    return match ack.code {
                        None => Ok(Destroyed::Yes),
                        // The lookup by address, then by cookie, found nothing.
                        Some(code) if code.get() == -libc::ENOENT => Ok(Destroyed::Gone),
                        Some(_) => Err(DiagError::Destroy(ack.to_io())),
                    };
                }
            }
        }
    }

    /// Sends `payload` with `flags`; returns its sequence number.
    fn send<T: NetlinkSerializable>(&mut self, payload: T, flags: u16) -> Result<u32, DiagError> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(payload));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        self.socket.send(&bytes, 0).map_err(DiagError::Send)?;
        Ok(self.seq)
    }

    /// Reads one datagram; returns its messages that answer `seq`.
    fn recv(&mut self, seq: u32) -> Result<Vec<NetlinkMessage<SockDiagMessage>>, DiagError> {
        let len = loop {
            self.buf.clear();
            match self.socket.recv(&mut self.buf, 0) {
                Ok(len) => break len,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(DiagError::Recv(e)),
            }
        };
        let mut rest = &self.buf[..len.min(self.buf.len())];
        let mut out = Vec::new();
        while !rest.is_empty() {
            let message =
                NetlinkMessage::<SockDiagMessage>::deserialize(rest).map_err(DiagError::Parse)?;
            // Messages are 4-byte aligned (NLMSG_ALIGN).
            let step = (message.header.length as usize).next_multiple_of(4);
            rest = rest.get(step..).unwrap_or_default();
            if message.header.sequence_number == seq {
                out.push(message);
            }
            if step == 0 {
                break;
            }
        }
        Ok(out)
    }
}

fn udp_request(family: u8, states: StateFlags, socket_id: SocketId) -> InetRequest {
    InetRequest {
        family,
        protocol: IPPROTO_UDP,
        extensions: ExtensionFlags::empty(),
        states,
        socket_id,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    #[test]
    fn the_cookie_is_two_host_order_halves_low_first() {
        let low = 0x0506_0708u32.to_ne_bytes();
        let high = 0x0102_0304u32.to_ne_bytes();
        let raw = [
            low[0], low[1], low[2], low[3], high[0], high[1], high[2], high[3],
        ];
        assert_eq!(cookie(raw), 0x0102_0304_0506_0708);
    }

    #[test]
    fn only_connected_sockets_are_kept() {
        let mut id = SocketId::new_v4();
        assert_eq!(
            ConnectedUdp::from_id(id.clone(), AF_INET),
            None,
            "unconnected"
        );
        id.destination_address = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(ConnectedUdp::from_id(id.clone(), AF_INET), None, "no port");
        id.destination_port = 53;
        let s = ConnectedUdp::from_id(id, AF_INET).expect("connected");
        assert_eq!(s.peer, "10.0.0.1:53".parse().unwrap());
        let mut v6 = SocketId::new_v6();
        v6.destination_port = 53;
        assert_eq!(
            ConnectedUdp::from_id(v6.clone(), AF_INET6),
            None,
            "unconnected"
        );
        v6.destination_address = "fd00::1".parse().unwrap();
        let s = ConnectedUdp::from_id(v6, AF_INET6).expect("connected");
        assert_eq!(s.peer, "[fd00::1]:53".parse().unwrap());
    }
}
