//! IPv6 packets for the tc programs' tests: builders of crafted frames
//! (extension-header chains, fragments, ICMPv6 errors) and checkers that
//! verify every checksum against etherparse's reference computation.

use etherparse::{
    Icmpv6Header, Icmpv6Type, IpNumber, Ipv6FlowLabel, Ipv6Header, NetHeaders, PacketBuilder,
    PacketHeaders, TransportHeader, UdpHeader,
};

use crate::bed::{Addr6, Tcp};

/// `s` as an IPv6 address's bytes.
pub const fn v6(s: [u16; 8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 8 {
        let [hi, lo] = s[i].to_be_bytes();
        out[2 * i] = hi;
        out[2 * i + 1] = lo;
        i += 1;
    }
    out
}

/// The node's IPv6 NodePort address, and the node port.
pub const NODE6: [u8; 16] = v6([0xfd00, 0x57, 0, 0, 0, 0, 0, 1]);
pub const FRONTEND6: Addr6 = (NODE6, 30080);
pub const CLIENT6: Addr6 = (v6([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7]), 40000);
pub const LOCAL_POD6: Addr6 = (v6([0xfd42, 1, 0, 0, 0, 0, 0, 5]), 8080);
pub const REMOTE_POD6: Addr6 = (v6([0xfd42, 2, 0, 0, 0, 0, 0, 9]), 8080);

const PAYLOAD: &[u8] = b"identity?";
/// Next-header numbers of the extension headers the programs walk.
pub const HOP_BY_HOP: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const DEST_OPTS: u8 = 60;

/// An Ethernet frame around the IPv6 packet `ip`.
fn frame(ip: &[u8]) -> Vec<u8> {
    let mut out = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    out.extend(ip);
    out
}

fn builder() -> etherparse::PacketBuilderStep<etherparse::Ethernet2Header> {
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
}

pub fn tcp6(src: Addr6, dst: Addr6, flags: Tcp) -> Vec<u8> {
    let b = builder()
        .ipv6(src.0, dst.0, 64)
        .tcp(src.1, dst.1, 1000, 64_240);
    let b = match flags {
        Tcp::Syn => b.syn(),
        Tcp::SynAck => b.syn().ack(1001),
        Tcp::Ack => b.ack(1001),
        Tcp::Fin => b.fin().ack(1001),
        Tcp::Rst => b.rst(),
    };
    let mut out = Vec::with_capacity(b.size(PAYLOAD.len()));
    b.write(&mut out, PAYLOAD).unwrap();
    out
}

pub fn udp6(src: Addr6, dst: Addr6) -> Vec<u8> {
    let b = builder().ipv6(src.0, dst.0, 64).udp(src.1, dst.1);
    let mut out = Vec::with_capacity(b.size(PAYLOAD.len()));
    b.write(&mut out, PAYLOAD).unwrap();
    out
}

fn ipv6_header(src: [u8; 16], dst: [u8; 16], next: u8, payload_length: usize) -> Ipv6Header {
    Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: payload_length as u16,
        next_header: IpNumber(next),
        hop_limit: 64,
        source: src,
        destination: dst,
    }
}

/// A UDP datagram behind the extension headers `exts` (next-header
/// numbers), each 8 bytes: options headers hold a PadN option, a routing
/// header has no segments left.
pub fn udp6_behind(src: Addr6, dst: Addr6, exts: &[u8]) -> Vec<u8> {
    let ip = ipv6_header(src.0, dst.0, 17, 0);
    let udp = UdpHeader::with_ipv6_checksum(src.1, dst.1, &ip, PAYLOAD).unwrap();
    let mut chain = Vec::new();
    for (i, ext) in exts.iter().enumerate() {
        let next = exts.get(i + 1).copied().unwrap_or(17);
        if *ext == ROUTING {
            chain.extend([next, 0, 0, 0, 0, 0, 0, 0]);
        } else {
            chain.extend([next, 0, 1, 4, 0, 0, 0, 0]);
        }
    }
    let len = chain.len() + UdpHeader::LEN + PAYLOAD.len();
    let first = exts.first().copied().unwrap_or(17);
    let mut packet = ipv6_header(src.0, dst.0, first, len).to_bytes().to_vec();
    packet.extend(chain);
    packet.extend(udp.to_bytes());
    packet.extend(PAYLOAD);
    frame(&packet)
}

/// A UDP datagram of `len` payload bytes from `src` to `dst`, cut into
/// IPv6 fragments (identification `id`) of at most `mtu` bytes each, as
/// Ethernet frames: the first carries the UDP header.
pub fn udp6_fragments(src: Addr6, dst: Addr6, id: u32, len: usize, mtu: usize) -> Vec<Vec<u8>> {
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let ip = ipv6_header(src.0, dst.0, 17, 0);
    let udp = UdpHeader::with_ipv6_checksum(src.1, dst.1, &ip, &payload).unwrap();
    let mut datagram = udp.to_bytes().to_vec();
    datagram.extend(&payload);
    let per = (mtu - 40 - 8) / 8 * 8;
    datagram
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            let more = (i + 1) * per < datagram.len();
            let offset = ((i * per) as u16) | u16::from(more);
            let mut packet = ipv6_header(src.0, dst.0, FRAGMENT, 8 + chunk.len())
                .to_bytes()
                .to_vec();
            packet.extend([17, 0]);
            packet.extend(offset.to_be_bytes());
            packet.extend(id.to_be_bytes());
            packet.extend(chunk);
            frame(&packet)
        })
        .collect()
}

/// The addresses and ports of an IPv6 TCP or UDP packet the programs
/// returned, after checking its L4 checksum against the reference.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen6 {
    pub src: Addr6,
    pub dst: Addr6,
}

pub fn flow6(src: Addr6, dst: Addr6) -> Seen6 {
    Seen6 { src, dst }
}

pub fn seen6(packet: &[u8]) -> Seen6 {
    let headers = PacketHeaders::from_ethernet_slice(packet).expect("a valid packet");
    let Some(NetHeaders::Ipv6(ip, _)) = &headers.net else {
        panic!("not IPv6: {headers:?}");
    };
    let payload = headers.payload.slice();
    let (sport, dport) = match &headers.transport {
        Some(TransportHeader::Tcp(t)) => {
            let want = t.calc_checksum_ipv6(ip, payload).unwrap();
            assert_eq!(t.checksum, want, "TCP checksum");
            (t.source_port, t.destination_port)
        }
        Some(TransportHeader::Udp(u)) => {
            let want = u.calc_checksum_ipv6(ip, payload).unwrap();
            assert_eq!(u.checksum, want, "UDP checksum");
            (u.source_port, u.destination_port)
        }
        other => panic!("not TCP or UDP: {other:?}"),
    };
    Seen6 {
        src: (ip.source, sport),
        dst: (ip.destination, dport),
    }
}

/// The addresses of an IPv6 packet (a later fragment, say), unchecked.
pub fn seen_ip6(packet: &[u8]) -> ([u8; 16], [u8; 16]) {
    let (ip, _) = Ipv6Header::from_slice(&packet[14..]).expect("an IPv6 header");
    (ip.source, ip.destination)
}

/// An ICMPv6 error from `src` to `dst` of type `t`, quoting `about` (an
/// Ethernet frame of ours: its IPv6 packet).
pub fn icmp6_error(src: [u8; 16], dst: [u8; 16], t: Icmpv6Type, about: &[u8]) -> Vec<u8> {
    let b = builder().ipv6(src, dst, 64).icmpv6(t);
    let quote = &about[14..];
    let mut out = Vec::with_capacity(b.size(quote.len()));
    b.write(&mut out, quote).unwrap();
    out
}

pub const TOO_BIG: Icmpv6Type = Icmpv6Type::PacketTooBig { mtu: 1280 };

/// An ICMPv6 error's outer addresses, its type and the flow its quote
/// shows, after checking the ICMPv6 checksum (over its pseudo-header)
/// against the reference.
pub fn seen_icmp6(packet: &[u8]) -> ([u8; 16], [u8; 16], Icmpv6Type, Seen6) {
    let headers = PacketHeaders::from_ethernet_slice(packet).expect("a valid packet");
    let Some(NetHeaders::Ipv6(ip, _)) = &headers.net else {
        panic!("not IPv6: {headers:?}");
    };
    let Some(TransportHeader::Icmpv6(icmp)) = &headers.transport else {
        panic!("not ICMPv6: {headers:?}");
    };
    let quote = headers.payload.slice();
    let want = Icmpv6Header::with_checksum(icmp.icmp_type, ip.source, ip.destination, quote)
        .unwrap()
        .checksum;
    assert_eq!(icmp.checksum, want, "ICMPv6 checksum");
    // A quote may end anywhere after the ports: read, not parsed whole.
    let (inner_ip, l4) = Ipv6Header::from_slice(quote).expect("a quoted IPv6 header");
    assert!(
        [IpNumber::TCP, IpNumber::UDP].contains(&inner_ip.next_header),
        "quote not TCP or UDP: {inner_ip:?}"
    );
    let port = |at: usize| u16::from_be_bytes([l4[at], l4[at + 1]]);
    let (sport, dport) = (port(0), port(2));
    let flow = Seen6 {
        src: (inner_ip.source, sport),
        dst: (inner_ip.destination, dport),
    };
    (ip.source, ip.destination, icmp.icmp_type, flow)
}
