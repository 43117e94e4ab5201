//! Taking a node over from kube-proxy without resetting a connection.
//!
//! kube-proxy's flows live in the kernel's conntrack, which keeps
//! translating them after its rules are gone. The tc programs leave a TCP
//! packet without SYN and without a flow of theirs to the kernel (but at a
//! frontend with Maglev and DSR, which takes flows over mid-flow); a UDP
//! datagram cannot tell an old flow from a new one. So before the tc
//! programs first attach (and again right after, for flows the kernel made
//! meanwhile) the agent reads the kernel's conntrack
//! (`kernel_conntrack.rs`) and writes, for each flow kube-proxy's rules
//! sent from a client to one of our external frontends, a `CT_F_KERNEL`
//! entry that leaves its packets to the kernel; and for each flow the
//! kernel masqueraded to a port of our SNAT range, a `CT_F_KERNEL` mapping
//! that keeps the port from our new flows and leaves its replies to the
//! kernel. The agent lets the programs take flows over mid-flow only once
//! this is done (`CFG_F_MIDFLOW`). Entries live as any flow's, and a
//! client opening a new connection on such a tuple starts a flow of ours.
//! Nothing of ours is ever overwritten. IPv4 and IPv6 flows alike, each
//! into its family's maps.

use std::{net::SocketAddr, path::Path};

use aya::maps::MapData;
use lb_common::{
    CT_DIR_IN, CT_F_KERNEL, CT_SEEN, CtKey, CtValue, DatapathConfig, MapSpec, NatKey, NatValue,
    PROTO_UDP,
};

use super::{
    batch::Typed,
    conntrack::Addr,
    elem,
    error::{Error, io_err, map_err},
    kernel_conntrack::KernelFlow,
};

/// What [`seed`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seeded {
    /// Flows left to the kernel.
    pub flows: usize,
    /// SNAT ports held for the kernel's flows.
    pub ports: usize,
}

/// Writes the entries described in the module's documentation into the
/// maps pinned in `maps_dir`, each family's flows into its family's maps,
/// for the flows of `kernel` that `is_frontend(address, protocol)` says
/// were addressed to an external frontend, with the SNAT addresses and
/// ports of `cfg`, at `now` (the programs' clock).
pub fn seed(
    maps_dir: &Path,
    kernel: &[KernelFlow],
    is_frontend: impl Fn(SocketAddr, u8) -> bool,
    cfg: &DatapathConfig,
    now: u32,
) -> Result<Seeded, Error> {
    let v4 = seed_family::<[u8; 4]>(maps_dir, kernel, &is_frontend, cfg, now)?;
    let v6 = seed_family::<[u8; 16]>(maps_dir, kernel, &is_frontend, cfg, now)?;
    Ok(Seeded {
        flows: v4.flows + v6.flows,
        ports: v4.ports + v6.ports,
    })
}

/// [`seed`] for the flows and maps of the family of `A`.
fn seed_family<A: Addr>(
    maps_dir: &Path,
    kernel: &[KernelFlow],
    is_frontend: &impl Fn(SocketAddr, u8) -> bool,
    cfg: &DatapathConfig,
    now: u32,
) -> Result<Seeded, Error>
where
    CtKey<A>: aya::Pod,
    CtValue<A>: aya::Pod,
    NatKey<A>: aya::Pod,
    NatValue<A>: aya::Pod,
{
    let e = entries::<A>(kernel, is_frontend, cfg, now);
    Ok(Seeded {
        flows: write(maps_dir, &A::CT, &e.flows)?,
        ports: write(maps_dir, &A::NAT, &e.ports)?,
    })
}

/// What [`seed`] writes for one family.
#[derive(Debug)]
struct Entries<A> {
    /// Conntrack entries of flows left to the kernel.
    flows: Vec<(CtKey<A>, CtValue<A>)>,
    /// SNAT mappings of ports the kernel's flows hold.
    ports: Vec<(NatKey<A>, NatValue<A>)>,
}

/// A flow's ends, as family `A`'s entries hold them (address, port in
/// network byte order): client, frontend, backend and the address the
/// backend answers to. `None` for a flow of the other family.
fn ends<A: Addr>(f: &KernelFlow) -> Option<[(A, u16); 4]> {
    let end = |a: SocketAddr| Some((A::of(a.ip())?, a.port().to_be()));
    Some([
        end(f.orig_src)?,
        end(f.orig_dst)?,
        end(f.reply_src)?,
        end(f.reply_dst)?,
    ])
}

/// The entries [`seed`] writes for the family of `A`.
fn entries<A: Addr>(
    kernel: &[KernelFlow],
    is_frontend: impl Fn(SocketAddr, u8) -> bool,
    cfg: &DatapathConfig,
    now: u32,
) -> Entries<A> {
    let snat = A::snat(cfg);
    let ports = cfg.nat_port_min..=cfg.nat_port_max;
    let timeouts = cfg.timeouts();
    let mut e = Entries {
        flows: Vec::new(),
        ports: Vec::new(),
    };
    for f in kernel
        .iter()
        .filter(|f| f.dst_nat && is_frontend(f.orig_dst, f.proto))
    {
        let Some([client, frontend, backend, reply_to]) = ends::<A>(f) else {
            continue;
        };
        // The kernel's own timeout for the flow, at most ours: its packets
        // extend it as they pass.
        let max = if f.proto == PROTO_UDP {
            timeouts.any
        } else {
            timeouts.tcp
        };
        let expires = now.wrapping_add(f.timeout_secs.clamp(1, max));
        let key = CtKey {
            saddr_be: client.0,
            daddr_be: frontend.0,
            sport_be: client.1,
            dport_be: frontend.1,
            proto: f.proto,
            dir: CT_DIR_IN,
            _pad0: [0; 2],
        };
        let value = CtValue {
            flags: CT_F_KERNEL,
            seen_client: CT_SEEN,
            seen_backend: CT_SEEN,
            expires,
            ..CtValue::default()
        };
        e.flows.push((key, value));
        if f.src_nat && reply_to.0 == snat && ports.contains(&f.reply_dst.port()) {
            let key = NatKey {
                saddr_be: backend.0,
                daddr_be: reply_to.0,
                sport_be: backend.1,
                dport_be: reply_to.1,
                proto: f.proto,
                _pad0: [0; 3],
            };
            let value = NatValue {
                addr_be: client.0,
                port_be: client.1,
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
    use std::net::IpAddr;

    use lb_common::PROTO_TCP;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// kube-proxy's flows from `client` port 2000 through `node` (NodePorts
    /// 30053/udp and 30080/tcp, SNAT address) to pod `remote` or `local`,
    /// and one to `cluster_ip`.
    fn kube_proxy_flows(
        client: &str,
        node: &str,
        [remote, local, cluster_ip]: [&str; 3],
    ) -> Vec<KernelFlow> {
        let (client, node) = (ip(client), ip(node));
        let flow = |proto, orig_dst: (IpAddr, u16), reply_src: (&str, u16), reply_dst| KernelFlow {
            proto,
            orig_src: (client, 2000).into(),
            orig_dst: orig_dst.into(),
            reply_src: (ip(reply_src.0), reply_src.1).into(),
            reply_dst,
            dst_nat: true,
            src_nat: reply_dst.ip() == node,
            timeout_secs: 25,
        };
        vec![
            // UDP to a NodePort, masqueraded to a port of our range.
            flow(
                PROTO_UDP,
                (node, 30053),
                (remote, 5353),
                (node, 2000).into(),
            ),
            // TCP to it.
            flow(
                PROTO_TCP,
                (node, 30080),
                (remote, 8080),
                (node, 2000).into(),
            ),
            // Masqueraded outside our range: nothing to hold.
            flow(
                PROTO_TCP,
                (node, 30080),
                (remote, 8080),
                (node, 40000).into(),
            ),
            // eTP Local, not masqueraded.
            flow(
                PROTO_UDP,
                (node, 30053),
                (local, 5353),
                (client, 2000).into(),
            ),
            // Not to one of our frontends.
            flow(
                PROTO_UDP,
                (ip(cluster_ip), 53),
                (remote, 53),
                (client, 2000).into(),
            ),
        ]
    }

    /// The entries of family `A` for `kernel`: those of the flows of
    /// [`kube_proxy_flows`] from `client` to a frontend, and the ports they
    /// hold.
    fn check<A: Addr + std::fmt::Debug>(kernel: &[KernelFlow], cfg: &DatapathConfig, client: &str) {
        let frontends = |a: SocketAddr, _| a.port() == 30053 || a.port() == 30080;
        let Entries { flows, ports: held } = entries::<A>(kernel, frontends, cfg, 100);
        // The two UDP flows and the two TCP flows, whose tuples from the
        // client are alike (the writes keep the first of each).
        assert_eq!(flows.len(), 4, "{flows:?}");
        for (k, v) in &flows {
            let port = if k.proto == PROTO_UDP { 30053 } else { 30080 };
            assert_eq!((k.dir, k.dport_be), (CT_DIR_IN, u16::to_be(port)));
            assert_eq!((k.saddr_be.ip(), k.sport_be), (ip(client), 2000u16.to_be()));
            assert_eq!((v.flags, v.expires), (CT_F_KERNEL, 125));
        }
        assert_eq!(held.len(), 2, "{held:?}");
        for (k, v) in &held {
            assert_eq!((k.daddr_be, k.dport_be), (A::snat(cfg), 2000u16.to_be()));
            assert_eq!((v.addr_be.ip(), v.flags), (ip(client), CT_F_KERNEL));
        }
    }

    #[test]
    fn kube_proxys_flows_to_our_frontends_are_left_to_the_kernel_in_their_familys_maps() {
        let cfg = DatapathConfig {
            snat4_be: [192, 168, 57, 1],
            snat6_be: "fd00:57::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            nat_port_min: 1024,
            nat_port_max: 29_999,
            ..DatapathConfig::default()
        };
        let v4 = kube_proxy_flows(
            "203.0.113.2",
            "192.168.57.1",
            ["10.42.2.2", "10.42.1.2", "10.96.0.10"],
        );
        let v6 = kube_proxy_flows(
            "2001:db8:c::2",
            "fd00:57::1",
            ["fd42:2::2", "fd42:1::2", "fd00:96::a"],
        );
        let kernel: Vec<KernelFlow> = v4.into_iter().chain(v6).collect();
        check::<[u8; 4]>(&kernel, &cfg, "203.0.113.2");
        check::<[u8; 16]>(&kernel, &cfg, "2001:db8:c::2");
    }
}
