//! The invariants `packet_programs` holds the programs to after each frame:
//!
//! * the verdict is one of the program's (tc: pass on, drop, redirect;
//!   XDP: drop, pass, transmit, redirect);
//! * a frame that is neither to a frontend nor of a flow of ours (nor an
//!   ICMP error about one, nor for one of this node's DSR endpoints) is
//!   passed on byte for byte unchanged and creates or changes no flow
//!   entry. Two refusals may drop it instead: a frame carrying the DSR
//!   option (header) that names no DSR frontend of its endpoint, and a
//!   later fragment whose first one was not seen (whether it is ours is
//!   unknown, as in Cilium). A first fragment of any datagram records its
//!   ports in the fragment map (only the first carries them), as Cilium's
//!   does; that entry changes no flow;
//! * every flow entry a frame creates or changes names only what the agent
//!   programmed: a forward entry a frontend and one of the endpoints, a
//!   reply entry an endpoint and a frontend (a DSR reply entry a DSR
//!   frontend of that endpoint), a SNAT mapping the SNAT address, a port of
//!   its range, an endpoint and a client some entry knows; and no program
//!   writes a kernel flow's entry.
//!
//! What is "ours" is decided from the frame's bytes by a parser of its own
//! that errs towards "ours" (which only loosens the checks); the flows are
//! the entries before the frame.

use std::collections::BTreeMap;

use lb_common::{
    CT_DIR_IN, CT_DIR_OUT, CT_F_DSR, CT_F_KERNEL, CtKey, CtValue, NatKey, NatValue,
    XDP_META_NOT_OURS,
};

use crate::{
    packet_frame::{Hook, Step},
    packet_world::{Ep, Known, Outcome, State, XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX},
};

const TC_PASS: i32 = -1;
const TC_DROP: i32 = 2;
const TC_REDIRECT: i32 = 7;
const SNAT_PORTS: std::ops::RangeInclusive<u16> = 61_000..=61_015;

/// The addresses and ports of a packet, as far as its bytes show them.
#[derive(Clone, Debug, Default)]
struct Parsed {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    proto: u8,
    ports: Option<(u16, u16)>,
    later_fragment: bool,
    /// Carries something where the DSR option (header) would be.
    dsr: bool,
    /// An ICMP error's quoted packet.
    quote: Option<Box<Parsed>>,
}

/// Parses an IP packet at `ip` (`v6` from the link layer or the version).
fn parse(ip: &[u8], v6: bool, depth: u8) -> Option<Parsed> {
    let mut p = Parsed {
        v6,
        ..Parsed::default()
    };
    let l4 = if v6 {
        let h = ip.get(..40)?;
        p.src.copy_from_slice(&h[8..24]);
        p.dst.copy_from_slice(&h[24..40]);
        let mut next = h[6];
        let mut at = 40;
        p.dsr = next == 60 && ip.get(42) == Some(&0x1b);
        // Hop-by-hop, routing, fragment, destination options, AH.
        for _ in 0..8 {
            match next {
                0 | 43 | 60 => {
                    let len = (usize::from(*ip.get(at + 1)?) + 1) * 8;
                    next = *ip.get(at)?;
                    at += len;
                }
                44 => {
                    let word = u16::from_be_bytes([*ip.get(at + 2)?, *ip.get(at + 3)?]);
                    p.later_fragment |= word >> 3 != 0;
                    next = *ip.get(at)?;
                    at += 8;
                }
                51 => {
                    let len = (usize::from(*ip.get(at + 1)?) + 2) * 4;
                    next = *ip.get(at)?;
                    at += len;
                }
                _ => break,
            }
        }
        p.proto = next;
        at
    } else {
        let h = ip.get(..20)?;
        p.src[..4].copy_from_slice(&h[12..16]);
        p.dst[..4].copy_from_slice(&h[16..20]);
        p.proto = h[9];
        p.later_fragment = u16::from_be_bytes([h[6], h[7]]) & 0x1fff != 0;
        let hlen = usize::from(h[0] & 0xf) * 4;
        p.dsr = hlen > 20 && ip.get(20) == Some(&0x9a);
        hlen.max(20)
    };
    if !p.later_fragment {
        if let (Some(a), Some(b)) = (ip.get(l4..l4 + 2), ip.get(l4 + 2..l4 + 4)) {
            p.ports = Some((
                u16::from_be_bytes([a[0], a[1]]),
                u16::from_be_bytes([b[0], b[1]]),
            ));
        }
        let error = match (v6, p.proto) {
            (false, 1) => matches!(ip.get(l4), Some(3 | 4 | 5 | 11 | 12)),
            (true, 58) => matches!(ip.get(l4), Some(1..=4)),
            _ => false,
        };
        if error && depth == 0 {
            let quote = ip.get(l4 + 8..).unwrap_or_default();
            // A quote's version is its own.
            let qv6 = quote.first().is_some_and(|b| b >> 4 == 6);
            p.quote = parse(quote, qv6, 1).map(Box::new);
        }
    }
    Some(p)
}

/// Parses an Ethernet frame.
fn parse_frame(frame: &[u8]) -> Option<Parsed> {
    let ip = frame.get(14..)?;
    match frame.get(12..14)? {
        [8, 0] => parse(ip, false, 0),
        [0x86, 0xdd] => parse(ip, true, 0),
        _ => None,
    }
}

fn ep(v6: bool, addr: &[u8], port_be: u16, proto: u8) -> Ep {
    let mut a = [0; 16];
    a[..addr.len()].copy_from_slice(addr);
    Ep {
        v6,
        addr: a,
        port: u16::from_be(port_be),
        proto,
    }
}

/// The endpoints each flow entry names, as sets to look a frame's two up
/// in.
fn flows(state: &State) -> Vec<Vec<Ep>> {
    fn ct<A: AsRef<[u8]>>(v6: bool, k: &CtKey<A>, v: &CtValue<A>) -> Vec<Ep> {
        let mut e = vec![
            ep(v6, k.saddr_be.as_ref(), k.sport_be, k.proto),
            ep(v6, k.daddr_be.as_ref(), k.dport_be, k.proto),
            ep(v6, v.addr_be.as_ref(), v.port_be, k.proto),
        ];
        if v.nat_port_be != 0 {
            e.push(ep(v6, v.nat_addr_be.as_ref(), v.nat_port_be, k.proto));
        }
        e
    }
    fn nat<A: AsRef<[u8]>>(v6: bool, k: &NatKey<A>, v: &NatValue<A>) -> Vec<Ep> {
        vec![
            ep(v6, k.saddr_be.as_ref(), k.sport_be, k.proto),
            ep(v6, k.daddr_be.as_ref(), k.dport_be, k.proto),
            ep(v6, v.addr_be.as_ref(), v.port_be, k.proto),
        ]
    }
    let mut out = Vec::new();
    out.extend(state.ct4.iter().map(|(k, v)| ct(false, k, v)));
    out.extend(state.ct6.iter().map(|(k, v)| ct(true, k, v)));
    out.extend(state.nat4.iter().map(|(k, v)| nat(false, k, v)));
    out.extend(state.nat6.iter().map(|(k, v)| nat(true, k, v)));
    out
}

/// Whether a packet between `p`'s two ends (either way) belongs to a flow
/// of `state` or goes to a frontend or DSR endpoint of `known`.
fn ours(p: &Parsed, known: &Known, state: &State) -> bool {
    if let Some(q) = &p.quote {
        return ours(q, known, state);
    }
    let Some((sport, dport)) = p.ports else {
        // A later fragment (or a packet cut short): by its addresses.
        let same = |a: &[u8; 16], e: &Ep| e.v6 == p.v6 && e.addr == *a;
        return known
            .frontends
            .iter()
            .any(|f| same(&p.dst, f) || same(&p.src, f))
            || flows(state)
                .iter()
                .any(|e| e.iter().any(|x| same(&p.src, x)) && e.iter().any(|x| same(&p.dst, x)));
    };
    let src = ep_of(p, &p.src, sport);
    let dst = ep_of(p, &p.dst, dport);
    known.frontends.contains(&dst)
        || known.frontends.contains(&src)
        || known
            .dsr_endpoints
            .iter()
            .any(|d| d.endpoint == dst || d.endpoint == src)
        || flows(state)
            .iter()
            .any(|e| e.contains(&src) && e.contains(&dst))
}

fn ep_of(p: &Parsed, addr: &[u8; 16], port: u16) -> Ep {
    Ep {
        v6: p.v6,
        addr: *addr,
        port,
        proto: p.proto,
    }
}

/// A broken invariant.
#[derive(Debug)]
pub struct Violation(pub String);

/// Checks what running `step` did: `before` and `after` are the flow maps
/// around it.
pub fn check(
    step: &Step,
    out: &Outcome,
    before: &State,
    after: &State,
    known: &Known,
) -> Result<(), Violation> {
    let xdp = step.hook == Hook::Xdp;
    let verdict_ok = if xdp {
        [XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT].contains(&(out.verdict as u32))
    } else {
        [TC_PASS, TC_DROP, TC_REDIRECT].contains(&out.verdict)
    };
    if !verdict_ok {
        return Err(Violation(format!(
            "verdict {} at {:?}",
            out.verdict, step.hook
        )));
    }
    let parsed = match step.hook {
        Hook::L3In | Hook::L3Out => {
            let ip = &step.frame[14..];
            ip.first().and_then(|b| match b >> 4 {
                4 => parse(ip, false, 0),
                6 => parse(ip, true, 0),
                _ => None,
            })
        }
        _ => parse_frame(&step.frame),
    };
    let is_ours = parsed.as_ref().is_some_and(|p| ours(p, known, before));
    if !is_ours {
        let refusable = parsed.as_ref().is_some_and(|p| p.dsr || p.later_fragment);
        let dropped = out.verdict == if xdp { XDP_DROP as i32 } else { TC_DROP };
        let passed = out.verdict == if xdp { XDP_PASS as i32 } else { TC_PASS };
        if !(passed || dropped && refusable) {
            return Err(Violation(format!(
                "not ours, yet verdict {} at {:?}",
                out.verdict, step.hook
            )));
        }
        if passed && out.frame != step.frame {
            return Err(Violation(format!(
                "not ours, yet changed at {:?}:\n in  {:02x?}\n out {:02x?}",
                step.hook, step.frame, out.frame
            )));
        }
        if out.meta.is_some_and(|m| m != XDP_META_NOT_OURS) {
            return Err(Violation(format!("not ours, yet metadata {:x?}", out.meta)));
        }
        let flows_changed = before.ct4 != after.ct4
            || before.nat4 != after.nat4
            || before.ct6 != after.ct6
            || before.nat6 != after.nat6;
        if flows_changed {
            return Err(Violation(format!(
                "not ours ({parsed:?}), yet the flows changed at {:?}:\n{}",
                step.hook,
                diff(before, after)
            )));
        }
    }
    entries_ok(before, after, known)
}

/// Every entry `after` holds that `before` did not (or held otherwise)
/// names only what `known` programmed.
fn entries_ok(before: &State, after: &State, known: &Known) -> Result<(), Violation> {
    for (k, v) in changed(&before.ct4, &after.ct4) {
        ct_ok(false, k, v, known).map_err(|e| Violation(format!("{e}: {k:?} -> {v:?}")))?;
    }
    for (k, v) in changed(&before.ct6, &after.ct6) {
        ct_ok(true, k, v, known).map_err(|e| Violation(format!("{e}: {k:?} -> {v:?}")))?;
    }
    let clients = || -> Vec<Ep> { flows(after).into_iter().flatten().collect() };
    for (k, v) in changed(&before.nat4, &after.nat4) {
        nat_ok(false, k, v, known, &clients())
            .map_err(|e| Violation(format!("{e}: {k:?} -> {v:?}")))?;
    }
    for (k, v) in changed(&before.nat6, &after.nat6) {
        nat_ok(true, k, v, known, &clients())
            .map_err(|e| Violation(format!("{e}: {k:?} -> {v:?}")))?;
    }
    Ok(())
}

fn changed<'a, K: Ord, V: PartialEq>(
    before: &BTreeMap<K, V>,
    after: &'a BTreeMap<K, V>,
) -> impl Iterator<Item = (&'a K, &'a V)> {
    after.iter().filter(move |(k, v)| before.get(k) != Some(v))
}

fn ct_ok<A: AsRef<[u8]>>(
    v6: bool,
    k: &CtKey<A>,
    v: &CtValue<A>,
    known: &Known,
) -> Result<(), &'static str> {
    if v.flags & CT_F_KERNEL != 0 {
        return Err("a program wrote a kernel flow's entry");
    }
    let src = ep(v6, k.saddr_be.as_ref(), k.sport_be, k.proto);
    let dst = ep(v6, k.daddr_be.as_ref(), k.dport_be, k.proto);
    let to = ep(v6, v.addr_be.as_ref(), v.port_be, k.proto);
    match k.dir {
        CT_DIR_IN => {
            if !known.frontends.contains(&dst) {
                return Err("a forward entry of no frontend");
            }
            if !known.backends.contains(&to) {
                return Err("a forward entry to no endpoint");
            }
        }
        CT_DIR_OUT => {
            let balanced_here = known.backends.contains(&src) && known.frontends.contains(&to);
            let dsr_restored = v.flags & CT_F_DSR != 0
                && known.dsr_endpoints.iter().any(|d| {
                    d.endpoint == src
                        && d.frontend.port == to.port
                        && (d.frontend.addr == [0; 16] || d.frontend.addr == to.addr)
                });
            if !(balanced_here || dsr_restored) {
                return Err("a reply entry naming no frontend of its endpoint");
            }
            if v.nat_port_be != 0 {
                let nat = ep(v6, v.nat_addr_be.as_ref(), 0, 0);
                if nat != known.snat[usize::from(v6)]
                    || !SNAT_PORTS.contains(&u16::from_be(v.nat_port_be))
                {
                    return Err("a reply entry with a SNAT address or port not ours");
                }
            }
        }
        _ => return Err("an entry of no direction"),
    }
    Ok(())
}

fn nat_ok<A: AsRef<[u8]>>(
    v6: bool,
    k: &NatKey<A>,
    v: &NatValue<A>,
    known: &Known,
    clients: &[Ep],
) -> Result<(), &'static str> {
    if v.flags & CT_F_KERNEL != 0 {
        return Err("a program wrote a kernel flow's SNAT port");
    }
    let node = ep(v6, k.daddr_be.as_ref(), 0, 0);
    if node != known.snat[usize::from(v6)] || !SNAT_PORTS.contains(&u16::from_be(k.dport_be)) {
        return Err("a SNAT mapping of an address or port not ours");
    }
    if !known
        .backends
        .contains(&ep(v6, k.saddr_be.as_ref(), k.sport_be, k.proto))
    {
        return Err("a SNAT mapping of no endpoint");
    }
    let client = ep(v6, v.addr_be.as_ref(), v.port_be, k.proto);
    if !clients.contains(&client) {
        return Err("a SNAT mapping to a client no flow has");
    }
    Ok(())
}

/// The entries that differ, for a report.
fn diff(before: &State, after: &State) -> String {
    fn one<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
        out: &mut String,
        name: &str,
        before: &BTreeMap<K, V>,
        after: &BTreeMap<K, V>,
    ) {
        for (k, v) in changed(before, after) {
            out.push_str(&format!("{name} now {k:?} -> {v:?}\n"));
        }
        for k in before.keys().filter(|k| !after.contains_key(k)) {
            out.push_str(&format!("{name} gone {k:?}\n"));
        }
    }
    let mut out = String::new();
    one(&mut out, "ct4", &before.ct4, &after.ct4);
    one(&mut out, "nat4", &before.nat4, &after.nat4);
    one(&mut out, "ct6", &before.ct6, &after.ct6);
    one(&mut out, "nat6", &before.nat6, &after.nat6);
    out
}
