//! The kernel's own conntrack table, IPv4 and IPv6 TCP and UDP, dumped over
//! ctnetlink (`NETLINK_NETFILTER`, `IPCTNL_MSG_CT_GET` with `NLM_F_DUMP`):
//! the connections that netfilter (kube-proxy's iptables or nftables
//! rules, say) tracks and translates, which our programs never see.
//!
//! A netlink socket stays in the network namespace it was created in, and
//! the kernel answers about that namespace's table only: the dump is of the
//! calling thread's network namespace. It needs `CAP_NET_ADMIN` there
//! (nfnetlink refuses every request without it).
//!
//! A dump is not a snapshot: entries created or deleted while it runs may
//! be in it or not.

use std::{
    io,
    net::{IpAddr, SocketAddr},
};

use netlink_packet_core::{
    DecodeError, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
    conntrack::{ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Status, Tuple},
};
use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_NETFILTER};

#[derive(Debug, thiserror::Error)]
pub enum KernelConntrackError {
    /// The kernel has no nfnetlink (the socket cannot be made:
    /// `EPROTONOSUPPORT`) or no ctnetlink in it (`CONFIG_NF_CT_NETLINK`
    /// off or `nf_conntrack_netlink` not loadable: nfnetlink answers
    /// `EINVAL` to a request for a subsystem it does not have). It will
    /// not change while the agent runs: log it once.
    #[error("the kernel has no ctnetlink (nfnetlink or nf_conntrack_netlink is missing)")]
    Unsupported(#[source] io::Error),
    #[error("opening a NETLINK_NETFILTER socket")]
    Open(#[source] io::Error),
    #[error("sending the ctnetlink dump request")]
    Send(#[source] io::Error),
    #[error("receiving ctnetlink replies")]
    Recv(#[source] io::Error),
    #[error("parsing a ctnetlink reply")]
    Parse(#[source] DecodeError),
    /// The kernel refused the dump (`EPERM` without `CAP_NET_ADMIN`) or
    /// ended it with an error.
    #[error("the kernel refused the conntrack dump")]
    Dump(#[source] io::Error),
}

/// One kernel conntrack entry, IPv4 or IPv6, TCP or UDP. Both tuples are
/// of one family: the kernel's NAT never changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelFlow {
    /// `IPPROTO_TCP` (6) or `IPPROTO_UDP` (17).
    pub proto: u8,
    /// The original direction's tuple: as the first packet was sent (before
    /// any NAT), from the client to the address it asked for.
    pub orig_src: SocketAddr,
    pub orig_dst: SocketAddr,
    /// The reply direction's tuple: as the answers are sent (before NAT is
    /// undone), so `reply_src` is the backend a DNAT chose.
    pub reply_src: SocketAddr,
    pub reply_dst: SocketAddr,
    /// `IPS_DST_NAT`: the destination was translated (DNAT, REDIRECT).
    pub dst_nat: bool,
    /// `IPS_SRC_NAT`: the source was translated (SNAT, MASQUERADE).
    pub src_nat: bool,
    /// `CTA_TIMEOUT`: seconds until the entry expires unless more packets
    /// come; 0 when the kernel left it out (an entry about to expire).
    pub timeout_secs: u32,
}

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

impl KernelFlow {
    /// `None` for an entry that is not TCP or UDP with both tuples whole.
    fn from_attributes(attributes: &[ConntrackAttribute]) -> Option<Self> {
        let (mut orig, mut reply) = (None, None);
        let mut status = Status::empty();
        let mut timeout_secs = 0;
        for attribute in attributes {
            match attribute {
                ConntrackAttribute::CtaTupleOrig(t) => orig = Some(Ends::from_tuple(t)?),
                ConntrackAttribute::CtaTupleReply(t) => reply = Some(Ends::from_tuple(t)?),
                ConntrackAttribute::CtaStatus(s) => status = *s,
                ConntrackAttribute::CtaTimeout(t) => timeout_secs = *t,
                _ => {}
            }
        }
        let (orig, reply) = (orig?, reply?);
        if !matches!(orig.proto, IPPROTO_TCP | IPPROTO_UDP) || reply.proto != orig.proto {
            return None;
        }
        Some(Self {
            proto: orig.proto,
            orig_src: orig.src,
            orig_dst: orig.dst,
            reply_src: reply.src,
            reply_dst: reply.dst,
            dst_nat: status.contains(Status::DstNat),
            src_nat: status.contains(Status::SrcNat),
            timeout_secs,
        })
    }
}

/// One direction's tuple (`CTA_TUPLE_IP` and `CTA_TUPLE_PROTO`).
struct Ends {
    proto: u8,
    src: SocketAddr,
    dst: SocketAddr,
}

impl Ends {
    /// `None` unless the tuple has addresses, a protocol and ports (ICMP
    /// has an id, type and code instead, which the crate leaves as
    /// `ProtoTuple::Other`).
    fn from_tuple(tuple: &[Tuple]) -> Option<Self> {
        let (mut src, mut dst): (Option<IpAddr>, Option<IpAddr>) = (None, None);
        let (mut proto, mut sport, mut dport) = (None, None, None);
        for part in tuple {
            match part {
                Tuple::Ip(ips) => {
                    for ip in ips {
                        match ip {
                            IPTuple::SourceAddress(a) => src = Some(*a),
                            IPTuple::DestinationAddress(a) => dst = Some(*a),
                            _ => {}
                        }
                    }
                }
                Tuple::Proto(protos) => {
                    for p in protos {
                        match p {
                            ProtoTuple::Protocol(p) => proto = Some(u8::from(*p)),
                            ProtoTuple::SourcePort(port) => sport = Some(*port),
                            ProtoTuple::DestinationPort(port) => dport = Some(*port),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Some(Self {
            proto: proto?,
            src: SocketAddr::new(src?, sport?),
            dst: SocketAddr::new(dst?, dport?),
        })
    }
}

/// Every TCP and UDP entry of the calling thread's network namespace's
/// conntrack table, both families in one dump; entries of other protocols
/// (ICMP, SCTP...) are left out.
pub fn dump() -> Result<Vec<KernelFlow>, KernelConntrackError> {
    let socket = open()?;
    send_dump_request(&socket)?;
    let mut flows = Vec::new();
    let mut buf = Vec::with_capacity(RECV_BUF);
    loop {
        let len = loop {
            buf.clear();
            match socket.recv(&mut buf, 0) {
                Ok(len) => break len,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(KernelConntrackError::Recv(e)),
            }
        };
        let datagram = &buf[..len.min(buf.len())];
        if let Part::Done = take_part(datagram, SEQ, &mut flows)? {
            return Ok(flows);
        }
    }
}

/// A dump part is at most 32 KiB (the kernel's cap on `max_recvmsg_len`).
const RECV_BUF: usize = 64 * 1024;

/// The socket is ours alone and carries one request.
const SEQ: u32 = 1;

fn open() -> Result<Socket, KernelConntrackError> {
    let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| {
        match e.raw_os_error() {
            // No netlink family NETLINK_NETFILTER (no nfnetlink), or no
            // netlink at all.
            Some(libc::EPROTONOSUPPORT | libc::EAFNOSUPPORT) => {
                KernelConntrackError::Unsupported(e)
            }
            _ => KernelConntrackError::Open(e),
        }
    })?;
    socket.bind_auto().map_err(KernelConntrackError::Open)?;
    socket
        .connect(&NetlinkAddr::new(0, 0))
        .map_err(KernelConntrackError::Open)?;
    Ok(socket)
}

fn send_dump_request(socket: &Socket) -> Result<(), KernelConntrackError> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = SEQ;
    // nfgen_family AF_UNSPEC: every family's entries (ctnetlink matches
    // family 0 to all); a per-family request, as kube-proxy's are, would
    // walk the whole table once for each.
    let request = NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, 0),
        ConntrackMessage::Get(Vec::new()),
    );
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(request));
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    socket.send(&bytes, 0).map_err(KernelConntrackError::Send)?;
    Ok(())
}

/// Whether the dump goes on after a datagram.
#[derive(Debug, PartialEq, Eq)]
enum Part {
    More,
    Done,
}

/// Adds the flows of one datagram of the dump (several messages, 4-byte
/// aligned) to `flows`; `Done` at `NLMSG_DONE`.
fn take_part(
    datagram: &[u8],
    seq: u32,
    flows: &mut Vec<KernelFlow>,
) -> Result<Part, KernelConntrackError> {
    let mut rest = datagram;
    while !rest.is_empty() {
        let message = NetlinkMessage::<NetfilterMessage>::deserialize(rest)
            .map_err(KernelConntrackError::Parse)?;
        // At least a header long: `deserialize` checked it.
        let step = (message.header.length as usize).next_multiple_of(4);
        rest = rest.get(step..).unwrap_or_default();
        if message.header.sequence_number != seq {
            continue;
        }
        match message.payload {
            NetlinkPayload::InnerMessage(NetfilterMessage {
                inner:
                    NetfilterMessageInner::Conntrack(
                        // Dump entries carry the request's type (GET);
                        // event messages carry NEW.
                        ConntrackMessage::Get(attributes) | ConntrackMessage::New(attributes),
                    ),
                ..
            }) => flows.extend(KernelFlow::from_attributes(&attributes)),
            NetlinkPayload::Done(done) if done.code != 0 => {
                return Err(KernelConntrackError::Dump(io::Error::from_raw_os_error(
                    done.code.abs(),
                )));
            }
            NetlinkPayload::Done(_) => return Ok(Part::Done),
            NetlinkPayload::Error(e) if e.code.is_some() => return Err(refused(e.to_io())),
            _ => {}
        }
    }
    Ok(Part::More)
}

/// The kernel's answer to the request itself: the request being well
/// formed, `EINVAL` means nfnetlink has no ctnetlink subsystem
/// (`nfnetlink_rcv_msg`); `EOPNOTSUPP` is what its batch path says then.
fn refused(e: io::Error) -> KernelConntrackError {
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::EOPNOTSUPP) => KernelConntrackError::Unsupported(e),
        _ => KernelConntrackError::Dump(e),
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroI32;

    use netlink_packet_core::{DefaultNla, DoneMessage, ErrorMessage};
    use netlink_packet_netfilter::conntrack::Protocol;

    use super::*;

    fn tuple(proto: Protocol, src: &str, dst: &str) -> Vec<Tuple> {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(src.ip()),
                IPTuple::DestinationAddress(dst.ip()),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(proto),
                ProtoTuple::SourcePort(src.port()),
                ProtoTuple::DestinationPort(dst.port()),
            ]),
        ]
    }

    /// A dump entry as the kernel sends it: of its tuples' family, with the
    /// attributes the kernel adds that we do not read (`CTA_MARK`,
    /// `CTA_USE`, `CTA_ID`).
    fn entry(seq: u32, attributes: Vec<ConntrackAttribute>) -> NetlinkMessage<NetfilterMessage> {
        let ipv6 = attributes.iter().any(|a| {
            matches!(a, ConntrackAttribute::CtaTupleOrig(t) if t.iter().any(|p| {
                matches!(p, Tuple::Ip(ips) if ips.iter().any(|ip| {
                    matches!(ip, IPTuple::SourceAddress(IpAddr::V6(_)))
                }))
            }))
        });
        let family = if ipv6 {
            NetfilterProtoFamily::IPv6
        } else {
            NetfilterProtoFamily::IPv4
        };
        let mut attributes = attributes;
        attributes.push(ConntrackAttribute::CtaMark(0));
        attributes.push(ConntrackAttribute::Other(DefaultNla::new(
            11,
            vec![0, 0, 0, 1],
        )));
        attributes.push(ConntrackAttribute::Other(DefaultNla::new(
            12,
            vec![1, 2, 3, 4],
        )));
        message(
            seq,
            NetlinkPayload::InnerMessage(NetfilterMessage::new(
                NetfilterHeader::new(family, 0, 0),
                ConntrackMessage::Get(attributes),
            )),
        )
    }

    fn message(
        seq: u32,
        payload: NetlinkPayload<NetfilterMessage>,
    ) -> NetlinkMessage<NetfilterMessage> {
        let mut header = NetlinkHeader::default();
        header.sequence_number = seq;
        let mut m = NetlinkMessage::new(header, payload);
        m.finalize();
        m
    }

    fn done(seq: u32, code: i32) -> NetlinkMessage<NetfilterMessage> {
        let mut d = DoneMessage::default();
        d.code = code;
        message(seq, NetlinkPayload::Done(d))
    }

    fn error(seq: u32, code: i32) -> NetlinkMessage<NetfilterMessage> {
        let mut e = ErrorMessage::default();
        e.code = NonZeroI32::new(code);
        e.header = vec![0; 16];
        message(seq, NetlinkPayload::Error(e))
    }

    /// The messages back to back, each padded to 4 bytes, as in one
    /// datagram.
    fn datagram(messages: &[NetlinkMessage<NetfilterMessage>]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            let mut bytes = vec![0; m.buffer_len().next_multiple_of(4)];
            m.serialize(&mut bytes);
            out.extend(bytes);
        }
        out
    }

    fn dnat_udp(seq: u32) -> NetlinkMessage<NetfilterMessage> {
        entry(
            seq,
            vec![
                ConntrackAttribute::CtaTupleOrig(tuple(
                    Protocol::Udp,
                    "10.0.0.5:40000",
                    "10.96.0.10:53",
                )),
                ConntrackAttribute::CtaTupleReply(tuple(
                    Protocol::Udp,
                    "10.244.1.7:5353",
                    "10.0.0.5:40000",
                )),
                ConntrackAttribute::CtaStatus(
                    Status::Confirmed | Status::DstNat | Status::DstNatDone | Status::SeenReply,
                ),
                ConntrackAttribute::CtaTimeout(27),
            ],
        )
    }

    const fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
        SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::new(a, b, c, d),
            port,
        ))
    }

    const DNAT_UDP: KernelFlow = KernelFlow {
        proto: IPPROTO_UDP,
        orig_src: v4(10, 0, 0, 5, 40000),
        orig_dst: v4(10, 96, 0, 10, 53),
        reply_src: v4(10, 244, 1, 7, 5353),
        reply_dst: v4(10, 0, 0, 5, 40000),
        dst_nat: true,
        src_nat: false,
        timeout_secs: 27,
    };

    #[test]
    fn tcp_and_udp_entries_are_read_and_the_rest_skipped() {
        let snat_tcp = entry(
            7,
            vec![
                ConntrackAttribute::CtaTupleOrig(tuple(
                    Protocol::Tcp,
                    "10.0.0.5:3333",
                    "1.2.3.4:443",
                )),
                ConntrackAttribute::CtaTupleReply(tuple(
                    Protocol::Tcp,
                    "1.2.3.4:443",
                    "192.0.2.9:61000",
                )),
                ConntrackAttribute::CtaStatus(Status::Confirmed | Status::SrcNat),
                // No CTA_TIMEOUT: the kernel leaves a zero one out.
            ],
        );
        let icmp = entry(
            7,
            vec![
                ConntrackAttribute::CtaTupleOrig(vec![Tuple::Proto(vec![
                    ProtoTuple::Protocol(Protocol::Icmp),
                    ProtoTuple::Other(DefaultNla::new(4, vec![0, 9])),
                ])]),
                ConntrackAttribute::CtaTimeout(30),
            ],
        );
        let sctp = entry(
            7,
            vec![
                ConntrackAttribute::CtaTupleOrig(tuple(Protocol::Sctp, "10.0.0.5:1", "10.0.0.6:2")),
                ConntrackAttribute::CtaTupleReply(tuple(
                    Protocol::Sctp,
                    "10.0.0.6:2",
                    "10.0.0.5:1",
                )),
            ],
        );
        let bytes = datagram(&[dnat_udp(7), icmp, sctp, snat_tcp]);
        let mut flows = Vec::new();
        assert_eq!(take_part(&bytes, 7, &mut flows).unwrap(), Part::More);
        let snat_tcp = KernelFlow {
            proto: IPPROTO_TCP,
            orig_src: "10.0.0.5:3333".parse().unwrap(),
            orig_dst: "1.2.3.4:443".parse().unwrap(),
            reply_src: "1.2.3.4:443".parse().unwrap(),
            reply_dst: "192.0.2.9:61000".parse().unwrap(),
            dst_nat: false,
            src_nat: true,
            timeout_secs: 0,
        };
        assert_eq!(flows, [DNAT_UDP, snat_tcp]);
    }

    #[test]
    fn ipv6_entries_are_read_beside_ipv4_ones() {
        // A NodePort flow kube-proxy DNATed and masqueraded (eTP Cluster).
        let masqueraded_udp = entry(
            7,
            vec![
                ConntrackAttribute::CtaTupleOrig(tuple(
                    Protocol::Udp,
                    "[2001:db8:c::2]:40000",
                    "[fd00:57::1]:30053",
                )),
                ConntrackAttribute::CtaTupleReply(tuple(
                    Protocol::Udp,
                    "[fd42:2::2]:5353",
                    "[fd00:57::1]:2000",
                )),
                ConntrackAttribute::CtaStatus(
                    Status::Confirmed | Status::DstNat | Status::SrcNat | Status::SeenReply,
                ),
                ConntrackAttribute::CtaTimeout(118),
            ],
        );
        let dnat_tcp = entry(
            7,
            vec![
                ConntrackAttribute::CtaTupleOrig(tuple(
                    Protocol::Tcp,
                    "[2001:db8:c::2]:3333",
                    "[fd00:57::1]:30080",
                )),
                ConntrackAttribute::CtaTupleReply(tuple(
                    Protocol::Tcp,
                    "[fd42:1::2]:8080",
                    "[2001:db8:c::2]:3333",
                )),
                ConntrackAttribute::CtaStatus(Status::Confirmed | Status::DstNat),
                ConntrackAttribute::CtaTimeout(431_999),
            ],
        );
        // ICMPv6 (an echo): no ports, skipped.
        let icmp6 = entry(
            7,
            vec![
                ConntrackAttribute::CtaTupleOrig(vec![
                    Tuple::Ip(vec![
                        IPTuple::SourceAddress("fd00:57::1".parse().unwrap()),
                        IPTuple::DestinationAddress("fd00:57::2".parse().unwrap()),
                    ]),
                    Tuple::Proto(vec![
                        ProtoTuple::Protocol(Protocol::Ipv6Icmp),
                        ProtoTuple::Other(DefaultNla::new(6, vec![0, 9])),
                    ]),
                ]),
                ConntrackAttribute::CtaTimeout(30),
            ],
        );
        let bytes = datagram(&[masqueraded_udp, dnat_udp(7), icmp6, dnat_tcp]);
        let mut flows = Vec::new();
        assert_eq!(take_part(&bytes, 7, &mut flows).unwrap(), Part::More);
        let masqueraded_udp = KernelFlow {
            proto: IPPROTO_UDP,
            orig_src: "[2001:db8:c::2]:40000".parse().unwrap(),
            orig_dst: "[fd00:57::1]:30053".parse().unwrap(),
            reply_src: "[fd42:2::2]:5353".parse().unwrap(),
            reply_dst: "[fd00:57::1]:2000".parse().unwrap(),
            dst_nat: true,
            src_nat: true,
            timeout_secs: 118,
        };
        let dnat_tcp = KernelFlow {
            proto: IPPROTO_TCP,
            orig_src: "[2001:db8:c::2]:3333".parse().unwrap(),
            orig_dst: "[fd00:57::1]:30080".parse().unwrap(),
            reply_src: "[fd42:1::2]:8080".parse().unwrap(),
            reply_dst: "[2001:db8:c::2]:3333".parse().unwrap(),
            dst_nat: true,
            src_nat: false,
            timeout_secs: 431_999,
        };
        assert_eq!(flows, [masqueraded_udp, DNAT_UDP, dnat_tcp]);
    }

    #[test]
    fn a_dump_ends_at_done_and_keeps_the_parts_before() {
        let mut flows = Vec::new();
        let part = datagram(&[dnat_udp(3), dnat_udp(3)]);
        assert_eq!(take_part(&part, 3, &mut flows).unwrap(), Part::More);
        let last = datagram(&[dnat_udp(3), done(3, 0)]);
        assert_eq!(take_part(&last, 3, &mut flows).unwrap(), Part::Done);
        assert_eq!(flows, [DNAT_UDP; 3]);
    }

    #[test]
    fn messages_of_another_request_are_ignored() {
        let mut flows = Vec::new();
        let bytes = datagram(&[dnat_udp(2), done(2, 0), error(2, -libc::EPERM)]);
        assert_eq!(take_part(&bytes, 3, &mut flows).unwrap(), Part::More);
        assert_eq!(flows, []);
    }

    #[test]
    fn errors_say_whether_ctnetlink_is_missing() {
        let mut flows = Vec::new();
        let no_ctnetlink = datagram(&[error(1, -libc::EINVAL)]);
        let e = take_part(&no_ctnetlink, 1, &mut flows).unwrap_err();
        assert!(matches!(e, KernelConntrackError::Unsupported(_)), "{e:?}");
        let no_cap = datagram(&[error(1, -libc::EPERM)]);
        let e = take_part(&no_cap, 1, &mut flows).unwrap_err();
        assert!(
            matches!(&e, KernelConntrackError::Dump(io) if io.raw_os_error() == Some(libc::EPERM)),
            "{e:?}"
        );
        let cut_short = datagram(&[dnat_udp(1), done(1, -libc::ENOMEM)]);
        let e = take_part(&cut_short, 1, &mut flows).unwrap_err();
        assert!(
            matches!(&e, KernelConntrackError::Dump(io) if io.raw_os_error() == Some(libc::ENOMEM)),
            "{e:?}"
        );
    }

    #[test]
    fn a_cut_datagram_is_a_parse_error() {
        let bytes = datagram(&[dnat_udp(1)]);
        let e = take_part(&bytes[..bytes.len() - 8], 1, &mut Vec::new()).unwrap_err();
        assert!(matches!(e, KernelConntrackError::Parse(_)), "{e:?}");
    }
}

/// On a real conntrack table, in a network namespace of the test's own:
/// needs root (`ip netns`, `setns`, iptables, ctnetlink's `CAP_NET_ADMIN`)
/// and fails without it. Skipped by `cargo test -p lb-agent --lib --
/// --skip privileged` (ARCHITECTURE.md, "Testing tiers").
///
/// Network safety: every packet is sent inside that namespace, on its
/// loopback: 192.0.2.0/24 (TEST-NET-1) and 2001:db8::/64 (documentation)
/// are routed to `lo` there and DNATed to 127.0.0.1 and ::1 by rules in
/// that namespace's own nat tables.
#[cfg(test)]
mod privileged {
    use std::{
        collections::HashMap,
        io::{Read as _, Write as _},
        net::{Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, UdpSocket},
        process::Command,
        time::Duration,
    };

    use lb_test_netns::{TestNetns, require_root};
    use socket2::{Domain, Protocol, SockAddr, Type};

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// One family's addresses and tools in the test's namespace.
    struct Family {
        /// Routed to `lo`, owned by nobody: DNATed to `localhost`.
        frontend: IpAddr,
        prefix: &'static str,
        localhost: IpAddr,
        iptables: &'static str,
    }

    const V4: Family = Family {
        frontend: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        prefix: "192.0.2.0/24",
        localhost: IpAddr::V4(Ipv4Addr::LOCALHOST),
        iptables: "iptables-nft",
    };

    const V6: Family = Family {
        frontend: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
        prefix: "2001:db8::/64",
        localhost: IpAddr::V6(Ipv6Addr::LOCALHOST),
        iptables: "ip6tables-nft",
    };

    fn run(program: &str, args: &[&str]) {
        let out = Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A namespace where, for each of `families`, the frontend's prefix is
    /// routed to `lo` (source: localhost) and `frontend:53/udp` and
    /// `frontend:80/tcp` are DNATed to localhost:5353 and localhost:8080.
    fn dnat_netns(families: &[&Family]) -> TestNetns {
        let ns = TestNetns::new();
        let path = ns.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("netns name");
        for f in families {
            let src = f.localhost.to_string();
            let route = [
                "-n", name, "route", "add", f.prefix, "dev", "lo", "src", &src,
            ];
            run("ip", &route);
            let frontend = f.frontend.to_string();
            for (proto, port, to) in [("udp", "53", 5353), ("tcp", "80", 8080)] {
                let to = SocketAddr::new(f.localhost, to).to_string();
                run(
                    "ip",
                    &[
                        "netns",
                        "exec",
                        name,
                        f.iptables,
                        "-t",
                        "nat",
                        "-A",
                        "OUTPUT",
                        "-d",
                        &frontend,
                        "-p",
                        proto,
                        "--dport",
                        port,
                        "-j",
                        "DNAT",
                        "--to-destination",
                        &to,
                    ],
                );
            }
        }
        ns
    }

    /// An ICMP echo request to localhost, for an ICMP conntrack entry.
    fn ping(f: &Family) {
        let (domain, protocol, echo_request) = match f.localhost {
            IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4, 8),
            IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6, 128),
        };
        let socket =
            socket2::Socket::new(domain, Type::RAW, Some(protocol)).expect("raw ICMP socket");
        // Type, code 0, checksum, id 0x4c42, sequence 1. The kernel sums
        // ICMPv6 itself (it covers a pseudo-header).
        let mut echo = [echo_request, 0, 0, 0, 0x4c, 0x42, 0, 1];
        if f.localhost.is_ipv4() {
            let sum: u32 = echo
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
            let folded = (sum & 0xffff) + (sum >> 16);
            echo[2..4].copy_from_slice(&(!(folded as u16)).to_be_bytes());
        }
        let to = SockAddr::from(SocketAddr::new(f.localhost, 0));
        socket.send_to(&echo, &to).expect("send echo request");
    }

    /// More UDP flows than one dump part holds (a part is at most 32 KiB,
    /// an entry about 200 bytes).
    const UDP_FLOWS: usize = 300;

    /// The sockets of the flows [`open_flows`] made, open until the dump.
    struct Flows {
        udp: Vec<UdpSocket>,
        tcp: TcpStream,
        _servers: (UdpSocket, TcpListener, TcpStream),
    }

    /// In the namespace: [`UDP_FLOWS`] UDP flows to `f`'s frontend (the
    /// first answered, back through the reverse NAT), a TCP connection
    /// with data both ways, and an ICMP echo.
    fn open_flows(f: &Family) -> Flows {
        let frontend = |port| SocketAddr::new(f.frontend, port);
        let server = UdpSocket::bind((f.localhost, 5353)).expect("bind udp server");
        server.set_read_timeout(Some(TIMEOUT)).unwrap();
        let answered = UdpSocket::bind((f.localhost, 0)).expect("bind udp client");
        answered.connect(frontend(53)).expect("connect udp client");
        answered.set_read_timeout(Some(TIMEOUT)).unwrap();
        answered.send(b"q").expect("send to the frontend");
        let mut buf = [0; 8];
        let (_, from) = server.recv_from(&mut buf).expect("the DNATed query");
        assert_eq!(from, answered.local_addr().unwrap());
        server.send_to(b"a", from).expect("answer");
        let (n, peer) = answered.recv_from(&mut buf).expect("the answer");
        assert_eq!((&buf[..n], peer), (&b"a"[..], frontend(53)));
        let mut udp = vec![answered];
        for _ in 1..UDP_FLOWS {
            let client = UdpSocket::bind((f.localhost, 0)).expect("bind udp client");
            client.connect(frontend(53)).expect("connect udp client");
            client.send(b"q").expect("send to the frontend");
            udp.push(client);
        }

        let listener = TcpListener::bind((f.localhost, 8080)).expect("bind tcp server");
        let tcp = TcpStream::connect_timeout(&frontend(80), TIMEOUT).expect("connect");
        let (mut accepted, _) = listener.accept().expect("accept");
        tcp.set_nodelay(true).unwrap();
        (&tcp).write_all(b"x").unwrap();
        accepted.set_read_timeout(Some(TIMEOUT)).unwrap();
        accepted.read_exact(&mut buf[..1]).expect("tcp data");

        ping(f);
        Flows {
            udp,
            tcp,
            _servers: (server, listener, accepted),
        }
    }

    /// The clients' addresses of `flows`: UDP, then TCP.
    fn clients(flows: &Flows) -> (Vec<SocketAddr>, SocketAddr) {
        let udp = flows.udp.iter().map(|c| c.local_addr().unwrap()).collect();
        (udp, flows.tcp.local_addr().unwrap())
    }

    /// Checks that `dumped` has the flows of `clients` to `f`'s frontend,
    /// DNATed to localhost, with the kernel's timeouts.
    fn check(dumped: &[KernelFlow], f: &Family, (udp, tcp): &(Vec<SocketAddr>, SocketAddr)) {
        let by_orig: HashMap<(u8, SocketAddr), &KernelFlow> =
            dumped.iter().map(|k| ((k.proto, k.orig_src), k)).collect();
        assert_eq!(by_orig.len(), dumped.len(), "a flow twice: {dumped:#?}");
        for (i, client) in udp.iter().enumerate() {
            let flow = by_orig
                .get(&(IPPROTO_UDP, *client))
                .unwrap_or_else(|| panic!("no flow for UDP client {client}: {dumped:#?}"));
            let want = KernelFlow {
                proto: IPPROTO_UDP,
                orig_src: *client,
                orig_dst: SocketAddr::new(f.frontend, 53),
                reply_src: SocketAddr::new(f.localhost, 5353),
                reply_dst: *client,
                dst_nat: true,
                src_nat: false,
                timeout_secs: flow.timeout_secs,
            };
            assert_eq!(**flow, want);
            // nf_conntrack_udp_timeout (30 s) or, the answered one,
            // nf_conntrack_udp_timeout_stream (120 s) at most.
            let max = if i == 0 { 120 } else { 30 };
            assert!(
                (1..=max).contains(&flow.timeout_secs),
                "UDP flow {i} timeout {}",
                flow.timeout_secs
            );
        }

        let flow = by_orig
            .get(&(IPPROTO_TCP, *tcp))
            .unwrap_or_else(|| panic!("no flow for the TCP client {tcp}: {dumped:#?}"));
        let want = KernelFlow {
            proto: IPPROTO_TCP,
            orig_src: *tcp,
            orig_dst: SocketAddr::new(f.frontend, 80),
            reply_src: SocketAddr::new(f.localhost, 8080),
            reply_dst: *tcp,
            dst_nat: true,
            src_nat: false,
            timeout_secs: flow.timeout_secs,
        };
        assert_eq!(**flow, want);
        // ESTABLISHED: nf_conntrack_tcp_timeout_established, 5 days.
        assert!(
            flow.timeout_secs > 3600,
            "TCP timeout {}",
            flow.timeout_secs
        );
    }

    #[test]
    fn dnated_udp_and_tcp_flows_are_dumped() {
        require_root();
        let ns = dnat_netns(&[&V4]);
        let (dumped, clients) = ns.run(|| {
            let flows = open_flows(&V4);
            let dumped = dump().expect("dump the namespace's conntrack table");
            (dumped, clients(&flows))
        });
        drop(ns);
        // The UDP flows, the TCP one, nothing else (the ICMP one is skipped).
        assert_eq!(dumped.len(), UDP_FLOWS + 1, "{dumped:#?}");
        check(&dumped, &V4, &clients);
    }

    /// One request dumps both families (`AF_UNSPEC`).
    #[test]
    fn dnated_ipv6_flows_are_dumped_with_the_ipv4_ones() {
        require_root();
        let ns = dnat_netns(&[&V4, &V6]);
        let (dumped, clients4, clients6) = ns.run(|| {
            let (flows4, flows6) = (open_flows(&V4), open_flows(&V6));
            let dumped = dump().expect("dump the namespace's conntrack table");
            (dumped, clients(&flows4), clients(&flows6))
        });
        drop(ns);
        let (dumped4, dumped6): (Vec<KernelFlow>, Vec<KernelFlow>) =
            dumped.into_iter().partition(|f| f.orig_src.is_ipv4());
        // Each family's UDP and TCP flows, nothing else (ICMP is skipped).
        assert_eq!(dumped4.len(), UDP_FLOWS + 1, "{dumped4:#?}");
        assert_eq!(dumped6.len(), UDP_FLOWS + 1, "{dumped6:#?}");
        check(&dumped4, &V4, &clients4);
        check(&dumped6, &V6, &clients6);
    }

    #[test]
    fn a_namespace_without_flows_dumps_none() {
        require_root();
        let ns = TestNetns::new();
        let flows = ns.run(dump).expect("dump an empty conntrack table");
        assert_eq!(flows, []);
    }
}
