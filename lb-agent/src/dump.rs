//! `lb-agent dump`: the maps as an `ipvsadm -ln`-style listing, the
//! datapath counters, the conntrack, and the DSR tables.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
};

use ipnet::IpNet;

use lb_common::{
    CT_DIR_IN, CT_DIR_POD_IN, CT_DIR_POD_OUT, CT_F_DSR, CT_F_KERNEL, CT_F_SNAT, CT_SEEN,
    CT_SEEN_FIN, CT_SEEN_RST, CtKey, CtValue, FE_F_AFFINITY, FE_F_DSR, FE_F_EXTERNAL_LOCAL,
    FE_F_LOCAL, FE_F_MAGLEV, FE_F_NO_LOCAL_ENDPOINTS, FE_F_SOURCE_RANGES, FE_KIND_EXTERNAL_IP,
    FE_KIND_LOAD_BALANCER, FE_KIND_MASK, FE_KIND_NODE_PORT, NatKey, NatValue, PROTO_TCP,
    SCOPE_EXTERNAL, SOCK_NETNS_ADDR4, SOCK_NETNS_ADDR6, SOCK_NETNS_OPT_OUT, SOURCE_RANGE_PREFIX,
    SOURCE_RANGE6_PREFIX, SockNetns, StatKey, ct_closed, ct_dir_forward, ct_established,
    ct_expired,
};

use crate::{
    datapath::conntrack::{Addr, Entries},
    model::{Frontend, Proto},
    reconcile::{DsrEndpointKey, LbView, SlotView, SourceRangeKey},
};

/// Renders every frontend with the backends of its live revision, sorted by
/// address, port, protocol. Reads nothing but `view`, so it shows exactly
/// what the datapath sees.
pub fn render(view: &LbView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Prot LocalAddress:Port        Scheduler  Backends");
    let _ = writeln!(out, "  -> RemoteAddress:Port       BackendId");
    for fe in &view.frontends {
        let proto = Proto::from_number(fe.proto);
        let addr = match proto {
            Some(Proto::Any) => Frontend::wildcard(fe.addr).to_string(),
            _ => SocketAddr::new(fe.addr, fe.port).to_string(),
        };
        let proto = proto.map_or_else(|| fe.proto.to_string(), |p| p.to_string());
        let mode = match (fe.live, fe.count) {
            (false, _) => "removing",
            // EHOSTUNREACH: internalTrafficPolicy Local, no local endpoint.
            (true, 0) if fe.flags & FE_F_NO_LOCAL_ENDPOINTS != 0 => "unreachable",
            (true, 0) => "reject",
            (true, _) if fe.flags & FE_F_MAGLEV != 0 => "maglev",
            (true, _) => "random",
        };
        let mut extra = String::new();
        if fe.flags & FE_F_AFFINITY != 0 {
            let _ = write!(extra, " persistent {}", fe.affinity_timeout);
        }
        if fe.flags & FE_F_LOCAL != 0 {
            extra.push_str(" local");
        }
        extra.push_str(match fe.flags & FE_KIND_MASK {
            FE_KIND_NODE_PORT => " NodePort",
            FE_KIND_EXTERNAL_IP => " ExternalIP",
            FE_KIND_LOAD_BALANCER => " LoadBalancer",
            _ => "",
        });
        if fe.flags & FE_F_EXTERNAL_LOCAL != 0 {
            extra.push_str(" eTP=Local");
        }
        if fe.flags & FE_F_SOURCE_RANGES != 0 {
            extra.push_str(" source-ranges");
        }
        if fe.flags & FE_F_MAGLEV != 0 {
            let _ = write!(extra, " table {}", fe.maglev_size);
        }
        if fe.flags & FE_F_DSR != 0 {
            extra.push_str(" dsr");
        }
        if fe.scope == SCOPE_EXTERNAL {
            // The frontend as traffic from outside the node sees it (tc).
            extra.push_str(" from-outside");
        }
        let _ = writeln!(
            out,
            "{proto:<4} {addr:<24} {mode:<11} {} (id {}, rev {}){extra}",
            fe.count, fe.id, fe.rev
        );
        // A weighted backend holds several slots, one after the other: one
        // line, with its share of the frontend's new flows.
        let runs = fe.slots.chunk_by(|a, b| {
            matches!((a, b), (SlotView::Backend { backend_id: x, .. },
                SlotView::Backend { backend_id: y, .. }) if x == y)
        });
        let weighted = runs.clone().any(|run| run.len() > 1);
        for run in runs {
            let _ = match &run[0] {
                SlotView::Backend {
                    backend_id,
                    addr,
                    port,
                } => {
                    let addr = SocketAddr::new(*addr, *port).to_string();
                    if weighted {
                        let share = 100.0 * run.len() as f64 / f64::from(fe.count.max(1));
                        writeln!(
                            out,
                            "  -> {addr:<24} {backend_id} weight {} ({share:.1}%)",
                            run.len()
                        )
                    } else {
                        writeln!(out, "  -> {addr:<24} {backend_id}")
                    }
                }
                SlotView::MissingSlots(run) if run.len() == 1 => {
                    writeln!(out, "  -> <slot {} missing>", run.start)
                }
                SlotView::MissingSlots(run) => {
                    writeln!(out, "  -> <slots {}..={} missing>", run.start, run.end - 1)
                }
                SlotView::MissingBackend(id) => writeln!(out, "  -> <backend {id} missing>"),
            };
        }
    }
    let [frontends, states, slots, members, backends] = view.entries;
    let _ = writeln!(
        out,
        "# entries: {frontends} frontends, {states} states, {slots} slots, {members} members, \
         {backends} backends; {} revisions retired",
        view.retired_revisions
    );
    out
}

/// Renders the source ranges of the guarded frontends (`LB4_SRC_RANGES`,
/// `LB6_SRC_RANGES`), by frontend: which frontends they guard is the
/// scope (load-balancer IPs; with `--bpf-lb-source-range-all-types` the
/// NodePorts and external IPs too, and cluster IPs). Nothing when none
/// is guarded.
pub fn render_source_ranges(keys: &BTreeSet<SourceRangeKey>) -> String {
    if keys.is_empty() {
        return String::new();
    }
    let mut by_frontend: BTreeMap<(SocketAddr, u8), Vec<String>> = BTreeMap::new();
    for key in keys {
        let (frontend, range) = match key {
            SourceRangeKey::V4(len, k) => (
                (
                    SocketAddr::new(k.addr_be.into(), u16::from_be(k.port_be)),
                    k.proto,
                ),
                format!(
                    "{}/{}",
                    std::net::Ipv4Addr::from(k.src_be),
                    len.saturating_sub(SOURCE_RANGE_PREFIX)
                ),
            ),
            SourceRangeKey::V6(len, k) => (
                (
                    SocketAddr::new(k.addr_be.into(), u16::from_be(k.port_be)),
                    k.proto,
                ),
                format!(
                    "{}/{}",
                    std::net::Ipv6Addr::from(k.src_be),
                    len.saturating_sub(SOURCE_RANGE6_PREFIX)
                ),
            ),
        };
        by_frontend.entry(frontend).or_default().push(range);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# source ranges: {} guarded frontends (new flows from outside them are dropped)",
        by_frontend.len()
    );
    for ((addr, proto), ranges) in by_frontend {
        let proto = Proto::from_number(proto).map_or_else(|| proto.to_string(), |p| p.to_string());
        let _ = writeln!(out, "#   {proto:<4} {addr:<24} {}", ranges.join(" "));
    }
    out
}

/// Renders what the socket programs know of network namespaces
/// (`LB_SOCK_NETNS`, by cookie): those left to per-packet translation (the
/// pods that opted out) and the addresses they send from
/// (`--bpf-lb-source-range-all-types`); and the interfaces the pods' tc
/// programs are linked to. Nothing when there are none.
pub fn render_opt_outs(netns: &BTreeMap<u64, SockNetns>, devices: &BTreeSet<String>) -> String {
    let mut out = String::new();
    if netns.is_empty() && devices.is_empty() {
        return out;
    }
    let opted: Vec<String> = netns
        .iter()
        .filter(|(_, e)| e.flags & SOCK_NETNS_OPT_OUT != 0)
        .map(|(cookie, _)| cookie.to_string())
        .collect();
    let _ = writeln!(
        out,
        "# socket load balancing off in {} network namespaces (cookies): {}",
        opted.len(),
        join_or_none(opted)
    );
    for (cookie, e) in netns
        .iter()
        .filter(|(_, e)| e.flags & !SOCK_NETNS_OPT_OUT != 0)
    {
        let mut addrs = Vec::new();
        if e.flags & SOCK_NETNS_ADDR4 != 0 {
            addrs.push(std::net::Ipv4Addr::from(e.addr4_be).to_string());
        }
        if e.flags & SOCK_NETNS_ADDR6 != 0 {
            addrs.push(std::net::Ipv6Addr::from(e.addr6_be).to_string());
        }
        let _ = writeln!(out, "#   netns {cookie} sends from {}", addrs.join(" "));
    }
    let _ = writeln!(
        out,
        "# pods' tc programs (per-packet Service translation) on: {}",
        join_or_none(devices.iter().cloned().collect())
    );
    out
}

/// `items` joined by spaces, or `none`.
fn join_or_none(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(" ")
    }
}

/// Renders the tc programs' conntrack and SNAT entries (`dump
/// --conntrack`), as `cilium bpf ct list global` and `cilium bpf nat list`
/// do, with each entry's time left at `now` (the programs' clock, seconds):
/// IPv4's, then IPv6's (`# conntrack6`, `# nat6`).
pub fn render_conntrack(entries: &Entries, now: u32) -> String {
    let mut out = String::new();
    render_family(&mut out, "", &entries.ct, &entries.nat, now);
    render_family(&mut out, "6", &entries.ct6, &entries.nat6, now);
    out
}

/// [`render_conntrack`] for the entries of one family; `suffix` names it
/// in the headings.
fn render_family<A: Addr + Ord>(
    out: &mut String,
    suffix: &str,
    ct: &[(CtKey<A>, CtValue<A>)],
    nat: &[(NatKey<A>, NatValue<A>)],
    now: u32,
) {
    let sock =
        |addr: A, port_be: u16| SocketAddr::new(addr.ip(), u16::from_be(port_be)).to_string();
    let proto = |p: u8| Proto::from_number(p).map_or_else(|| p.to_string(), |p| p.to_string());
    let left = |expires: u32| {
        if ct_expired(expires, now) {
            "expired".to_owned()
        } else {
            format!("expires {}s", expires.wrapping_sub(now))
        }
    };
    let kernel = |flags: u16| {
        if flags & CT_F_KERNEL != 0 {
            " kernel"
        } else {
            ""
        }
    };
    let state = |k: &CtKey<A>, v: &CtValue<A>| {
        let (c, b) = (v.seen_client, v.seen_backend);
        let state = if k.proto != PROTO_TCP {
            if b & CT_SEEN != 0 { " replied" } else { "" }
        } else if (c | b) & CT_SEEN_RST != 0 {
            " reset"
        } else if ct_closed(c, b) {
            " closed"
        } else if ct_established(c, b) && (c | b) & CT_SEEN_FIN != 0 {
            " half-closed"
        } else if ct_established(c, b) {
            " established"
        } else {
            " syn"
        };
        let snat = if v.flags & CT_F_SNAT != 0 {
            " snat"
        } else if v.flags & CT_F_DSR != 0 {
            " dsr"
        } else {
            ""
        };
        format!("{state}{snat}{}", kernel(v.flags))
    };
    let mut ct = ct.to_vec();
    ct.sort_by_key(|(k, _)| (k.dir, *k));
    let _ = writeln!(out, "# conntrack{suffix}: {} entries", ct.len());
    for (k, v) in &ct {
        let flow = format!(
            "{:<4} {} {} -> {}",
            proto(k.proto),
            match k.dir {
                CT_DIR_IN => "IN ",
                CT_DIR_POD_IN => "POD IN ",
                CT_DIR_POD_OUT => "POD OUT",
                _ => "OUT",
            },
            sock(k.saddr_be, k.sport_be),
            sock(k.daddr_be, k.dport_be)
        );
        let to = if ct_dir_forward(k.dir) {
            format!(
                "backend {} (id {})",
                sock(v.addr_be, v.port_be),
                v.backend_id
            )
        } else if v.nat_port_be != 0 {
            format!(
                "frontend {} nat {}",
                sock(v.addr_be, v.port_be),
                sock(v.nat_addr_be, v.nat_port_be)
            )
        } else {
            format!("frontend {}", sock(v.addr_be, v.port_be))
        };
        let _ = writeln!(out, "{flow} {to} {}{}", left(v.expires), state(k, v));
    }
    let mut nat = nat.to_vec();
    nat.sort_by_key(|(k, _)| *k);
    let _ = writeln!(out, "# nat{suffix}: {} entries", nat.len());
    for (k, v) in &nat {
        let _ = writeln!(
            out,
            "{:<4} {} -> {} client {} {}{}",
            proto(k.proto),
            sock(k.saddr_be, k.sport_be),
            sock(k.daddr_be, k.dport_be),
            sock(v.addr_be, v.port_be),
            left(v.expires),
            kernel(v.flags)
        );
    }
}

/// Renders the DSR tables (`dump --dsr`): which node each address is on
/// (`LB4_NODE_NETS`, `LB6_NODE_NETS`: prefix and node number, by node),
/// then the endpoints on this node of DSR frontends (`LB4_DSR_EPS`,
/// `LB6_DSR_EPS`; a NodePort's frontend is `*`, every node address).
pub fn render_dsr(
    node_nets: &BTreeMap<IpNet, u32>,
    endpoints: &BTreeSet<DsrEndpointKey>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# node networks: prefix -> node");
    let by_node: BTreeSet<(u32, IpNet)> = node_nets.iter().map(|(net, n)| (*n, *net)).collect();
    for (node, net) in by_node {
        let _ = writeln!(out, "{:<28} node {node}", net.to_string());
    }
    let _ = writeln!(out, "# DSR endpoints on this node: frontend -> endpoint");
    let proto = |p: u8| Proto::from_number(p).map_or_else(|| p.to_string(), |p| p.to_string());
    let frontend = |addr: IpAddr, port_be: u16| {
        let port = u16::from_be(port_be);
        if addr.is_unspecified() {
            format!("*:{port}")
        } else {
            SocketAddr::new(addr, port).to_string()
        }
    };
    for key in endpoints {
        let (p, fe, ep) = match key {
            DsrEndpointKey::V4(k) => (
                k.proto,
                frontend(k.frontend_be.into(), k.frontend_port_be),
                SocketAddr::new(k.endpoint_be.into(), u16::from_be(k.endpoint_port_be)),
            ),
            DsrEndpointKey::V6(k) => (
                k.proto,
                frontend(k.frontend_be.into(), k.frontend_port_be),
                SocketAddr::new(k.endpoint_be.into(), u16::from_be(k.endpoint_port_be)),
            ),
        };
        let _ = writeln!(out, "{:<4} {fe:<40} -> {ep}", proto(p));
    }
    let _ = writeln!(
        out,
        "# entries: {} node networks, {} DSR endpoints",
        node_nets.len(),
        endpoints.len()
    );
    out
}

/// Renders the datapath counters, one per line: hook, direction, family,
/// reason and count.
pub fn render_stats(counters: &BTreeMap<StatKey, u64>) -> String {
    let mut out = String::from("# hook direction family reason count\n");
    for (key, n) in counters {
        let _ = writeln!(
            out,
            "{:<4} {:<7} {:<4} {:<26} {n}",
            key.at.hook.name(),
            key.at.dir.name(),
            key.family.name(),
            key.reason.name()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::reconcile::FrontendView;

    #[test]
    fn source_ranges_are_listed_by_frontend_and_opt_outs_by_namespace_and_interface() {
        use lb_common::{PROTO_TCP, SourceRange};
        let key = |addr: [u8; 4], port: u16, src: [u8; 4], len: u32| {
            SourceRangeKey::V4(
                SOURCE_RANGE_PREFIX + len,
                SourceRange {
                    addr_be: addr,
                    port_be: port.to_be(),
                    proto: PROTO_TCP,
                    _pad0: 0,
                    src_be: src,
                },
            )
        };
        let keys = BTreeSet::from([
            key([198, 51, 100, 20], 80, [203, 0, 113, 0], 25),
            key([198, 51, 100, 20], 80, [192, 0, 2, 7], 32),
            // A NodePort guarded with --bpf-lb-source-range-all-types.
            key([192, 168, 57, 1], 30083, [203, 0, 113, 0], 25),
        ]);
        let text = render_source_ranges(&keys);
        assert_eq!(
            text,
            "# source ranges: 2 guarded frontends (new flows from outside them are dropped)\n\
             #   TCP  192.168.57.1:30083       203.0.113.0/25\n\
             #   TCP  198.51.100.20:80         203.0.113.0/25 192.0.2.7/32\n"
        );
        let out = |flags| SockNetns {
            flags,
            addr4_be: [10, 42, 2, 7],
            ..Default::default()
        };
        let text = render_opt_outs(
            &BTreeMap::from([
                (4097, out(SOCK_NETNS_OPT_OUT)),
                (12, out(SOCK_NETNS_OPT_OUT | SOCK_NETNS_ADDR4)),
                (13, out(SOCK_NETNS_ADDR4)),
            ]),
            &BTreeSet::from(["cali12".to_owned()]),
        );
        assert_eq!(
            text,
            "# socket load balancing off in 2 network namespaces (cookies): 12 4097\n\
             #   netns 12 sends from 10.42.2.7\n\
             #   netns 13 sends from 10.42.2.7\n\
             # pods' tc programs (per-packet Service translation) on: cali12\n"
        );
        assert_eq!(render_opt_outs(&BTreeMap::new(), &BTreeSet::new()), "");
        assert_eq!(render_source_ranges(&BTreeSet::new()), "");
        // Programs left on an interface after its pod opted in again.
        assert!(
            render_opt_outs(&BTreeMap::new(), &BTreeSet::from(["cali12".to_owned()]))
                .contains("cookies): none")
        );
    }

    #[test]
    fn the_counters_are_listed_by_hook_direction_family_and_reason() {
        use lb_common::{At, Reason, StatFamily};
        let counters = BTreeMap::from([
            (StatKey::new(At::XDP, StatFamily::V6, Reason::Forwarded), 7),
            (
                StatKey::new(At::TC_OUT, StatFamily::V4, Reason::DropSnatExhausted),
                0,
            ),
        ]);
        assert_eq!(
            render_stats(&counters),
            "# hook direction family reason count\n\
             tc   egress  ipv4 drop_snat_exhausted        0\n\
             xdp  ingress ipv6 forwarded                  7\n"
        );
    }

    #[test]
    fn the_dsr_tables_list_each_nodes_networks_and_each_endpoint() {
        let nets: BTreeMap<IpNet, u32> = [
            ("192.168.57.2/32", 2),
            ("10.42.1.0/24", 1),
            ("fd42:2::/64", 2),
            ("10.42.2.0/24", 2),
        ]
        .into_iter()
        .map(|(n, v)| (n.parse().unwrap(), v))
        .collect();
        let v4 = |fe: [u8; 4], ep: [u8; 4]| {
            DsrEndpointKey::V4(lb_common::DsrEndpoint4Key {
                frontend_be: fe,
                endpoint_be: ep,
                frontend_port_be: 30090u16.to_be(),
                endpoint_port_be: 8080u16.to_be(),
                proto: PROTO_TCP,
                _pad0: [0; 3],
            })
        };
        let v6 = DsrEndpointKey::V6(lb_common::DsrEndpoint6Key {
            frontend_be: "2001:db8:e::10"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
            endpoint_be: "fd42:2::2".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            frontend_port_be: 80u16.to_be(),
            endpoint_port_be: 8080u16.to_be(),
            proto: lb_common::PROTO_UDP,
            _pad0: [0; 3],
        });
        let eps = BTreeSet::from([
            v4([0; 4], [10, 42, 2, 2]),
            v4([198, 51, 100, 10], [10, 42, 2, 2]),
            v6,
        ]);
        let text = render_dsr(&nets, &eps);
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        let want = [
            "# node networks: prefix -> node",
            "10.42.1.0/24                 node 1",
            "10.42.2.0/24                 node 2",
            "192.168.57.2/32              node 2",
            "fd42:2::/64                  node 2",
            "# DSR endpoints on this node: frontend -> endpoint",
            "TCP  *:30090                                  -> 10.42.2.2:8080",
            "TCP  198.51.100.10:30090                      -> 10.42.2.2:8080",
            "UDP  [2001:db8:e::10]:80                      -> [fd42:2::2]:8080",
            "# entries: 4 node networks, 3 DSR endpoints",
        ];
        assert_eq!(lines, want, "{text}");
    }

    #[test]
    fn missing_slots_and_backends_are_shown_not_hidden() {
        let view = LbView {
            frontends: vec![FrontendView {
                addr: Ipv4Addr::new(10, 0, 0, 1).into(),
                port: 80,
                proto: PROTO_TCP,
                scope: 0,
                id: 7,
                live: true,
                rev: 2,
                count: 2,
                flags: FE_F_AFFINITY | FE_F_LOCAL,
                affinity_timeout: 10_800,
                maglev_size: 0,
                slots: vec![SlotView::MissingSlots(0..1), SlotView::MissingBackend(9)],
            }],
            retired_revisions: 1,
            entries: [1, 1, 1, 0, 0],
        };
        let text = render(&view);
        assert!(text.contains("TCP  10.0.0.1:80"), "{text}");
        assert!(
            text.contains("(id 7, rev 2) persistent 10800 local"),
            "{text}"
        );
        assert!(text.contains("<slot 0 missing>"), "{text}");
        assert!(text.contains("<backend 9 missing>"), "{text}");
        assert!(text.contains("1 revisions retired"), "{text}");
    }

    #[test]
    fn a_weighted_frontend_shows_each_backends_weight_and_share() {
        let slot = |backend_id, last| SlotView::Backend {
            backend_id,
            addr: Ipv4Addr::new(10, 0, 0, last).into(),
            port: 8080,
        };
        let view = LbView {
            frontends: vec![FrontendView {
                addr: Ipv4Addr::new(10, 96, 0, 1).into(),
                port: 80,
                proto: PROTO_TCP,
                scope: lb_common::SCOPE_INTERNAL,
                id: 1,
                live: true,
                rev: 1,
                count: 4,
                flags: 0,
                affinity_timeout: 0,
                maglev_size: 0,
                slots: vec![slot(5, 1), slot(6, 2), slot(6, 2), slot(6, 2)],
            }],
            retired_revisions: 0,
            entries: [1, 1, 4, 0, 2],
        };
        let text = render(&view);
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("  -> 10.")).collect();
        assert_eq!(
            lines,
            [
                "  -> 10.0.0.1:8080            5 weight 1 (25.0%)",
                "  -> 10.0.0.2:8080            6 weight 3 (75.0%)",
            ],
            "{text}"
        );
    }

    #[test]
    fn external_frontends_show_their_kind_and_policy() {
        let fe = |flags| FrontendView {
            addr: Ipv4Addr::new(192, 0, 2, 1).into(),
            port: 30080,
            proto: lb_common::PROTO_UDP,
            scope: lb_common::SCOPE_INTERNAL,
            id: 3,
            live: true,
            rev: 1,
            count: 0,
            flags,
            affinity_timeout: 0,
            maglev_size: 0,
            slots: Vec::new(),
        };
        let view = LbView {
            frontends: vec![
                fe(FE_KIND_NODE_PORT | FE_F_EXTERNAL_LOCAL),
                fe(FE_KIND_EXTERNAL_IP),
                fe(FE_KIND_LOAD_BALANCER),
                fe(0),
                FrontendView {
                    scope: SCOPE_EXTERNAL,
                    ..fe(FE_KIND_NODE_PORT | FE_F_EXTERNAL_LOCAL)
                },
                FrontendView {
                    scope: SCOPE_EXTERNAL,
                    count: 2,
                    maglev_size: 16381,
                    ..fe(FE_KIND_LOAD_BALANCER | FE_F_MAGLEV)
                },
            ],
            retired_revisions: 0,
            entries: [6, 6, 0, 0, 0],
        };
        let text = render(&view);
        let maglev = text.lines().find(|l| l.contains(" maglev ")).unwrap_or("");
        assert!(maglev.contains(" maglev      2 (id 3, rev 1)"), "{text}");
        let tails: Vec<&str> = text
            .lines()
            .skip(2)
            .take(6)
            .map(|l| l.split_once("rev 1)").expect("a frontend line").1)
            .collect();
        assert_eq!(
            tails,
            [
                " NodePort eTP=Local",
                " ExternalIP",
                " LoadBalancer",
                "",
                " NodePort eTP=Local from-outside",
                " LoadBalancer table 16381 from-outside"
            ],
            "{text}"
        );
    }

    #[test]
    fn ipv6_conntrack_entries_are_listed_in_their_own_section() {
        use lb_common::{Ct6Key, Ct6Value};

        let ip = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        let entries = Entries {
            ct6: vec![(
                Ct6Key {
                    saddr_be: ip("2001:db8:c::7"),
                    daddr_be: ip("fd00:57::1"),
                    sport_be: 40000u16.to_be(),
                    dport_be: 30080u16.to_be(),
                    proto: lb_common::PROTO_UDP,
                    dir: CT_DIR_IN,
                    _pad0: [0; 2],
                },
                Ct6Value {
                    addr_be: ip("fd42:2::9"),
                    port_be: 8080u16.to_be(),
                    flags: CT_F_SNAT,
                    seen_client: CT_SEEN,
                    backend_id: 3,
                    expires: 130,
                    ..Ct6Value::default()
                },
            )],
            ..Entries::default()
        };
        assert_eq!(
            render_conntrack(&entries, 100),
            "# conntrack: 0 entries\n\
             # nat: 0 entries\n\
             # conntrack6: 1 entries\n\
             UDP  IN  [2001:db8:c::7]:40000 -> [fd00:57::1]:30080 backend [fd42:2::9]:8080 (id 3) \
             expires 30s snat\n\
             # nat6: 0 entries\n"
        );
    }

    #[test]
    fn conntrack_entries_are_listed_by_direction_with_their_time_left() {
        use lb_common::{CT_DIR_OUT, CT_SEEN_ACK, Ct4Key, Ct4Value, Nat4Key, Nat4Value};

        let key = |dir, s: [u8; 4], sp: u16, d: [u8; 4], dp: u16| Ct4Key {
            saddr_be: s,
            daddr_be: d,
            sport_be: sp.to_be(),
            dport_be: dp.to_be(),
            proto: PROTO_TCP,
            dir,
            _pad0: [0; 2],
        };
        let (client, node, pod) = ([198, 51, 100, 7], [192, 0, 2, 10], [10, 2, 0, 9]);
        let entries = Entries {
            ct: vec![
                (
                    key(CT_DIR_OUT, pod, 8080, client, 40000),
                    Ct4Value {
                        addr_be: node,
                        port_be: 30080u16.to_be(),
                        flags: CT_F_SNAT,
                        nat_addr_be: node,
                        nat_port_be: 61000u16.to_be(),
                        seen_client: CT_SEEN | CT_SEEN_ACK | CT_SEEN_FIN,
                        seen_backend: CT_SEEN | CT_SEEN_ACK | CT_SEEN_FIN,
                        expires: 50,
                        ..Ct4Value::default()
                    },
                ),
                (
                    key(CT_DIR_IN, client, 40000, node, 30080),
                    Ct4Value {
                        addr_be: pod,
                        port_be: 8080u16.to_be(),
                        flags: CT_F_SNAT,
                        seen_client: CT_SEEN | CT_SEEN_ACK,
                        seen_backend: CT_SEEN,
                        backend_id: 7,
                        expires: 1000,
                        ..Ct4Value::default()
                    },
                ),
            ],
            nat: vec![(
                Nat4Key {
                    saddr_be: pod,
                    daddr_be: node,
                    sport_be: 8080u16.to_be(),
                    dport_be: 61000u16.to_be(),
                    proto: PROTO_TCP,
                    _pad0: [0; 3],
                },
                Nat4Value {
                    addr_be: client,
                    port_be: 40000u16.to_be(),
                    flags: 0,
                    expires: 90,
                },
            )],
            ..Entries::default()
        };
        assert_eq!(
            render_conntrack(&entries, 100),
            "# conntrack: 2 entries\n\
             TCP  IN  198.51.100.7:40000 -> 192.0.2.10:30080 backend 10.2.0.9:8080 (id 7) \
             expires 900s established snat\n\
             TCP  OUT 10.2.0.9:8080 -> 198.51.100.7:40000 frontend 192.0.2.10:30080 \
             nat 192.0.2.10:61000 expired closed snat\n\
             # nat: 1 entries\n\
             TCP  10.2.0.9:8080 -> 192.0.2.10:61000 client 198.51.100.7:40000 expired\n\
             # conntrack6: 0 entries\n\
             # nat6: 0 entries\n"
        );
    }

    #[test]
    fn a_state_claiming_slots_that_do_not_exist_is_shown_in_a_few_lines() {
        // Found by the dump_decode fuzz target: 100 states claiming 65,535
        // slots each, 4 KB of map entries, took 1.8 s and 350 MB to list,
        // one line per missing slot.
        use std::collections::BTreeMap;

        use lb_common::{Backend4, Frontend4Key, Frontend4State, FrontendId, Slot, SlotKey};

        use crate::reconcile::V4;

        let key = Frontend4Key {
            addr_be: [10, 96, 0, 1],
            port_be: 80u16.to_be(),
            proto: PROTO_TCP,
            scope: 0,
        };
        let state = Frontend4State {
            owner: key,
            rev: 3,
            count: u16::MAX,
            ..Frontend4State::default()
        };
        let slot = |n| SlotKey {
            fe_id: 1,
            rev: 3,
            slot: n,
        };
        // Slots 2 and 9 present, 9 naming a backend that is gone; another
        // revision's slot and one past the count are not this revision's.
        let slots = BTreeMap::from([
            (slot(2), Slot { backend_id: 5 }),
            (slot(9), Slot { backend_id: 6 }),
            (slot(u16::MAX), Slot { backend_id: 5 }),
            (SlotKey { rev: 2, ..slot(0) }, Slot { backend_id: 5 }),
        ]);
        let backend = Backend4 {
            addr_be: [10, 0, 0, 5],
            port_be: 8080u16.to_be(),
            proto: PROTO_TCP,
            state: 0,
        };
        let view = LbView::of::<V4>(
            &BTreeMap::from([(key, FrontendId { id: 1 })]),
            &BTreeMap::from([(1, state)]),
            &slots,
            &BTreeMap::new(),
            &BTreeMap::from([(5, backend)]),
        );
        let text = render(&view);
        let listed: Vec<&str> = text.lines().skip(3).take(5).collect();
        assert_eq!(
            listed,
            [
                "  -> <slots 0..=1 missing>",
                "  -> 10.0.0.5:8080            5",
                "  -> <slots 3..=8 missing>",
                "  -> <backend 6 missing>",
                "  -> <slots 10..=65534 missing>",
            ],
            "{text}"
        );
        assert_eq!(text.lines().count(), 9, "{text}");
        let shown: usize = view.frontends[0].slots.iter().map(SlotView::slots).sum();
        assert_eq!(shown, usize::from(u16::MAX));
    }
}
