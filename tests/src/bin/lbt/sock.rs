//! Socket helpers shared by the benchmarks and the soak client: short TCP
//! connections that close with an RST, and resolver-style UDP requests
//! that reconnect when the agent destroys their socket.

use std::{
    io::{self, Write as _},
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    time::{Duration, Instant},
};

/// connect(), read and write timeout of a TCP request.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts of one request whose socket the agent destroyed as stale.
pub(crate) const UDP_DESTROYED_TRIES: u32 = 3;

pub(crate) fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: `v` points to a live T of the given size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub(crate) fn timeval(d: Duration) -> libc::timeval {
    libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(d.subsec_micros()),
    }
}

/// `to` as a sockaddr for connect(2).
pub(crate) fn sockaddr(to: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Connects with a plain blocking connect(2) (SO_SNDTIMEO bounds it) and
/// returns the stream and how long connect() took. The socket closes with
/// an RST (SO_LINGER {1, 0}): no TIME_WAIT, no port exhaustion.
pub(crate) fn connect_tcp(to: &SocketAddr) -> io::Result<(TcpStream, Duration)> {
    let family = if to.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = cvt(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fd is a fresh socket nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = fd.as_raw_fd();
    let tv = timeval(TIMEOUT);
    setsockopt(raw, libc::SOL_SOCKET, libc::SO_SNDTIMEO, &tv)?;
    setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)?;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    setsockopt(raw, libc::SOL_SOCKET, libc::SO_LINGER, &linger)?;
    let (ss, len) = sockaddr(to);
    let t0 = Instant::now();
    // SAFETY: ss/len describe a valid sockaddr for this family.
    let r = unsafe { libc::connect(raw, (&ss as *const libc::sockaddr_storage).cast(), len) };
    let took = t0.elapsed();
    if r != 0 {
        let e = io::Error::last_os_error();
        // A blocking connect that hit SO_SNDTIMEO reports EINPROGRESS.
        if e.raw_os_error() == Some(libc::EINPROGRESS) {
            return Err(io::ErrorKind::TimedOut.into());
        }
        return Err(e);
    }
    Ok((TcpStream::from(fd), took))
}

/// A reply that came from another address than the one asked, as
/// `getpeername()` or `recvfrom()` show it: the load balancer failed to show
/// the application its frontend (a missing reverse-NAT entry, say).
#[derive(Debug)]
pub(crate) struct WrongPeer(pub SocketAddr);

impl std::fmt::Display for WrongPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reply from {}", self.0)
    }
}

impl std::error::Error for WrongPeer {}

/// A failure's cause, as the reports name it: the `io::ErrorKind`, or
/// `WrongPeer <the peer seen>`, or `TimedOut` for a socket timeout.
pub(crate) fn cause(e: &io::Error) -> String {
    match e.kind() {
        _ if let Some(WrongPeer(peer)) = e.get_ref().and_then(|i| i.downcast_ref()) => {
            format!("WrongPeer {peer}")
        }
        // A timed-out blocking call on a socket with SO_{SND,RCV}TIMEO.
        io::ErrorKind::WouldBlock => "TimedOut".to_owned(),
        k => format!("{k:?}"),
    }
}

/// `Err(WrongPeer)` unless `seen` is `to`.
pub(crate) fn check_peer(seen: SocketAddr, to: &SocketAddr) -> io::Result<()> {
    if seen == *to {
        Ok(())
    } else {
        Err(io::Error::other(WrongPeer(seen)))
    }
}

/// One connection: connect, "?\n", read the id line, close (RST). A
/// connection whose peer is not `to` fails as [`WrongPeer`].
pub(crate) fn tcp_once(to: &SocketAddr, buf: &mut [u8]) -> io::Result<(usize, Duration)> {
    let (mut s, took) = connect_tcp(to)?;
    check_peer(s.peer_addr()?, to)?;
    s.write_all(b"?\n")?;
    let mut len = 0;
    loop {
        let n = io::Read::read(&mut s, &mut buf[len..])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        len += n;
        if buf[..len].contains(&b'\n') || len == buf.len() {
            return Ok((len, took));
        }
    }
}

/// Whether a UDP call failed because the agent destroyed the socket: its
/// backend left the Service while the request was in flight (the agent's
/// stale-UDP cleanup, kube-proxy's conntrack flush). recv() reports
/// ECONNABORTED, send() (when the destroy came between connect and send)
/// EDESTADDRREQ.
pub(crate) fn destroyed(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EDESTADDRREQ)
    )
}

/// One request on a new connected UDP socket (socket, connect, send,
/// receive, close: one flow per request, as a DNS resolver makes), into
/// `buf`; a reply from another address than `to` fails as [`WrongPeer`].
/// An application reconnects after its socket was destroyed, and so
/// does this; under heavy churn the new endpoint can leave too, so it tries
/// up to [`UDP_DESTROYED_TRIES`] times. Returns the reply's length and how
/// many destroyed sockets it reconnected after.
pub(crate) fn ask_fresh_udp(
    to: &SocketAddr,
    buf: &mut [u8],
    timeout: Duration,
) -> io::Result<(usize, u32)> {
    let bind = any_port_of_family(to);
    let ask = |buf: &mut [u8]| -> io::Result<usize> {
        let s = UdpSocket::bind(bind)?;
        s.set_read_timeout(Some(timeout))?;
        s.connect(to)?;
        s.send(b"?")?;
        let (len, from) = s.recv_from(buf)?;
        check_peer(from, to)?;
        Ok(len)
    };
    let mut reconnected = 0;
    loop {
        match ask(buf) {
            Err(e) if reconnected + 1 < UDP_DESTROYED_TRIES && destroyed(&e) => reconnected += 1,
            r => return r.map(|len| (len, reconnected)),
        }
    }
}

/// The wildcard address of `to`'s family, any port: where a client socket
/// for `to` binds.
pub(crate) fn any_port_of_family(to: &SocketAddr) -> SocketAddr {
    if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    }
}
