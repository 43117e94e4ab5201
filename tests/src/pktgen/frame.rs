//! The generator's frame: Ethernet, IPv4 or IPv6, UDP (or a TCP SYN), with
//! valid checksums, and the flow variants its XDP program makes of it.
//!
//! Live frames (`BPF_F_TEST_XDP_LIVE_FRAMES`) start every run from the
//! same bytes, so the program makes the flows: it writes source port
//! `BASE_PORT + i` and, in a balancing word, `BALANCE - i`. The two words
//! always add up to the same number, so the L4 checksum of the template
//! holds for every variant and the program never recomputes it. The
//! balancing word is UDP's first payload word, and a SYN's urgent pointer,
//! which no receiver reads without the URG flag.

use std::net::{IpAddr, SocketAddr};

/// The first source port; flow `i` comes from `BASE_PORT + i`.
pub const BASE_PORT: u16 = 10_000;
/// The payload word of flow 0; flow `i` carries `BALANCE - i`.
pub const BALANCE: u16 = 0x8000;
/// The most flows: source ports stay below 65536 and the payload word
/// above 0, so neither word wraps and the sum stays put.
pub const MAX_FLOWS: u32 = 1 << 15;

const ETH_LEN: usize = 14;
const UDP_LEN: usize = 8;
const TCP_LEN: usize = 20;
/// Offset of the urgent pointer in the TCP header.
const TCP_URG_PTR: usize = 18;
const PROTO_TCP: u8 = 6;
const ETHERTYPE_V4: u16 = 0x0800;
const ETHERTYPE_V6: u16 = 0x86dd;
const PROTO_UDP: u8 = 17;

/// A frame to send, and where the program writes each flow's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub bytes: Vec<u8>,
    /// Offset of the source port.
    pub sport_at: usize,
    /// Offset of the balancing word, the last the program writes.
    pub word_at: usize,
}

/// What a frame carries: the MACs, the 5-tuple's addresses and
/// destination port, and its length on the wire without the FCS (a SYN's
/// is its headers': `len` is not read).
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: IpAddr,
    pub dst: SocketAddr,
    pub len: usize,
    /// A TCP SYN (no options, no payload) instead of a UDP datagram.
    pub syn: bool,
}

/// Why a [`Spec`] makes no frame.
#[derive(Debug, PartialEq, Eq)]
pub enum SpecError {
    /// Source and destination of different families.
    MixedFamilies,
    /// Shorter than the headers and the balancing word, or longer than a
    /// page leaves room for.
    Length { len: usize, min: usize, max: usize },
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::MixedFamilies => f.write_str("source and destination of different families"),
            SpecError::Length { len, min, max } => {
                write!(f, "frame length {len} outside {min}..={max}")
            }
        }
    }
}

impl std::error::Error for SpecError {}

/// Live frames sit in one page after the kernel's headroom and
/// `skb_shared_info`; 1500 bytes of IP is what a veth's MTU takes anyway.
pub const MAX_LEN: usize = ETH_LEN + 1500;

impl Frame {
    /// The template: flow 0, checksums filled in.
    pub fn new(spec: &Spec) -> Result<Self, SpecError> {
        let ip_len = match (spec.src, spec.dst.ip()) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 20,
            (IpAddr::V6(_), IpAddr::V6(_)) => 40,
            _ => return Err(SpecError::MixedFamilies),
        };
        let l4_at = ETH_LEN + ip_len;
        let (proto, len) = if spec.syn {
            (PROTO_TCP, l4_at + TCP_LEN)
        } else {
            (PROTO_UDP, spec.len)
        };
        let min = l4_at + UDP_LEN + 2;
        if !(min..=MAX_LEN).contains(&len) {
            return Err(SpecError::Length {
                len,
                min,
                max: MAX_LEN,
            });
        }
        let l4_len = (len - l4_at) as u16;
        let mut b = Vec::with_capacity(len);
        b.extend_from_slice(&spec.dst_mac);
        b.extend_from_slice(&spec.src_mac);
        match (spec.src, spec.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b.extend_from_slice(&ETHERTYPE_V4.to_be_bytes());
                let total = (len - ETH_LEN) as u16;
                let mut h = [0u8; 20];
                h[0] = 0x45;
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[6] = 0x40; // DF: a router never fragments them
                h[8] = 64;
                h[9] = proto;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                let sum = !fold(sum16(&h));
                h[10..12].copy_from_slice(&sum.to_be_bytes());
                b.extend_from_slice(&h);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b.extend_from_slice(&ETHERTYPE_V6.to_be_bytes());
                b.extend_from_slice(&[0x60, 0, 0, 0]);
                b.extend_from_slice(&l4_len.to_be_bytes());
                b.extend_from_slice(&[proto, 64]);
                b.extend_from_slice(&s.octets());
                b.extend_from_slice(&d.octets());
            }
            _ => unreachable!("families checked above"),
        }
        b.extend_from_slice(&BASE_PORT.to_be_bytes());
        b.extend_from_slice(&spec.dst.port().to_be_bytes());
        let (csum_at, word_at) = if spec.syn {
            b.extend_from_slice(&1u32.to_be_bytes()); // sequence number
            b.extend_from_slice(&[0; 4]); // no acknowledgement
            b.extend_from_slice(&[(TCP_LEN as u8 / 4) << 4, 0x02]); // SYN
            b.extend_from_slice(&64_240u16.to_be_bytes()); // window
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&BALANCE.to_be_bytes());
            (l4_at + 16, l4_at + TCP_URG_PTR)
        } else {
            b.extend_from_slice(&l4_len.to_be_bytes());
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&BALANCE.to_be_bytes());
            b.resize(len, 0);
            (l4_at + 6, l4_at + UDP_LEN)
        };
        let sum = l4_checksum(spec.src, spec.dst.ip(), proto, &b[l4_at..]);
        b[csum_at..csum_at + 2].copy_from_slice(&sum.to_be_bytes());
        Ok(Self {
            bytes: b,
            sport_at: l4_at,
            word_at,
        })
    }

    /// Flow `i` of the template, as the XDP program writes it (there on
    /// the kernel's copy; here for the tests).
    pub fn flow(&self, i: u16) -> Vec<u8> {
        let mut b = self.bytes.clone();
        b[self.sport_at..self.sport_at + 2].copy_from_slice(&(BASE_PORT + i).to_be_bytes());
        b[self.word_at..self.word_at + 2].copy_from_slice(&(BALANCE - i).to_be_bytes());
        b
    }
}

/// The checksum of the `proto` segment `l4` (header with a zero checksum,
/// and payload) over the pseudo-header; never 0, which means "none" to
/// UDP in IPv4 and is invalid in IPv6 (and as good as 0xffff to TCP).
fn l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, proto]);
            pseudo.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&(l4.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, proto]);
        }
        _ => unreachable!("families checked by the caller"),
    }
    match !fold(sum16(&pseudo) + sum16(l4)) {
        0 => 0xffff,
        s => s,
    }
}

/// The sum of `b`'s big-endian 16-bit words (a last odd byte padded).
fn sum16(b: &[u8]) -> u64 {
    b.chunks(2)
        .map(|c| u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

/// A one's complement sum folded to 16 bits.
fn fold(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use etherparse::{LinkSlice, NetSlice, SlicedPacket, TransportSlice};

    use super::*;

    const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn spec(src: IpAddr, dst: SocketAddr, len: usize) -> Spec {
        Spec {
            src_mac: SRC_MAC,
            dst_mac: DST_MAC,
            src,
            dst,
            len,
            syn: false,
        }
    }

    fn v4() -> Spec {
        spec(
            Ipv4Addr::new(172, 16, 1, 2).into(),
            "172.16.1.1:30053".parse().unwrap(),
            64,
        )
    }

    fn v6() -> Spec {
        spec(
            "fd00::ac10:102".parse::<Ipv6Addr>().unwrap().into(),
            "[fd00::ac10:101]:30053".parse().unwrap(),
            64,
        )
    }

    /// Parses `bytes` and checks every checksum, as a receiver would;
    /// returns the UDP source port.
    fn verified(bytes: &[u8], s: &Spec) -> u16 {
        let p = SlicedPacket::from_ethernet(bytes).expect("a well-formed frame");
        let Some(LinkSlice::Ethernet2(eth)) = p.link else {
            panic!("not Ethernet II")
        };
        assert_eq!((eth.source(), eth.destination()), (SRC_MAC, DST_MAC));
        let Some(TransportSlice::Udp(udp)) = p.transport else {
            panic!("not UDP")
        };
        let payload = udp.payload();
        let header = udp.to_header();
        assert_eq!(header.destination_port, s.dst.port());
        assert_eq!(usize::from(header.length), 8 + payload.len());
        let expected = match p.net.expect("an IP header") {
            NetSlice::Ipv4(ip) => {
                let h = ip.header().to_header();
                assert_eq!(h.header_checksum, h.calc_header_checksum());
                assert_eq!(IpAddr::from(h.source), s.src);
                assert_eq!(IpAddr::from(h.destination), s.dst.ip());
                assert_eq!(usize::from(h.total_len), bytes.len() - 14);
                header.calc_checksum_ipv4(&h, payload).unwrap()
            }
            NetSlice::Ipv6(ip) => {
                let h = ip.header().to_header();
                assert_eq!(IpAddr::from(h.source), s.src);
                assert_eq!(IpAddr::from(h.destination), s.dst.ip());
                header.calc_checksum_ipv6(&h, payload).unwrap()
            }
            NetSlice::Arp(_) => panic!("ARP"),
        };
        assert_ne!(header.checksum, 0, "UDP checksum left out");
        assert_eq!(header.checksum, expected);
        header.source_port
    }

    #[test]
    fn templates_carry_valid_checksums_in_both_families() {
        for s in [v4(), v6()] {
            for len in [64, 65, 128, 1514] {
                let s = Spec { len, ..s };
                let f = Frame::new(&s).unwrap();
                assert_eq!(f.bytes.len(), len);
                assert_eq!(verified(&f.bytes, &s), BASE_PORT);
            }
        }
    }

    #[test]
    fn every_flow_keeps_the_checksum_valid() {
        for s in [v4(), v6()] {
            let f = Frame::new(&s).unwrap();
            for i in [0, 1, 2, 255, 1023, (MAX_FLOWS - 1) as u16] {
                assert_eq!(verified(&f.flow(i), &s), BASE_PORT + i);
            }
        }
    }

    #[test]
    fn bad_specs_make_no_frame() {
        let mixed = Spec {
            src: Ipv6Addr::LOCALHOST.into(),
            ..v4()
        };
        assert_eq!(Frame::new(&mixed), Err(SpecError::MixedFamilies));
        // IPv6: 14 + 40 + 8 + the balancing word.
        let short = Spec { len: 63, ..v6() };
        assert_eq!(
            Frame::new(&short),
            Err(SpecError::Length {
                len: 63,
                min: 64,
                max: MAX_LEN
            })
        );
        assert!(Frame::new(&Spec { len: 44, ..v4() }).is_ok());
        assert!(Frame::new(&Spec { len: 1515, ..v4() }).is_err());
    }

    /// Parses the SYN `bytes` and checks every checksum; returns the
    /// source port.
    fn verified_syn(bytes: &[u8], s: &Spec) -> u16 {
        let p = SlicedPacket::from_ethernet(bytes).expect("a well-formed frame");
        let Some(TransportSlice::Tcp(tcp)) = p.transport else {
            panic!("not TCP")
        };
        assert!(tcp.syn() && !tcp.ack() && !tcp.urg(), "a bare SYN");
        assert_eq!(tcp.destination_port(), s.dst.port());
        let header = tcp.to_header();
        let expected = match p.net.expect("an IP header") {
            NetSlice::Ipv4(ip) => {
                let h = ip.header().to_header();
                assert_eq!(h.header_checksum, h.calc_header_checksum());
                assert_eq!(IpAddr::from(h.source), s.src);
                assert_eq!(usize::from(h.total_len), bytes.len() - 14);
                header.calc_checksum_ipv4(&h, &[]).unwrap()
            }
            NetSlice::Ipv6(ip) => {
                let h = ip.header().to_header();
                assert_eq!(usize::from(h.payload_length), 20);
                header.calc_checksum_ipv6(&h, &[]).unwrap()
            }
            NetSlice::Arp(_) => panic!("ARP"),
        };
        assert_eq!(header.checksum, expected);
        tcp.source_port()
    }

    #[test]
    fn syn_templates_and_every_flow_carry_valid_checksums() {
        for s in [v4(), v6()] {
            let s = Spec { syn: true, ..s };
            let f = Frame::new(&s).unwrap();
            assert_eq!(f.bytes.len(), if s.src.is_ipv4() { 54 } else { 74 });
            for i in [0, 1, 255, (MAX_FLOWS - 1) as u16] {
                assert_eq!(verified_syn(&f.flow(i), &s), BASE_PORT + i);
            }
        }
    }
}
