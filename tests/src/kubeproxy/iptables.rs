//! kube-proxy **v1.31** iptables mode (`pkg/proxy/iptables/proxier.go`,
//! `syncProxyRules` on a full sync) for ClusterIP services and NodePorts with
//! `externalTrafficPolicy: Cluster` or `Local`.
//!
//! Reproduced: the `filter` and `nat` tables kube-proxy restores
//! (`KUBE-SERVICES`, `KUBE-NODEPORTS`, `KUBE-POSTROUTING`, `KUBE-MARK-MASQ`,
//! `KUBE-EXTERNAL-SERVICES`, `KUBE-FORWARD`, `KUBE-PROXY-FIREWALL`,
//! `KUBE-FIREWALL`, one `KUBE-SVC-<hash>` per service port, one
//! `KUBE-EXT-<hash>` per service port with a NodePort, one `KUBE-SVL-<hash>`
//! per eTP Local NodePort with endpoints on this node and one
//! `KUBE-SEP-<hash>` per endpoint), rule for rule and in kube-proxy's order;
//! comments as kube-proxy writes them, including "large cluster mode" (more
//! than 1000 endpoints: no comments on the endpoint rules); probabilities
//! with `%0.10f`; `REJECT` rules for services without endpoints (in
//! `KUBE-SERVICES` for the ClusterIP, in `KUBE-EXTERNAL-SERVICES` with
//! `-m addrtype --dst-type LOCAL` for the NodePort); the jump rules from the
//! built-in chains and the `KUBE-PROXY-CANARY` chains. A NodePort is a
//! `KUBE-NODEPORTS` rule in `nat` to the `KUBE-EXT` chain. With eTP Cluster
//! that chain marks for masquerade and jumps to `KUBE-SVC`. With eTP Local it
//! sends pod traffic (`-s <cluster CIDR>`) to `KUBE-SVC` unmasqueraded,
//! marks traffic from the node itself (`-m addrtype --src-type LOCAL`) for
//! masquerade and sends it to `KUBE-SVC` too, and sends the rest, keeping its
//! source, to `KUBE-SVL`, which dispatches to this node's endpoints only;
//! without any local endpoint there is no `KUBE-SVL` and no fall-through
//! rule, and a `KUBE-EXTERNAL-SERVICES` rule in `filter` drops what the
//! `KUBE-EXT` chain let through ("has no local endpoints"). Filter's
//! `KUBE-NODEPORTS` stays empty: it only accepts health-check ports, which
//! only `type: LoadBalancer` services have.
//!
//! Also the *partial* sync kube-proxy writes after an endpoint change
//! ([`iptables_partial_restore`]).
//!
//! IPv6 services give the IPv6 proxier's `ip6tables-restore` input: the same
//! rules with IPv6 addresses (endpoints as `[ip]:port`), and no localhost
//! NodePort rule in `KUBE-FIREWALL` (localhost NodePorts are IPv4's only).
//!
//! Simplified: kube-proxy installs the jumps from built-in chains with
//! `iptables -I` and restores with `--noflush`; here they are `-A` lines in
//! the order the prepends leave them, in one input for a plain
//! `iptables-restore` (which flushes the tables it names, so load it into a
//! fresh namespace; it also names `mangle`, for the canary chain). The
//! `nfacct` accounting matches v1.31 adds when the kernel offers nfacct
//! (`ct_state_invalid_dropped_pkts`, `localhost_nps_accepted_pkts`) are left
//! out, as kube-proxy does without nfacct (so there is no `-d 127.0.0.0/8`
//! NodePort rule either). With eTP Local the `KUBE-SEP` chains are in
//! endpoint order, as kube-proxy writes them without topology hints or
//! terminating endpoints. No LoadBalancer (so no health-check ports) or
//! externalIPs; no session affinity, internal traffic policy, topology hints
//! or terminating endpoints.

use std::{collections::HashMap, fmt::Write as _, net::SocketAddr};

use super::{Family, MASQ_MARK, SvcSpec, hash_b32};

/// kube-proxy's `largeClusterEndpointsThreshold`.
const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

/// `(table, srcChain, extraArgs, comment, dstChain)` from kube-proxy's
/// `iptablesJumpChains` followed by `iptablesKubeletJumpChains`.
const JUMPS: [(&str, &str, &str, &str, &str); 14] = [
    (
        "filter",
        "INPUT",
        NEW,
        "kubernetes externally-visible service portals",
        "KUBE-EXTERNAL-SERVICES",
    ),
    (
        "filter",
        "FORWARD",
        NEW,
        "kubernetes externally-visible service portals",
        "KUBE-EXTERNAL-SERVICES",
    ),
    (
        "filter",
        "INPUT",
        "",
        "kubernetes health check service ports",
        "KUBE-NODEPORTS",
    ),
    (
        "filter",
        "FORWARD",
        NEW,
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "filter",
        "OUTPUT",
        NEW,
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "filter",
        "FORWARD",
        "",
        "kubernetes forwarding rules",
        "KUBE-FORWARD",
    ),
    (
        "filter",
        "INPUT",
        NEW,
        "kubernetes load balancer firewall",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "filter",
        "OUTPUT",
        NEW,
        "kubernetes load balancer firewall",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "filter",
        "FORWARD",
        NEW,
        "kubernetes load balancer firewall",
        "KUBE-PROXY-FIREWALL",
    ),
    (
        "nat",
        "OUTPUT",
        "",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "nat",
        "PREROUTING",
        "",
        "kubernetes service portals",
        "KUBE-SERVICES",
    ),
    (
        "nat",
        "POSTROUTING",
        "",
        "kubernetes postrouting rules",
        "KUBE-POSTROUTING",
    ),
    ("filter", "INPUT", "", "", "KUBE-FIREWALL"),
    ("filter", "OUTPUT", "", "", "KUBE-FIREWALL"),
];
const NEW: &str = "-m conntrack --ctstate NEW";

/// `iptables-restore` input equivalent to kube-proxy v1.31's full sync of
/// `services` (ClusterIP, plus a NodePort where [`SvcSpec::node_port`] is
/// set, with eTP Cluster or Local), with `cluster_cidr` as `--cluster-cidr`.
/// See the module documentation for what is simplified.
pub fn iptables_restore(services: &[SvcSpec], cluster_cidr: &str) -> String {
    render(services, cluster_cidr, None)
}

/// The `iptables-restore --noflush` input of a v1.31 *partial* sync
/// (`MinimizeIPTablesRestore`) after the endpoints of `changed` (indices into
/// `services`) changed: the top-level filter and nat chains are rewritten
/// whole, `KUBE-SERVICES` and `KUBE-NODEPORTS` with every service's rule, but
/// only the changed services' `KUBE-SVC-*` / `KUBE-EXT-*` / `KUBE-SVL-*` /
/// `KUBE-SEP-*` chains are declared and written (filter's "no local
/// endpoints" rules are rewritten with the rest of filter). In
/// large-cluster mode (more than 1000 endpoints) kube-proxy skips the
/// `iptables-save` that finds stale chains, so the replaced endpoint's chain
/// stays behind, unreferenced, as here. Load with [`super::load_iptables_partial`].
pub fn iptables_partial_restore(
    services: &[SvcSpec],
    changed: &[usize],
    cluster_cidr: &str,
) -> String {
    render(services, cluster_cidr, Some(changed))
}

/// A full sync (`partial: None`), or a partial one rewriting only the
/// per-service chains of the given services.
fn render(services: &[SvcSpec], cluster_cidr: &str, partial: Option<&[usize]>) -> String {
    let total_endpoints: usize = services.iter().map(|s| s.endpoints.len()).sum();
    let large_cluster = total_endpoints > LARGE_CLUSTER_ENDPOINTS;
    let mut probabilities = Probabilities::default();

    // Chain lines and rules are gathered separately, as kube-proxy does.
    let mut nat_chains = String::with_capacity(40 * (services.len() + total_endpoints) + 256);
    let mut nat_rules = String::with_capacity(300 * services.len() + 260 * total_endpoints + 1024);
    let mut filter_rules = String::new();

    let mut o = String::new();
    if partial.is_none() {
        o.push_str("*mangle\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n");
    }
    o.push_str("*filter\n");
    for chain in [
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-NODEPORTS",
        "KUBE-PROXY-FIREWALL",
        // Written when iptables.localhostNodePorts is on (the default), by
        // the IPv4 proxier; declared for IPv6 too, for the jumps to it.
        "KUBE-FIREWALL",
    ] {
        chain_line(&mut o, chain);
    }
    if partial.is_none() {
        chain_line(&mut o, "KUBE-PROXY-CANARY");
        jumps(&mut o, "filter");
    }
    // Localhost NodePorts are IPv4's only: the IPv6 proxier leaves the
    // chain its jumps ensure empty.
    if Family::of_services(services) == Family::V4 {
        filter_rules.push_str(
            "-A KUBE-FIREWALL -m comment --comment \"block incoming localnet connections\" \
             -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT \
             -j DROP\n",
        );
    }

    for chain in [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
    ] {
        chain_line(&mut nat_chains, chain);
    }
    let _ = write!(
        nat_rules,
        "-A KUBE-POSTROUTING -m mark ! --mark {MASQ_MARK}/{MASQ_MARK} -j RETURN\n\
         -A KUBE-POSTROUTING -j MARK --xor-mark {MASQ_MARK}\n\
         -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" \
         -j MASQUERADE --random-fully\n\
         -A KUBE-MARK-MASQ -j MARK --or-mark {MASQ_MARK}\n"
    );

    for (index, svc) in services.iter().enumerate() {
        let proto = svc.proto.as_str();
        let name = svc.port_name_string();
        let (vip, port) = (svc.vip, svc.port);
        let node_port = svc.node_port.as_ref().map(|np| np.port);
        if svc.endpoints.is_empty() {
            // Without any endpoint both policies reject.
            let _ = writeln!(
                filter_rules,
                "-A KUBE-SERVICES -m comment --comment \"{name} has no endpoints\" \
                 -m {proto} -p {proto} -d {vip} --dport {port} -j REJECT"
            );
            if let Some(node_port) = node_port {
                let _ = writeln!(
                    filter_rules,
                    "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"{name} has no endpoints\" \
                     -m addrtype --dst-type LOCAL -m {proto} -p {proto} --dport {node_port} \
                     -j REJECT"
                );
            }
            continue;
        }
        // eTP Local: the indices of this node's endpoints (kube-proxy's
        // `localEndpoints`); `None` for eTP Cluster.
        let local: Option<Vec<usize>> = svc
            .node_port
            .as_ref()
            .and_then(|np| np.local_endpoints())
            .map(|ips| {
                for ip in ips {
                    assert!(
                        svc.endpoints.iter().any(|(ep, _)| ep == ip),
                        "{name}: node endpoint {ip} is not an endpoint"
                    );
                }
                (0..svc.endpoints.len())
                    .filter(|&i| ips.contains(&svc.endpoints[i].0))
                    .collect()
            });
        // `hasExternalEndpoints`: false only for eTP Local without a local
        // endpoint.
        let has_external_endpoints = local.as_ref().is_none_or(|l| !l.is_empty());
        // servicePortPolicyClusterChain, servicePortPolicyLocalChainName and
        // serviceExternalChainName hash the same string.
        let hash = hash_b32(&format!("{name}{proto}"), 16);
        let svc_chain = format!("KUBE-SVC-{hash}");
        // The "external destinations" chain, only for a NodePort here.
        let ext_chain = node_port.map(|_| format!("KUBE-EXT-{hash}"));
        // The local policy chain, only for eTP Local with local endpoints.
        let svl_chain = local
            .as_ref()
            .filter(|l| !l.is_empty())
            .map(|_| format!("KUBE-SVL-{hash}"));
        let match_vip = format!(
            "-m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {vip} --dport {port}"
        );
        let _ = writeln!(nat_rules, "-A KUBE-SERVICES {match_vip} -j {svc_chain}");
        if let (Some(node_port), Some(ext)) = (node_port, &ext_chain) {
            // The localhost variant with `-m nfacct` is written only when the
            // kernel has nfacct (see the module documentation).
            let _ = writeln!(
                nat_rules,
                "-A KUBE-NODEPORTS -m comment --comment {name} -m {proto} -p {proto} \
                 --dport {node_port} -j {ext}"
            );
            if !has_external_endpoints {
                // What the KUBE-EXT chain does not short-circuit is not
                // DNATed: it reaches INPUT, and is dropped there.
                let _ = writeln!(
                    filter_rules,
                    "-A KUBE-EXTERNAL-SERVICES -m comment --comment \"{name} has no local \
                     endpoints\" -m addrtype --dst-type LOCAL -m {proto} -p {proto} \
                     --dport {node_port} -j DROP"
                );
            }
        }
        // A partial sync leaves unchanged services' chains as they are.
        if partial.is_some_and(|changed| !changed.contains(&index)) {
            continue;
        }

        // Chain lines go to their own buffer: the EXT chain's is written
        // before the SVC (and SVL) chain's, its rules after the SVC
        // masquerade rule.
        if let Some(ext) = &ext_chain {
            chain_line(&mut nat_chains, ext);
        }
        chain_line(&mut nat_chains, &svc_chain);
        if let Some(svl) = &svl_chain {
            chain_line(&mut nat_chains, svl);
        }
        let _ = writeln!(
            nat_rules,
            "-A {svc_chain} {match_vip} ! -s {cluster_cidr} -j KUBE-MARK-MASQ"
        );
        if let Some(ext) = &ext_chain {
            if local.is_none() {
                // externalTrafficPolicy: Cluster.
                let _ = write!(
                    nat_rules,
                    "-A {ext} -m comment --comment \"masquerade traffic for {name} external \
                     destinations\" -j KUBE-MARK-MASQ\n\
                     -A {ext} -j {svc_chain}\n"
                );
            } else {
                // externalTrafficPolicy: Local. Pods (short-circuited as if
                // they had gone out to a load balancer and back) and the node
                // itself (masqueraded: its source is a local address) reach
                // every endpoint; the rest keeps its source and goes to the
                // local ones, or is dropped in filter without any.
                let _ = write!(
                    nat_rules,
                    "-A {ext} -m comment --comment \"pod traffic for {name} external \
                     destinations\" -s {cluster_cidr} -j {svc_chain}\n\
                     -A {ext} -m comment --comment \"masquerade LOCAL traffic for {name} \
                     external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ\n\
                     -A {ext} -m comment --comment \"route LOCAL traffic for {name} external \
                     destinations\" -m addrtype --src-type LOCAL -j {svc_chain}\n"
                );
                if let Some(svl) = &svl_chain {
                    let _ = writeln!(nat_rules, "-A {ext} -j {svl}");
                }
            }
        }
        let eps: Vec<(String, String)> = svc
            .endpoints
            .iter()
            .map(|&(ip, port)| {
                // `[ip]:port` for IPv6, as Go's `net.JoinHostPort`.
                let ep = SocketAddr::new(ip, port).to_string();
                let chain = format!("KUBE-SEP-{}", hash_b32(&format!("{name}{proto}{ep}"), 16));
                (ep, chain)
            })
            .collect();
        let all: Vec<&(String, String)> = eps.iter().collect();
        let dispatch = Dispatch {
            name: &name,
            large_cluster,
        };
        dispatch.write(&mut nat_rules, &mut probabilities, &svc_chain, &all);
        if let (Some(svl), Some(local)) = (&svl_chain, &local) {
            let local: Vec<&(String, String)> = local.iter().map(|&i| &eps[i]).collect();
            dispatch.write(&mut nat_rules, &mut probabilities, svl, &local);
        }
        // kube-proxy's `allLocallyReachableEndpoints`: without topology hints
        // or terminating endpoints the cluster endpoints, which include the
        // local ones.
        for ((ip, _), (ep, sep)) in svc.endpoints.iter().zip(&eps) {
            chain_line(&mut nat_chains, sep);
            let comment = if large_cluster {
                String::new()
            } else {
                format!("-m comment --comment {name} ")
            };
            let _ = write!(
                nat_rules,
                "-A {sep} {comment}-s {ip} -j KUBE-MARK-MASQ\n\
                 -A {sep} {comment}-m {proto} -p {proto} -j DNAT --to-destination {ep}\n"
            );
        }
    }

    // "Finally, tail-call to the nodePorts chain."
    nat_rules.push_str(
        "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must \
         be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n",
    );
    // nf_conntrack_tcp_be_liberal is off by default.
    let _ = write!(
        filter_rules,
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n\
         -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" \
         -m mark --mark {MASQ_MARK}/{MASQ_MARK} -j ACCEPT\n\
         -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" \
         -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n"
    );

    o.push_str(&filter_rules);
    o.push_str("COMMIT\n*nat\n");
    o.push_str(&nat_chains);
    if partial.is_none() {
        chain_line(&mut o, "KUBE-PROXY-CANARY");
        jumps(&mut o, "nat");
    }
    o.push_str(&nat_rules);
    o.push_str("COMMIT\n");
    o
}

/// kube-proxy's `writeServiceToEndpointRules` for one service port (no
/// session affinity): the random-probability jumps from a policy chain
/// (`KUBE-SVC` or `KUBE-SVL`) to its endpoints' `KUBE-SEP` chains.
struct Dispatch<'a> {
    /// `ServicePortName.String()`.
    name: &'a str,
    large_cluster: bool,
}

impl Dispatch<'_> {
    /// `eps`: `(ip:port, KUBE-SEP chain)`, in order.
    fn write(
        &self,
        rules: &mut String,
        probabilities: &mut Probabilities,
        chain: &str,
        eps: &[&(String, String)],
    ) {
        let n = eps.len();
        for (i, (ep, sep)) in eps.iter().enumerate() {
            let _ = write!(rules, "-A {chain} ");
            if !self.large_cluster {
                let _ = write!(rules, "-m comment --comment \"{} -> {ep}\" ", self.name);
            }
            if i < n - 1 {
                let _ = write!(
                    rules,
                    "-m statistic --mode random --probability {} ",
                    probabilities.get(n - i)
                );
            }
            let _ = writeln!(rules, "-j {sep}");
        }
    }
}

fn chain_line(o: &mut String, chain: &str) {
    let _ = writeln!(o, ":{chain} - [0:0]");
}

/// The jumps from built-in chains of `table`, in the order that prepending
/// them one by one (`EnsureRule(Prepend, ...)`) leaves them.
fn jumps(o: &mut String, table: &str) {
    for (_, src, extra, comment, dst) in JUMPS.iter().rev().filter(|j| j.0 == table) {
        let _ = write!(o, "-A {src} ");
        if !extra.is_empty() {
            let _ = write!(o, "{extra} ");
        }
        if !comment.is_empty() {
            let _ = write!(o, "-m comment --comment \"{comment}\" ");
        }
        let _ = writeln!(o, "-j {dst}");
    }
}

/// kube-proxy's `computeProbability`, `fmt.Sprintf("%0.10f", 1.0/float64(n))`,
/// cached like its `precomputedProbabilities`.
#[derive(Default)]
struct Probabilities(HashMap<usize, String>);

impl Probabilities {
    fn get(&mut self, n: usize) -> &str {
        self.0
            .entry(n)
            .or_insert_with(|| format!("{:.10}", 1.0 / n as f64))
    }
}
