//! kube-proxy **v1.31** nftables mode (`pkg/proxy/nftables/proxier.go`,
//! `setupNFTables` + `syncProxyRules` on the first full sync) for ClusterIP
//! services and NodePorts with `externalTrafficPolicy: Cluster`, written the
//! way knftables serializes a transaction.
//!
//! Reproduced: `table ip kube-proxy` with all eight base chains and their
//! v1.31 priorities (`filter-*` at dstnat-10, `filter-output-post-dnat` at
//! dstnat+10, `nat-*` at dstnat/srcnat), the jump chains
//! (`services`, `masquerading`, `mark-for-masquerade`,
//! `service-endpoints-check`, `nodeport-endpoints-check`, `firewall-check`,
//! `cluster-ips-check`, `reject-chain`), the `cluster-ips` set, the
//! `service-ips`, `service-nodeports`, `no-endpoint-services`,
//! `no-endpoint-nodeports` and `firewall-ips` maps (filled as kube-proxy fills
//! them), one `service-<hash>-ns/name/proto/port` chain per service port with
//! the `numgen random mod N vmap` dispatch, one
//! `external-<hash>-ns/name/proto/port` chain per service port with a NodePort
//! (eTP Cluster: `jump mark-for-masquerade`, then `goto` the service chain;
//! reached from its `service-nodeports` element, or, without endpoints, a
//! `no-endpoint-nodeports` element `goto reject-chain`), and one
//! `endpoint-<hash>-...__ip/port` chain per endpoint; the first sync's
//! add+delete of the base chains and the flushes, in kube-proxy's order.
//! Also the *partial* sync that follows an endpoint change
//! ([`nft_partial_sync`]), with the stale-chain handling of v1.31.
//! IPv6 services give the IPv6 proxier's `table ip6 kube-proxy`: `ip6`
//! matches, `ipv6_addr` sets, `::1` as localhost, endpoint chains named
//! with the address's colons as dots, `dnat to [ip]:port`.
//!
//! Simplified: NodePorts only with `externalTrafficPolicy: Cluster` (empty
//! `--nodeport-addresses`, so `services` matches them with `fib daddr type
//! local`); no eTP Local (`local-` chains, health-check ports: the
//! generators panic on an eTP Local NodePort with endpoints), LoadBalancer
//! or externalIPs; no session affinity, internal traffic policy or
//! terminating endpoints. `cluster-ips-check` has no
//! "drop traffic to unallocated ClusterIPs" rule: v1.31 writes it only from
//! ServiceCIDR objects (the MultiCIDRServiceAllocator gate, off by default).

use std::{
    fmt::Write as _,
    net::{IpAddr, SocketAddr},
};

use super::{Family, MASQ_MARK, SvcSpec, hash_b32};

/// `nft -f` input equivalent to kube-proxy v1.31's first full sync of
/// `services` (ClusterIP, plus an eTP Cluster NodePort where
/// [`SvcSpec::node_port`] is set), with `cluster_cidr` as `--cluster-cidr`.
/// See the module documentation for what is simplified; panics on an eTP
/// Local NodePort that has endpoints (not reproduced here).
pub fn nft_ruleset(services: &[SvcSpec], cluster_cidr: &str) -> String {
    let total_endpoints: usize = services.iter().map(|s| s.endpoints.len()).sum();
    let table = Table::of(Family::of_services(services));
    let mut o = String::with_capacity(500 * services.len() + 500 * total_endpoints + 8192);
    setup(&mut o, &table);
    for svc in services {
        service(&mut o, &table, svc, cluster_cidr, true);
    }
    o
}

/// The transactions of a v1.31 *partial* sync after the endpoints of
/// `changed` (indices into `services`) changed: `setupNFTables` is skipped,
/// set and map elements are diffed in Go (an endpoint change alters none),
/// unchanged services are not mentioned, and each changed service's chains
/// (`service-`, `external-`, `endpoint-`) are rewritten whole. Chains that
/// fell out of use (`stale`) are flushed
/// now; kube-proxy deletes them in a separate transaction at the start of a
/// sync at least a second later, which is [`nft_delete_chains`].
pub fn nft_partial_sync(
    services: &[SvcSpec],
    changed: &[usize],
    stale: &[String],
    cluster_cidr: &str,
) -> String {
    let table = Table::of(Family::of_services(services));
    let t = table.name;
    let mut o = String::new();
    for &i in changed {
        // Losing or gaining all endpoints would change map elements too.
        assert!(
            !services[i].endpoints.is_empty(),
            "a partial sync here keeps endpoints"
        );
        service(&mut o, &table, &services[i], cluster_cidr, false);
    }
    for chain in stale {
        let _ = writeln!(o, "flush chain {t} {chain}");
    }
    o
}

/// The transaction that deletes stale chains (of the IPv4 table).
pub fn nft_delete_chains(chains: &[String]) -> String {
    let t = Table::of(Family::V4).name;
    chains
        .iter()
        .map(|c| format!("delete chain {t} {c}\n"))
        .collect()
}

/// The name of the chain kube-proxy v1.31 makes for one endpoint of `svc`.
pub fn nft_endpoint_chain(svc: &SvcSpec, ip: IpAddr, port: u16) -> String {
    // An IPv6 address's colons are not allowed in a chain name: dots.
    let ip = ip.to_string().replace(':', ".");
    format!(
        "endpoint-{}",
        hash_and_truncate(&format!("{}__{ip}/{port}", base_name(svc)))
    )
}

/// Where `setupNFTables` differs by family (its `ipX`, `ipvX_addr` and
/// `noLocalhost`), and the table's name.
struct Table {
    /// `ip kube-proxy` or `ip6 kube-proxy`, as commands name it.
    name: &'static str,
    /// The address match: `ip` or `ip6` (`ip daddr ...`).
    ipx: &'static str,
    addr_type: &'static str,
    no_localhost: &'static str,
}

impl Table {
    fn of(family: Family) -> Self {
        match family {
            Family::V4 => Self {
                name: "ip kube-proxy",
                ipx: "ip",
                addr_type: "ipv4_addr",
                no_localhost: "ip daddr != 127.0.0.0/8",
            },
            Family::V6 => Self {
                name: "ip6 kube-proxy",
                ipx: "ip6",
                addr_type: "ipv6_addr",
                no_localhost: "ip6 daddr != ::1",
            },
        }
    }
}

/// `ns/name/proto/portname`, what service and endpoint chains are named after.
fn base_name(svc: &SvcSpec) -> String {
    format!(
        "{}/{}/{}/{}",
        svc.namespace,
        svc.name,
        svc.proto.as_str(),
        svc.port_name
    )
}

/// One service port as `syncProxyRules` writes it: its chains, the map
/// elements (on a full sync) and the rules.
fn service(o: &mut String, table: &Table, svc: &SvcSpec, cluster_cidr: &str, elements: bool) {
    let (t, ipx) = (table.name, table.ipx);
    let proto = svc.proto.as_str();
    let (vip, port) = (svc.vip, svc.port);
    let eps: Vec<String> = svc
        .endpoints
        .iter()
        .map(|(ip, p)| nft_endpoint_chain(svc, *ip, *p))
        .collect();
    for ep in &eps {
        let _ = write!(o, "add chain {t} {ep}\nflush chain {t} {ep}\n");
    }
    let base = hash_and_truncate(&base_name(svc));
    let chain = format!("service-{base}");
    // The "external destinations" chain, only for a NodePort here.
    let ext = svc.node_port.as_ref().map(|_| format!("external-{base}"));
    // Without endpoints both policies write the same reject element.
    assert!(
        eps.is_empty()
            || svc
                .node_port
                .as_ref()
                .is_none_or(|np| np.local_endpoints().is_none()),
        "{}: eTP Local is only reproduced by the iptables layout",
        svc.port_name_string()
    );
    if !eps.is_empty() {
        let _ = write!(o, "add chain {t} {chain}\nflush chain {t} {chain}\n");
        if let Some(ext) = &ext {
            let _ = write!(o, "add chain {t} {ext}\nflush chain {t} {ext}\n");
        }
    }
    if elements {
        let _ = writeln!(o, "add element {t} cluster-ips {{ {vip} }}");
    }
    if eps.is_empty() {
        if elements {
            let name = svc.port_name_string();
            let _ = writeln!(
                o,
                "add element {t} no-endpoint-services {{ {vip} . {proto} . {port} \
                 comment \"{name}\" : goto reject-chain }}"
            );
            if let Some(node_port) = svc.node_port.as_ref().map(|np| np.port) {
                let _ = writeln!(
                    o,
                    "add element {t} no-endpoint-nodeports {{ {proto} . {node_port} \
                     comment \"{name}\" : goto reject-chain }}"
                );
            }
        }
        return;
    }
    if elements {
        let _ = writeln!(
            o,
            "add element {t} service-ips {{ {vip} . {proto} . {port} : goto {chain} }}"
        );
        if let (Some(node_port), Some(ext)) = (svc.node_port.as_ref().map(|np| np.port), &ext) {
            let _ = writeln!(
                o,
                "add element {t} service-nodeports {{ {proto} . {node_port} : goto {ext} }}"
            );
        }
    }
    let _ = writeln!(
        o,
        "add rule {t} {chain} {ipx} daddr {vip} {proto} dport {port} {ipx} saddr != {cluster_cidr} \
         jump mark-for-masquerade"
    );
    if let Some(ext) = &ext {
        // externalTrafficPolicy: Cluster; kube-proxy puts no comment on these.
        let _ = write!(
            o,
            "add rule {t} {ext} jump mark-for-masquerade\n\
             add rule {t} {ext} goto {chain}\n"
        );
    }
    let _ = write!(
        o,
        "add rule {t} {chain} numgen random mod {} vmap {{ ",
        eps.len()
    );
    // knftables.Concat puts spaces around the commas too.
    for (i, ep) in eps.iter().enumerate() {
        let sep = if i + 1 < eps.len() { " ," } else { "" };
        let _ = write!(o, "{i} : goto {ep}{sep} ");
    }
    o.push_str("}\n");
    for (&(ip, p), ep) in svc.endpoints.iter().zip(&eps) {
        // `[ip]:port` for IPv6, as kube-proxy's endpoint string.
        let to = SocketAddr::new(ip, p);
        let _ = write!(
            o,
            "add rule {t} {ep} {ipx} saddr {ip} jump mark-for-masquerade\n\
             add rule {t} {ep} meta l4proto {proto} dnat to {to}\n"
        );
    }
}

/// kube-proxy's `hashAndTruncate`: 8 base32 characters of the name's sha256,
/// `-`, the name; cut to 240 characters with `...`.
fn hash_and_truncate(name: &str) -> String {
    const MAX: usize = 256 - 16; // knftables.NameLengthMax - chainNamePrefixLengthMax
    let mut s = format!("{}-{name}", hash_b32(name, 8));
    if s.len() > MAX {
        s.truncate(MAX - 3);
        s.push_str("...");
    }
    s
}

/// `setupNFTables` on the first sync (`!proxier.flushed`), with empty
/// `--nodeport-addresses` and no ServiceCIDRs.
fn setup(o: &mut String, table: &Table) {
    let Table {
        name: t,
        ipx,
        addr_type,
        no_localhost,
    } = table;
    const BASE: [(&str, &str, &str, i32); 8] = [
        ("filter-prerouting", "filter", "prerouting", -110),
        ("filter-input", "filter", "input", -110),
        ("filter-forward", "filter", "forward", -110),
        ("filter-output", "filter", "output", -110),
        ("filter-output-post-dnat", "filter", "output", -90),
        ("nat-prerouting", "nat", "prerouting", -100),
        ("nat-output", "nat", "output", -100),
        ("nat-postrouting", "nat", "postrouting", 100),
    ];
    // (dstChain, srcChain, extraArgs)
    const JUMPS: [(&str, &str, &str); 12] = [
        ("nodeport-endpoints-check", "filter-input", "ct state new "),
        ("service-endpoints-check", "filter-input", "ct state new "),
        ("service-endpoints-check", "filter-forward", "ct state new "),
        ("service-endpoints-check", "filter-output", "ct state new "),
        ("firewall-check", "filter-prerouting", "ct state new "),
        ("firewall-check", "filter-output", "ct state new "),
        ("services", "nat-output", ""),
        ("services", "nat-prerouting", ""),
        ("masquerading", "nat-postrouting", ""),
        ("cluster-ips-check", "filter-forward", "ct state new "),
        (
            "cluster-ips-check",
            "filter-output-post-dnat",
            "ct state new ",
        ),
        // Not a jump chain; ensured right after them.
        ("mark-for-masquerade", "", ""),
    ];
    let _ = writeln!(o, "add table {t} {{ comment \"rules for kube-proxy\" ; }}");
    for (name, ..) in BASE {
        let _ = write!(o, "add chain {t} {name}\ndelete chain {t} {name}\n");
    }
    for (name, ty, hook, prio) in BASE {
        let _ = write!(
            o,
            "add chain {t} {name} {{ type {ty} hook {hook} priority {prio} ; }}\n\
             flush chain {t} {name}\n"
        );
    }
    let mut created: Vec<&str> = Vec::new();
    for (dst, src, extra) in JUMPS {
        if !created.contains(&dst) {
            created.push(dst);
            let _ = write!(o, "add chain {t} {dst}\nflush chain {t} {dst}\n");
        }
        if !src.is_empty() {
            let _ = writeln!(o, "add rule {t} {src} {extra}jump {dst}");
        }
    }
    let _ = write!(
        o,
        "add rule {t} mark-for-masquerade mark set mark or {MASQ_MARK}\n\
         add rule {t} masquerading mark and {MASQ_MARK} == 0 return\n\
         add rule {t} masquerading mark set mark xor {MASQ_MARK}\n\
         add rule {t} masquerading masquerade fully-random\n\
         add set {t} cluster-ips {{ type {addr_type} ; comment \"Active ClusterIPs\" ; }}\n\
         add rule {t} cluster-ips-check {ipx} daddr @cluster-ips reject \
         comment \"Reject traffic to invalid ports of ClusterIPs\"\n\
         add set {t} nodeport-ips {{ type {addr_type} ; comment \"IPs that accept NodePort traffic\" ; }}\n\
         delete set {t} nodeport-ips\n\
         add map {t} no-endpoint-services {{ type {addr_type} . inet_proto . inet_service : verdict ; \
         comment \"vmap to drop or reject packets to services with no endpoints\" ; }}\n\
         add map {t} no-endpoint-nodeports {{ type inet_proto . inet_service : verdict ; \
         comment \"vmap to drop or reject packets to service nodeports with no endpoints\" ; }}\n\
         add chain {t} reject-chain {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}\n\
         flush chain {t} reject-chain\n\
         add rule {t} reject-chain reject\n\
         add rule {t} service-endpoints-check {ipx} daddr . meta l4proto . th dport vmap @no-endpoint-services\n\
         add rule {t} nodeport-endpoints-check {no_localhost} meta l4proto . th dport \
         vmap @no-endpoint-nodeports\n\
         add map {t} firewall-ips {{ type {addr_type} . inet_proto . inet_service : verdict ; \
         comment \"destinations that are subject to LoadBalancerSourceRanges\" ; }}\n\
         add rule {t} firewall-check {ipx} daddr . meta l4proto . th dport vmap @firewall-ips\n\
         add map {t} service-ips {{ type {addr_type} . inet_proto . inet_service : verdict ; \
         comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }}\n\
         add map {t} service-nodeports {{ type inet_proto . inet_service : verdict ; \
         comment \"NodePort traffic\" ; }}\n\
         add rule {t} services {ipx} daddr . meta l4proto . th dport vmap @service-ips\n\
         add rule {t} services fib daddr type local {no_localhost} meta l4proto . th dport \
         vmap @service-nodeports\n\
         flush set {t} cluster-ips\n\
         flush map {t} service-ips\n\
         flush map {t} firewall-ips\n\
         flush map {t} no-endpoint-services\n\
         flush map {t} no-endpoint-nodeports\n\
         flush map {t} service-nodeports\n"
    );
}
