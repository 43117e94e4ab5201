//! `packet_programs`' input: a sequence of steps, each a frame and the hook
//! and device it runs at. A frame is either raw bytes (how the corpus
//! carries the tests' frames, which libFuzzer then mutates byte by byte) or
//! a structured description (`arbitrary`) built into a well-formed frame
//! around the addresses and ports the world programs: both families, IPv4
//! options, IPv6 extension headers, fragments, ICMP errors quoting any
//! packet, every TCP flag combination, checksums right or wrong.
//!
//! Encoding, step after step: a tag byte (hook in bits 0-2, device in bits
//! 3-4, raw in bit 5), then for a raw frame a little-endian `u16` length
//! and that many bytes, for a structured one a length byte and that many
//! bytes read by `arbitrary` (which fills what is missing with defaults).

use arbitrary::{Arbitrary, Unstructured};

/// At most this many frames per input: enough for a flow's life (SYN,
/// answer, data, close) and a spoof between.
pub const MAX_STEPS: usize = 8;

/// Where a frame runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// tc ingress of a device with Ethernet.
    Ingress,
    /// tc egress of a device with Ethernet.
    Egress,
    /// The XDP fast path.
    Xdp,
    /// tc ingress of a device without a link-layer header.
    L3In,
    /// tc egress of a device without a link-layer header.
    L3Out,
}

const HOOKS: [Hook; 5] = [
    Hook::Ingress,
    Hook::Egress,
    Hook::Xdp,
    Hook::L3In,
    Hook::L3Out,
];

/// One frame and where it runs. `frame` is always an Ethernet frame; an L3
/// hook runs on what follows its 14-byte header.
#[derive(Clone, Debug)]
pub struct Step {
    pub hook: Hook,
    /// The world's device number (0: the external `x0`, 1: the pods' `x1`,
    /// 2: the external `x2`).
    pub device: u8,
    pub frame: Vec<u8>,
}

const RAW: u8 = 1 << 5;

/// The steps of a fuzz input.
pub fn decode(mut data: &[u8]) -> Vec<Step> {
    let mut steps = Vec::new();
    while steps.len() < MAX_STEPS {
        let Some((&tag, rest)) = data.split_first() else {
            break;
        };
        data = rest;
        let hook = HOOKS[usize::from(tag & 7) % HOOKS.len()];
        let device = (tag >> 3) & 3;
        let device = if device == 3 { 0 } else { device };
        let frame = if tag & RAW != 0 {
            let len = match data.split_first_chunk::<2>() {
                Some((len, rest)) => {
                    data = rest;
                    usize::from(u16::from_le_bytes(*len))
                }
                None => 0,
            };
            let (frame, rest) = data.split_at(len.min(data.len()));
            data = rest;
            frame.to_vec()
        } else {
            let len = data.first().map_or(0, |&n| usize::from(n));
            data = data.get(1..).unwrap_or_default();
            let (spec, rest) = data.split_at(len.min(data.len()));
            data = rest;
            let mut u = Unstructured::new(spec);
            match Spec::arbitrary(&mut u) {
                Ok(spec) => spec.build(),
                Err(_) => continue,
            }
        };
        steps.push(Step {
            hook,
            device,
            frame,
        });
    }
    steps
}

/// Encodes `frame` as a raw step at `hook` on device `device`: how the
/// corpus seeds carry the tests' frames.
pub fn encode_raw(out: &mut Vec<u8>, hook: Hook, device: u8, frame: &[u8]) {
    let hook = HOOKS.iter().position(|&h| h == hook).unwrap_or(0) as u8;
    out.push(hook | (device & 3) << 3 | RAW);
    out.extend((frame.len() as u16).to_le_bytes());
    out.extend(frame);
}

/// A host the world knows, in either family, or any address.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Host {
    Node,
    OtherNode,
    Client,
    OtherClient,
    LocalPod,
    RemotePod,
    ThirdPod,
    ExternalIp,
    /// An address on the node's network, by its last byte.
    OnLink(u8),
    Any([u8; 16]),
}

impl Host {
    pub fn v4(self) -> [u8; 4] {
        match self {
            Host::Node => [192, 0, 2, 10],
            Host::OtherNode => [192, 0, 2, 20],
            Host::Client => [198, 51, 100, 7],
            Host::OtherClient => [198, 51, 100, 8],
            Host::LocalPod => [10, 1, 0, 5],
            Host::RemotePod => [10, 2, 0, 9],
            Host::ThirdPod => [10, 3, 0, 4],
            Host::ExternalIp => [203, 0, 113, 5],
            Host::OnLink(b) => [192, 0, 2, b],
            Host::Any(a) => [a[0], a[1], a[2], a[3]],
        }
    }

    pub fn v6(self) -> [u8; 16] {
        let s: [u16; 8] = match self {
            Host::Node => [0xfd00, 0x57, 0, 0, 0, 0, 0, 1],
            Host::OtherNode => [0xfd00, 0x57, 0, 0, 0, 0, 0, 2],
            Host::Client => [0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7],
            Host::OtherClient => [0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 8],
            Host::LocalPod => [0xfd42, 1, 0, 0, 0, 0, 0, 5],
            Host::RemotePod => [0xfd42, 2, 0, 0, 0, 0, 0, 9],
            Host::ThirdPod => [0xfd42, 3, 0, 0, 0, 0, 0, 4],
            Host::ExternalIp => [0x2001, 0xdb8, 0xe, 0, 0, 0, 0, 5],
            Host::OnLink(b) => [0xfd00, 0x57, 0, 0, 0, 0, 0, u16::from(b)],
            Host::Any(a) => return a,
        };
        lb_testbed::packets6::v6(s)
    }
}

/// A port the world uses, or any.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Port {
    NodePort,
    DsrNodePort,
    MaglevNodePort,
    ExternalPort,
    Pod,
    Client,
    /// A port of the SNAT range, by its offset.
    Snat(u8),
    Any(u16),
}

impl Port {
    pub fn get(self) -> u16 {
        match self {
            Port::NodePort => 30080,
            Port::DsrNodePort => 30090,
            Port::MaglevNodePort => 30070,
            Port::ExternalPort => 80,
            Port::Pod => 8080,
            Port::Client => 40000,
            Port::Snat(n) => 61_000 + u16::from(n % 20),
            Port::Any(p) => p,
        }
    }
}

/// What follows the IP header(s).
#[derive(Arbitrary, Clone, Debug)]
pub enum L4 {
    Tcp {
        flags: u8,
        seq: u32,
        ack: u32,
        /// Option bytes (padded to a multiple of four, at most 40).
        options: Vec<u8>,
    },
    Udp {
        zero_checksum: bool,
    },
    /// An ICMP (ICMPv6) message; an error quotes `quote`.
    Icmp {
        kind: IcmpKind,
        quote: Box<Quote>,
    },
    /// Any other protocol number, with the payload as its header.
    Other(u8),
}

#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum IcmpKind {
    Unreachable(u8),
    FragNeeded(u16),
    TimeExceeded,
    Echo,
    EchoReply,
    Any(u8, u8),
}

/// The packet an ICMP error quotes: its header and the start of its
/// transport header, cut after `cut` bytes when `cut` is not 0.
#[derive(Arbitrary, Clone, Debug)]
pub struct Quote {
    pub src: Host,
    pub dst: Host,
    pub sport: Port,
    pub dport: Port,
    pub proto: QuoteProto,
    pub cut: u8,
    pub dsr: bool,
}

#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum QuoteProto {
    Tcp,
    Udp,
    Icmp,
    Other(u8),
}

/// IPv4 options, or IPv6 extension headers before the transport header.
#[derive(Arbitrary, Clone, Debug)]
pub enum Extra {
    None,
    /// Cilium's DSR option (header) naming `host:port`.
    Dsr(Host, Port),
    /// The DSR option with its bytes damaged at `at` (xor `with`).
    DsrDamaged(Host, Port, u8, u8),
    /// Arbitrary option bytes (IPv4), or a chain of extension headers
    /// (IPv6: hop-by-hop, routing, destination options).
    Raw(Vec<u8>),
    /// The DSR option or header behind other options (headers).
    DsrLater(Host, Port, Vec<u8>),
}

/// Fragmentation: none, or one fragment of a datagram.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Frag {
    None,
    First { id: u16 },
    Later { id: u16, offset: u16, more: bool },
}

/// A structured frame.
#[derive(Arbitrary, Clone, Debug)]
pub struct Spec {
    pub v6: bool,
    pub src: Host,
    pub dst: Host,
    pub sport: Port,
    pub dport: Port,
    pub l4: L4,
    pub extra: Extra,
    pub frag: Frag,
    pub dont_fragment: bool,
    pub payload: u8,
    pub bad_checksum: bool,
    /// Overwrites one byte of the finished frame.
    pub poke: Option<(u16, u8)>,
}

/// A UDP datagram from `src:40000` to `dst:dport` carrying the DSR option
/// (header) naming `fe:fe_port`.
pub fn dsr_udp(v6: bool, src: Host, dst: Host, dport: Port, fe: Host, fe_port: Port) -> Vec<u8> {
    Spec {
        v6,
        src,
        dst,
        sport: Port::Client,
        dport,
        l4: L4::Udp {
            zero_checksum: false,
        },
        extra: Extra::Dsr(fe, fe_port),
        frag: Frag::None,
        dont_fragment: true,
        payload: 9,
        bad_checksum: false,
        poke: None,
    }
    .build()
}

const ETH_V4: [u8; 14] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
const ETH_V6: [u8; 14] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];

impl Spec {
    /// The Ethernet frame.
    pub fn build(&self) -> Vec<u8> {
        let payload = vec![b'x'; usize::from(self.payload)];
        let mut frame = if self.v6 {
            let src = self.src.v6();
            let dst = self.dst.v6();
            let (proto, l4) = self.transport(&payload, &Addrs::V6(src, dst));
            let mut out = ETH_V6.to_vec();
            out.extend(ipv6(src, dst, proto, &self.extra, self.frag, &l4));
            out
        } else {
            let src = self.src.v4();
            let dst = self.dst.v4();
            let (proto, l4) = self.transport(&payload, &Addrs::V4(src, dst));
            let mut out = ETH_V4.to_vec();
            out.extend(ipv4(
                src,
                dst,
                proto,
                &self.extra,
                self.frag,
                self.dont_fragment,
                &l4,
            ));
            out
        };
        if let Some((at, byte)) = self.poke
            && !frame.is_empty()
        {
            let at = usize::from(at) % frame.len();
            frame[at] = byte;
        }
        frame
    }

    /// The transport header and payload, checksummed: its protocol number
    /// and bytes.
    fn transport(&self, payload: &[u8], addrs: &Addrs) -> (u8, Vec<u8>) {
        let (sport, dport) = (self.sport.get(), self.dport.get());
        let v6 = matches!(addrs, Addrs::V6(..));
        let (proto, mut l4, csum_at) = match &self.l4 {
            L4::Tcp {
                flags,
                seq,
                ack,
                options,
            } => {
                let mut opts = options.clone();
                opts.truncate(40);
                opts.resize(opts.len().div_ceil(4) * 4, 0);
                let mut h = Vec::with_capacity(20 + opts.len() + payload.len());
                h.extend(sport.to_be_bytes());
                h.extend(dport.to_be_bytes());
                h.extend(seq.to_be_bytes());
                h.extend(ack.to_be_bytes());
                h.push((((20 + opts.len()) / 4) as u8) << 4);
                h.push(*flags);
                h.extend(64_240u16.to_be_bytes());
                h.extend([0, 0, 0, 0]);
                h.extend(&opts);
                h.extend(payload);
                (6, h, Some(16))
            }
            L4::Udp { zero_checksum } => {
                let mut h = Vec::with_capacity(8 + payload.len());
                h.extend(sport.to_be_bytes());
                h.extend(dport.to_be_bytes());
                h.extend(((8 + payload.len()) as u16).to_be_bytes());
                h.extend([0, 0]);
                h.extend(payload);
                (17, h, (!zero_checksum || v6).then_some(6))
            }
            L4::Icmp { kind, quote } => {
                let (t, c, rest): (u8, u8, u32) = match (*kind, v6) {
                    (IcmpKind::Unreachable(code), false) => (3, code % 16, 0),
                    (IcmpKind::Unreachable(code), true) => (1, code % 8, 0),
                    (IcmpKind::FragNeeded(mtu), false) => (3, 4, u32::from(mtu)),
                    (IcmpKind::FragNeeded(mtu), true) => (2, 0, u32::from(mtu)),
                    (IcmpKind::TimeExceeded, false) => (11, 0, 0),
                    (IcmpKind::TimeExceeded, true) => (3, 0, 0),
                    (IcmpKind::Echo, false) => (8, 0, 0),
                    (IcmpKind::Echo, true) => (128, 0, 0),
                    (IcmpKind::EchoReply, false) => (0, 0, 0),
                    (IcmpKind::EchoReply, true) => (129, 0, 0),
                    (IcmpKind::Any(t, c), _) => (t, c, 0),
                };
                let mut h = vec![t, c, 0, 0];
                h.extend(rest.to_be_bytes());
                h.extend(quote.build(v6));
                (if v6 { 58 } else { 1 }, h, Some(2))
            }
            L4::Other(proto) => (*proto, payload.to_vec(), None),
        };
        if let Some(at) = csum_at {
            let sum = match (proto, addrs) {
                // ICMPv4 sums no pseudo-header.
                (1, Addrs::V4(..)) => checksum(&[&l4]),
                _ => checksum(&[&addrs.pseudo(proto, l4.len()), &l4]),
            };
            let sum = if proto == 17 && sum == 0 { 0xffff } else { sum };
            let sum = if self.bad_checksum { sum ^ 0x5a5a } else { sum };
            l4[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        }
        (proto, l4)
    }
}

impl Quote {
    /// The quoted packet: an IP header (with the DSR option or header when
    /// `dsr`) and eight or more bytes of its transport header.
    fn build(&self, v6: bool) -> Vec<u8> {
        let (sport, dport) = (self.sport.get(), self.dport.get());
        let (proto, l4) = match self.proto {
            QuoteProto::Tcp => {
                let mut h = Vec::new();
                h.extend(sport.to_be_bytes());
                h.extend(dport.to_be_bytes());
                h.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xfa, 0xf0, 0, 0, 0, 0]);
                (6, h)
            }
            QuoteProto::Udp => {
                let mut h = Vec::new();
                h.extend(sport.to_be_bytes());
                h.extend(dport.to_be_bytes());
                h.extend([0, 17, 0, 0, b'x', b'x', b'x']);
                (17, h)
            }
            QuoteProto::Icmp => (if v6 { 58 } else { 1 }, vec![8, 0, 0, 0, 0, 1, 0, 1]),
            QuoteProto::Other(p) => (p, vec![0; 8]),
        };
        let extra = if self.dsr {
            Extra::Dsr(self.dst, self.dport)
        } else {
            Extra::None
        };
        let mut ip = if v6 {
            ipv6(self.src.v6(), self.dst.v6(), proto, &extra, Frag::None, &l4)
        } else {
            ipv4(
                self.src.v4(),
                self.dst.v4(),
                proto,
                &extra,
                Frag::None,
                true,
                &l4,
            )
        };
        if self.cut != 0 {
            ip.truncate(usize::from(self.cut));
        }
        ip
    }
}

enum Addrs {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

impl Addrs {
    /// The pseudo-header the transport checksum covers.
    fn pseudo(&self, proto: u8, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        match self {
            Addrs::V4(s, d) => {
                out.extend(s);
                out.extend(d);
                out.extend([0, proto]);
                out.extend((len as u16).to_be_bytes());
            }
            Addrs::V6(s, d) => {
                out.extend(s);
                out.extend(d);
                out.extend((len as u32).to_be_bytes());
                out.extend([0, 0, 0, proto]);
            }
        }
        out
    }
}

/// The Internet checksum of `parts`, one after the other (each of even
/// length but the last).
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u32;
    for part in parts {
        for pair in part.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Cilium's IPv4 DSR option naming `host:port`.
fn dsr_option(host: Host, port: Port) -> [u8; 8] {
    let p = port.get().to_be_bytes();
    let a = host.v4();
    [0x9a, 8, p[0], p[1], a[0], a[1], a[2], a[3]]
}

/// An IPv4 packet around `l4`.
fn ipv4(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    extra: &Extra,
    frag: Frag,
    df: bool,
    l4: &[u8],
) -> Vec<u8> {
    let mut opts = match extra {
        Extra::None => Vec::new(),
        Extra::Dsr(h, p) => dsr_option(*h, *p).to_vec(),
        Extra::DsrDamaged(h, p, at, with) => {
            let mut o = dsr_option(*h, *p);
            o[usize::from(*at) % 8] ^= with;
            o.to_vec()
        }
        Extra::Raw(bytes) => bytes.clone(),
        Extra::DsrLater(h, p, before) => {
            let mut o = before.clone();
            o.truncate(32);
            o.extend(dsr_option(*h, *p));
            o
        }
    };
    opts.truncate(40);
    opts.resize(opts.len().div_ceil(4) * 4, 0);
    let (id, offset, more) = match frag {
        Frag::None => (0x1234, 0, false),
        Frag::First { id } => (id, 0, true),
        Frag::Later { id, offset, more } => (id, (offset % 0x1fff).max(1), more),
    };
    let hlen = 20 + opts.len();
    let total = hlen + l4.len();
    let mut h = Vec::with_capacity(total);
    h.push(0x40 | (hlen / 4) as u8);
    h.push(0);
    h.extend((total as u16).to_be_bytes());
    h.extend(id.to_be_bytes());
    let flags = (u16::from(df && matches!(frag, Frag::None)) << 14) | (u16::from(more) << 13);
    h.extend((flags | offset).to_be_bytes());
    h.push(64);
    h.push(proto);
    h.extend([0, 0]);
    h.extend(src);
    h.extend(dst);
    h.extend(&opts);
    let sum = checksum(&[&h]);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    h.extend(l4);
    h
}

/// An IPv6 packet around `l4`, behind the extension headers `extra` and
/// the fragment header `frag` asks for.
fn ipv6(src: [u8; 16], dst: [u8; 16], proto: u8, extra: &Extra, frag: Frag, l4: &[u8]) -> Vec<u8> {
    // Each header as (its type, its bytes after the next-header byte).
    let mut exts: Vec<(u8, Vec<u8>)> = Vec::new();
    let dsr = |h: Host, p: Port| {
        let mut b = vec![2, 0x1b, 20];
        b.extend(h.v6());
        b.extend(p.get().to_be_bytes());
        b.extend([0, 0]);
        b
    };
    match extra {
        Extra::None => {}
        Extra::Dsr(h, p) => exts.push((60, dsr(*h, *p))),
        Extra::DsrDamaged(h, p, at, with) => {
            let mut b = dsr(*h, *p);
            let at = usize::from(*at) % b.len();
            b[at] ^= with;
            exts.push((60, b));
        }
        Extra::Raw(bytes) => {
            // A chain of up to three headers, each from a type selector
            // and option bytes.
            for chunk in bytes.chunks(16).take(3) {
                let kind = [0, 43, 60][usize::from(chunk[0]) % 3];
                let body = &chunk[1..];
                // Length in 8-byte units beyond the first; padded with
                // PadN options' zero bytes.
                let units = (body.len() + 1) / 8;
                let mut b = vec![units as u8];
                b.extend(body);
                b.resize(units * 8 + 7, 0);
                exts.push((kind, b));
            }
        }
        Extra::DsrLater(h, p, before) => {
            let mut b = vec![0u8];
            b.extend(before.iter().take(6));
            b.resize(7, 0);
            exts.push((0, b));
            exts.push((60, dsr(*h, *p)));
        }
    }
    // A hop-by-hop header can only come first.
    if let Some(pos) = exts.iter().skip(1).position(|(t, _)| *t == 0) {
        exts[pos + 1].0 = 60;
    }
    match frag {
        Frag::None => {}
        Frag::First { id } => exts.push((44, frag6(0, true, u32::from(id)))),
        Frag::Later { id, offset, more } => {
            exts.push((44, frag6((offset % 0x1fff).max(1), more, u32::from(id))))
        }
    }
    let mut body = Vec::new();
    let first = exts.first().map_or(proto, |(t, _)| *t);
    for (i, (_, bytes)) in exts.iter().enumerate() {
        body.push(exts.get(i + 1).map_or(proto, |(t, _)| *t));
        body.extend(bytes);
    }
    body.extend(l4);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend((body.len() as u16).to_be_bytes());
    h.push(first);
    h.push(64);
    h.extend(src);
    h.extend(dst);
    h.extend(body);
    h
}

/// A fragment header's bytes after its next-header byte.
fn frag6(offset: u16, more: bool, id: u32) -> Vec<u8> {
    let mut b = vec![0];
    b.extend(((offset << 3) | u16::from(more)).to_be_bytes());
    b.extend(id.to_be_bytes());
    b
}
