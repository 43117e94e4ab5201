//! Taking a node over from kube-proxy without resetting a connection.
//!
//! kube-proxy's flows live in the kernel's conntrack, which keeps
//! translating them after its rules are gone. The tc programs leave a TCP
//! packet without SYN and without a flow of theirs to the kernel, so
//! established TCP connections go on by themselves; a UDP datagram cannot
//! tell an old flow from a new one. So before the tc programs first attach
//! (and again right after, for flows the kernel made meanwhile) the agent
//! reads the kernel's conntrack (`kernel_conntrack.rs`) and writes, for each
//! UDP flow kube-proxy's rules sent from a client to one of our external
//! frontends, a `CT_F_KERNEL` entry that leaves its datagrams to the
//! kernel; and for each flow the kernel masqueraded to a port of our SNAT
//! range, a `CT_F_KERNEL` mapping that keeps the port from our new flows
//! and leaves its replies to the kernel. Entries live as any flow's, and a
//! client opening a new connection on such a tuple starts a flow of ours.
//! Nothing of ours is ever overwritten.

use std::{
    net::{Ipv4Addr, SocketAddrV4},
    path::Path,
};

use aya::maps::MapData;
use lb_common::{
    CT_DIR_IN, CT_F_KERNEL, CT_SEEN, CT4, Ct4Key, Ct4Value, DatapathConfig, MapSpec, NAT4, Nat4Key,
    Nat4Value, PROTO_UDP,
};

use super::{
    batch::Typed,
    elem,
    error::{Error, io_err, map_err},
    kernel_conntrack::KernelFlow,
};

/// What [`seed`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seeded {
    /// UDP flows left to the kernel.
    pub flows: usize,
    /// SNAT ports held for the kernel's flows.
    pub ports: usize,
}

/// Writes the entries described in the module's documentation into the
/// maps pinned in `maps_dir`, for the flows of `kernel` that
/// `is_frontend(address, protocol)` says were addressed to an external
/// frontend, with the SNAT address and ports of `cfg`, at `now` (the
/// programs' clock).
pub fn seed(
    maps_dir: &Path,
    kernel: &[KernelFlow],
    is_frontend: impl Fn(SocketAddrV4, u8) -> bool,
    cfg: &DatapathConfig,
    now: u32,
) -> Result<Seeded, Error> {
    let e = entries(kernel, is_frontend, cfg, now);
    Ok(Seeded {
        flows: write(maps_dir, &CT4, &e.flows)?,
        ports: write(maps_dir, &NAT4, &e.ports)?,
    })
}

/// What [`seed`] writes.
#[derive(Debug, Default)]
struct Entries {
    /// Conntrack entries of UDP flows left to the kernel.
    flows: Vec<(Ct4Key, Ct4Value)>,
    /// SNAT mappings of ports the kernel's flows hold.
    ports: Vec<(Nat4Key, Nat4Value)>,
}

/// The entries [`seed`] writes.
fn entries(
    kernel: &[KernelFlow],
    is_frontend: impl Fn(SocketAddrV4, u8) -> bool,
    cfg: &DatapathConfig,
    now: u32,
) -> Entries {
    let snat = Ipv4Addr::from(cfg.snat4_be);
    let ports = cfg.nat_port_min..=cfg.nat_port_max;
    let timeouts = cfg.timeouts();
    let mut e = Entries::default();
    for f in kernel
        .iter()
        .filter(|f| f.dst_nat && is_frontend(f.orig_dst, f.proto))
    {
        // The kernel's own timeout for the flow, at most ours: its packets
        // extend it as they pass.
        let max = if f.proto == PROTO_UDP {
            timeouts.any
        } else {
            timeouts.tcp
        };
        let expires = now.wrapping_add(f.timeout_secs.clamp(1, max));
        if f.proto == PROTO_UDP {
            let key = Ct4Key {
                saddr_be: f.orig_src.ip().octets(),
                daddr_be: f.orig_dst.ip().octets(),
                sport_be: f.orig_src.port().to_be(),
                dport_be: f.orig_dst.port().to_be(),
                proto: f.proto,
                dir: CT_DIR_IN,
                _pad0: [0; 2],
            };
            let value = Ct4Value {
                flags: CT_F_KERNEL,
                seen_client: CT_SEEN,
                seen_backend: CT_SEEN,
                expires,
                ..Ct4Value::default()
            };
            e.flows.push((key, value));
        }
        if f.src_nat && *f.reply_dst.ip() == snat && ports.contains(&f.reply_dst.port()) {
            let key = Nat4Key {
                saddr_be: f.reply_src.ip().octets(),
                daddr_be: f.reply_dst.ip().octets(),
                sport_be: f.reply_src.port().to_be(),
                dport_be: f.reply_dst.port().to_be(),
                proto: f.proto,
                _pad0: [0; 3],
            };
            let value = Nat4Value {
                addr_be: f.orig_src.ip().octets(),
                port_be: f.orig_src.port().to_be(),
                flags: CT_F_KERNEL,
                expires,
            };
            e.ports.push((key, value));
        }
    }
    e
}

/// Writes each of `entries` into the map `spec` pinned in `maps_dir`
/// unless its key is there; how many were written.
fn write<K: aya::Pod, V: aya::Pod>(
    maps_dir: &Path,
    spec: &'static MapSpec,
    entries: &[(K, V)],
) -> Result<usize, Error> {
    if entries.is_empty() {
        return Ok(0);
    }
    let path = maps_dir.join(spec.pin);
    let map = MapData::from_pin(&path)
        .and_then(Typed::new)
        .map_err(map_err(&path))?;
    let mut written = 0;
    for (k, v) in entries {
        if elem::insert_absent(&map, k, v)
            .map_err(io_err("seeding the kernel's flows into", &path))?
        {
            written += 1;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lb_common::PROTO_TCP;

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn kube_proxys_flows_to_our_frontends_are_left_to_the_kernel() {
        let cfg = DatapathConfig {
            snat4_be: [192, 168, 57, 1],
            nat_port_min: 1024,
            nat_port_max: 29_999,
            ..DatapathConfig::default()
        };
        let flow = |proto, orig_dst: &str, reply_src: &str, reply_dst: &str| KernelFlow {
            proto,
            orig_src: addr("203.0.113.2:2000"),
            orig_dst: addr(orig_dst),
            reply_src: addr(reply_src),
            reply_dst: addr(reply_dst),
            dst_nat: true,
            src_nat: reply_dst.starts_with("192.168.57.1:"),
            timeout_secs: 25,
        };
        let kernel = [
            // UDP to a NodePort, masqueraded to a port of our range.
            flow(
                PROTO_UDP,
                "192.168.57.1:30053",
                "10.42.2.2:5353",
                "192.168.57.1:2000",
            ),
            // TCP to it: left alone (no SYN, no flow), but its port is held.
            flow(
                PROTO_TCP,
                "192.168.57.1:30080",
                "10.42.2.2:8080",
                "192.168.57.1:2000",
            ),
            // Masqueraded outside our range: nothing to hold.
            flow(
                PROTO_TCP,
                "192.168.57.1:30080",
                "10.42.2.2:8080",
                "192.168.57.1:40000",
            ),
            // eTP Local, not masqueraded.
            flow(
                PROTO_UDP,
                "192.168.57.1:30053",
                "10.42.1.2:5353",
                "203.0.113.2:2000",
            ),
            // Not to one of our frontends.
            flow(
                PROTO_UDP,
                "10.96.0.10:53",
                "10.42.2.2:53",
                "203.0.113.2:2000",
            ),
        ];
        let frontends = |a: SocketAddrV4, _| a.port() == 30053 || a.port() == 30080;
        let Entries { flows, ports: held } = entries(&kernel, frontends, &cfg, 100);
        assert_eq!(flows.len(), 2, "{flows:?}");
        for (k, v) in &flows {
            assert_eq!(
                (k.proto, k.dir, k.dport_be),
                (PROTO_UDP, CT_DIR_IN, 30053u16.to_be())
            );
            assert_eq!((v.flags, v.expires), (CT_F_KERNEL, 125));
        }
        assert_eq!(held.len(), 2, "{held:?}");
        for (k, v) in &held {
            assert_eq!(k.dport_be, 2000u16.to_be());
            assert_eq!((v.addr_be, v.flags), ([203, 0, 113, 2], CT_F_KERNEL));
        }
    }
}
