//! kube-proxy's rule layouts, regenerated offline, so that benchmarks can
//! compare our LB against the datapath kube-proxy would program.
//!
//! * [`iptables_restore`]: the `iptables` mode of kube-proxy **v1.31**
//!   (`pkg/proxy/iptables/proxier.go`), as `iptables-restore` input.
//! * [`nft_ruleset`]: the `nftables` mode of kube-proxy **v1.31**
//!   (`pkg/proxy/nftables/proxier.go`), as `nft -f` input.
//! * [`iptables_partial_restore`], [`nft_partial_sync`]: what each mode
//!   writes on the partial sync that follows an endpoint change.
//!
//! Both reproduce a sync of a node that has ClusterIP services, some of them
//! with a NodePort ([`SvcSpec::node_port`]) and `externalTrafficPolicy:
//! Cluster` (the iptables layout also `Local`, [`ExternalPolicy`]), with
//! kube-proxy's defaults: masquerade bit 14 (mark `0x00004000`, which is
//! how kube-proxy's `%#08x` prints it), `--cluster-cidr` local-traffic
//! detection, no `--masquerade-all`, empty `--nodeport-addresses` (so all
//! local addresses accept NodePorts). Either family: kube-proxy runs one
//! proxier per family with the same rule shapes, and so the generators write
//! the `ip6tables-restore` input or the `table ip6` of IPv6 services (all of
//! one call's services are of one [`Family`]). Chain names are kube-proxy's
//! exact sha256/base32 names. Services are written in input order (kube-proxy
//! iterates a Go map, i.e. in random order), so a benchmark can put the
//! service it measures last: the worst case for the linear `KUBE-SERVICES`
//! chain. LoadBalancer and externalIPs are not reproduced, nor eTP Local in
//! the nftables layout; what else each layout simplifies is listed in its
//! module.
//!
//! Load the output only into a network namespace the test created
//! ([`load_iptables`], [`load_nft`]); never into the root namespace.

mod iptables;
mod nftables;

use std::{
    io::Write as _,
    net::{IpAddr, Ipv4Addr},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail, ensure};

pub use iptables::{iptables_partial_restore, iptables_restore};
pub use nftables::{nft_delete_chains, nft_endpoint_chain, nft_partial_sync, nft_ruleset};

/// kube-proxy's masquerade mark: `fmt.Sprintf("%#08x", 1<<14)`.
pub const MASQ_MARK: &str = "0x00004000";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// Lower case, as kube-proxy uses it in rules and chain-name hashes.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One service port (kube-proxy's `ServicePortName` + ClusterIP, and
/// optionally its NodePort) and its ready endpoints, in the order kube-proxy
/// would list them.
#[derive(Clone, Debug)]
pub struct SvcSpec {
    pub namespace: String,
    pub name: String,
    /// The service port's name; may be empty (single-port services).
    pub port_name: String,
    /// The cluster IP; its family is the family of the endpoints too.
    pub vip: IpAddr,
    pub port: u16,
    pub proto: Proto,
    pub endpoints: Vec<(IpAddr, u16)>,
    /// The service port's NodePort and `externalTrafficPolicy` (a `u16`
    /// converts to an eTP Cluster one); `None`: ClusterIP only.
    pub node_port: Option<NodePort>,
}

/// A service port's NodePort (service `type: NodePort`) and its
/// `externalTrafficPolicy`, as seen from the node the rules are generated
/// for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePort {
    /// Any port number: the generators do not assume the apiserver's default
    /// 30000-32767 range.
    pub port: u16,
    pub policy: ExternalPolicy,
}

/// `externalTrafficPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ExternalPolicy {
    /// `Cluster` (the default): external traffic is masqueraded and may go to
    /// any endpoint.
    #[default]
    Cluster,
    /// `Local`: traffic from outside the node keeps its source address and
    /// goes only to the endpoints running on this node, which are the
    /// [`SvcSpec::endpoints`] whose IP is in `node_endpoints` (kube-proxy's
    /// endpoints whose `nodeName` is this node). Empty: the node has none, so
    /// such traffic is dropped. Traffic from pods (`--cluster-cidr`) or from
    /// the node itself still goes to every endpoint.
    Local { node_endpoints: Vec<IpAddr> },
}

impl NodePort {
    /// `externalTrafficPolicy: Cluster`.
    pub fn cluster(port: u16) -> Self {
        Self {
            port,
            policy: ExternalPolicy::Cluster,
        }
    }

    /// `externalTrafficPolicy: Local`, on a node running the endpoints with
    /// these IPs.
    pub fn local(port: u16, node_endpoints: impl IntoIterator<Item = impl Into<IpAddr>>) -> Self {
        Self {
            port,
            policy: ExternalPolicy::Local {
                node_endpoints: node_endpoints.into_iter().map(Into::into).collect(),
            },
        }
    }

    /// The IPs of this node's endpoints with eTP Local; `None` with eTP
    /// Cluster.
    pub fn local_endpoints(&self) -> Option<&[IpAddr]> {
        match &self.policy {
            ExternalPolicy::Cluster => None,
            ExternalPolicy::Local { node_endpoints } => Some(node_endpoints),
        }
    }
}

impl From<u16> for NodePort {
    /// An eTP Cluster NodePort.
    fn from(port: u16) -> Self {
        Self::cluster(port)
    }
}

/// An address family: kube-proxy runs one proxier, with one table, per
/// family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    pub fn of(ip: IpAddr) -> Self {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// `IPv4` or `IPv6`, as the API names it.
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// The one family of `services`' addresses (IPv4 for none): a proxier
    /// sees only the services and endpoints of its own family.
    fn of_services(services: &[SvcSpec]) -> Self {
        let family = services.first().map_or(Family::V4, |s| Family::of(s.vip));
        for s in services {
            assert!(
                std::iter::once(s.vip)
                    .chain(s.endpoints.iter().map(|(ip, _)| *ip))
                    .all(|ip| Family::of(ip) == family),
                "{}: addresses of one family only",
                s.port_name_string()
            );
        }
        family
    }
}

impl SvcSpec {
    /// `ServicePortName.String()`: `ns/name:port`, or `ns/name` without a
    /// port name.
    pub fn port_name_string(&self) -> String {
        if self.port_name.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            format!("{}/{}:{}", self.namespace, self.name, self.port_name)
        }
    }
}

/// `n` filler services `bench/svc-<i>:http` (TCP port 80) with `e` endpoints
/// each (port 8080). VIPs count up from 10.96.0.1 and endpoints from
/// 10.128.0.1 (0.0 and .255 host bytes included: they are only matched, never
/// sent to). Append the service under test after these to make it last.
/// They are ClusterIP only; [`filler_node_ports`] gives them NodePorts.
pub fn filler_services(n: usize, e: usize) -> Vec<SvcSpec> {
    let vip_base = u32::from(Ipv4Addr::new(10, 96, 0, 1));
    let ep_base = u32::from(Ipv4Addr::new(10, 128, 0, 1));
    assert!(n < (1 << 20) && n * e < (1 << 22), "filler range exhausted");
    (0..n)
        .map(|i| SvcSpec {
            namespace: "bench".into(),
            name: format!("svc-{i}"),
            port_name: "http".into(),
            vip: Ipv4Addr::from(vip_base + i as u32).into(),
            port: 80,
            proto: Proto::Tcp,
            endpoints: (0..e)
                .map(|j| (Ipv4Addr::from(ep_base + (i * e + j) as u32).into(), 8080))
                .collect(),
            node_port: None,
        })
        .collect()
}

/// [`filler_services`] with eTP Cluster NodePorts `first_port`,
/// `first_port + 1`, ... (e.g. 20000.. for 10,000 services: any range that
/// fits in a `u16`).
pub fn filler_node_ports(n: usize, e: usize, first_port: u16) -> Vec<SvcSpec> {
    let mut services = filler_services(n, e);
    for (i, s) in services.iter_mut().enumerate() {
        let port = u16::try_from(usize::from(first_port) + i).expect("NodePort range exhausted");
        s.node_port = Some(port.into());
    }
    services
}

/// Loads `rules` with `iptables-restore` (which flushes the tables it names)
/// inside `netns`.
pub fn load_iptables(netns: &str, rules: &str) -> anyhow::Result<()> {
    in_netns(netns, &["iptables-restore"], rules)
}

/// [`load_iptables`] of IPv6 services' rules, with `ip6tables-restore`.
pub fn load_ip6tables(netns: &str, rules: &str) -> anyhow::Result<()> {
    in_netns(netns, &["ip6tables-restore"], rules)
}

/// Applies a partial sync's `rules` inside `netns` as kube-proxy v1.31 does:
/// `iptables-restore -w 5 -W 100000 --noflush --counters`.
pub fn load_iptables_partial(netns: &str, rules: &str) -> anyhow::Result<()> {
    in_netns(
        netns,
        &[
            "iptables-restore",
            "-w",
            "5",
            "-W",
            "100000",
            "--noflush",
            "--counters",
        ],
        rules,
    )
}

/// Loads `ruleset` with `nft -f -` inside `netns` (knftables runs every
/// transaction this way: one `nft` process, one netlink batch).
pub fn load_nft(netns: &str, ruleset: &str) -> anyhow::Result<()> {
    in_netns(netns, &["nft", "-f", "-"], ruleset)
}

/// `nft --json list <what> ip` inside `netns`, as knftables' `List` runs it
/// (kube-proxy v1.31 lists `chains` and `sets` on every sync to find stale
/// ones).
pub fn nft_list(netns: &str, what: &str) -> anyhow::Result<()> {
    ensure!(!netns.is_empty(), "refusing to list rules without a netns");
    crate::netns::exec(netns, &["nft", "--json", "list", what, "ip"]).map(drop)
}

fn in_netns(netns: &str, cmd: &[&str], stdin: &str) -> anyhow::Result<()> {
    // An empty name would make `ip netns exec` fail, but be explicit: rules
    // must never reach the root namespace.
    ensure!(!netns.is_empty(), "refusing to load rules without a netns");
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns])
        .args(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running ip netns exec")?;
    let mut input = child.stdin.take().expect("piped");
    let written = input.write_all(stdin.as_bytes());
    drop(input);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{} in {netns}: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    written.context("writing rules")?;
    Ok(())
}

/// SHA-256 (FIPS 180-4); kube-proxy names chains after it.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = Vec::with_capacity(data.len() + 72);
    msg.extend_from_slice(data);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (wi, word) in w.iter_mut().zip(block.chunks_exact(4)) {
            *wi = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for (k, wi) in K.iter().zip(w) {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(*k)
                .wrapping_add(wi);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (hv, v) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *hv = hv.wrapping_add(v);
        }
    }
    let mut out = [0u8; 32];
    for (o, hv) in out.chunks_exact_mut(4).zip(h) {
        o.copy_from_slice(&hv.to_be_bytes());
    }
    out
}

/// The first `n` characters of `base32.StdEncoding.EncodeToString(sha256(s))`.
fn hash_b32(s: &str, n: usize) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    debug_assert!(n <= 51);
    let hash = sha256(s.as_bytes());
    (0..n)
        .map(|i| {
            let bit = i * 5;
            let hi = u16::from(hash[bit / 8]) << 8;
            let lo = hash.get(bit / 8 + 1).copied().map_or(0, u16::from);
            let v = ((hi | lo) >> (11 - bit % 8)) & 0x1f;
            ALPHABET[v as usize] as char
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn svc(ns: &str, name: &str, port: &str, vip: [u8; 4], eps: &[[u8; 4]]) -> SvcSpec {
        SvcSpec {
            namespace: ns.into(),
            name: name.into(),
            port_name: port.into(),
            vip: vip.into(),
            port: 80,
            proto: Proto::Tcp,
            endpoints: eps.iter().map(|ip| ((*ip).into(), 80)).collect(),
            node_port: None,
        }
    }

    fn node_port_svc(
        ns: &str,
        name: &str,
        vip: [u8; 4],
        node_port: u16,
        eps: &[[u8; 4]],
    ) -> SvcSpec {
        SvcSpec {
            node_port: Some(node_port.into()),
            ..svc(ns, name, "p80", vip, eps)
        }
    }

    /// [`node_port_svc`] with eTP Local, on a node running the endpoints
    /// `local`.
    fn local_node_port_svc(
        ns: &str,
        name: &str,
        vip: [u8; 4],
        node_port: u16,
        eps: &[[u8; 4]],
        local: &[[u8; 4]],
    ) -> SvcSpec {
        SvcSpec {
            node_port: Some(NodePort::local(
                node_port,
                local.iter().map(|ip| Ipv4Addr::from(*ip)),
            )),
            ..svc(ns, name, "p80", vip, eps)
        }
    }

    /// The lines of `out`'s `nat` table (chain lines and rules) that belong
    /// to services, and of its `filter` table that are not the fixed rules.
    fn service_lines(out: &str) -> (Vec<&str>, Vec<&str>) {
        let nat_at = out.find("*nat\n").expect("nat");
        let filter = out[..nat_at]
            .lines()
            .filter(|l| {
                l.starts_with("-A KUBE-")
                    && !l.starts_with("-A KUBE-FORWARD ")
                    && !l.starts_with("-A KUBE-FIREWALL ")
            })
            .collect();
        let nat = out[nat_at..]
            .lines()
            .filter(|l| {
                ["KUBE-EXT-", "KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-"]
                    .iter()
                    .any(|c| l.starts_with(&format!(":{c}")) || l.starts_with(&format!("-A {c}")))
                    || l.starts_with("-A KUBE-SERVICES ")
                    || l.starts_with("-A KUBE-NODEPORTS ")
            })
            .collect();
        (nat, filter)
    }

    #[test]
    fn sha256_matches_the_standard_vectors() {
        let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(sha256(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Two blocks (56 bytes of input force the length into a second one).
        assert_eq!(
            hex(sha256(
                b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
            )),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    /// Chain names from kube-proxy's own test fixtures (proxier_test.go,
    /// service ns1/svc1 port p80 with endpoint 10.180.0.1:80).
    #[test]
    fn chain_names_match_kube_proxy_fixtures() {
        let s = svc("ns1", "svc1", "p80", [172, 30, 0, 41], &[[10, 180, 0, 1]]);
        let ipt = iptables_restore(std::slice::from_ref(&s), "10.0.0.0/8");
        assert!(
            ipt.contains(":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]\n"),
            "{ipt}"
        );
        assert!(
            ipt.contains(":KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]\n"),
            "{ipt}"
        );
        let nft = nft_ruleset(&[s], "10.0.0.0/8");
        assert!(
            nft.contains(
                "add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 \
                 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade\n"
            ),
            "{nft}"
        );
        assert!(
            nft.contains(
                "add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 \
                 meta l4proto tcp dnat to 10.180.0.1:80\n"
            ),
            "{nft}"
        );
    }

    /// The two-endpoint dispatch rule of kube-proxy's fixture service ns4/svc4.
    #[test]
    fn nft_dispatch_matches_kube_proxy_fixture() {
        let s = svc(
            "ns4",
            "svc4",
            "p80",
            [172, 30, 0, 44],
            &[[10, 180, 0, 4], [10, 180, 0, 5]],
        );
        let nft = nft_ruleset(&[s], "10.0.0.0/8");
        assert!(
            nft.contains(
                "add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 numgen random mod 2 vmap \
                 { 0 : goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 , \
                 1 : goto endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 }\n"
            ),
            "{nft}"
        );
    }

    #[test]
    fn iptables_service_chain_is_kube_proxys() {
        let s = svc(
            "ns1",
            "svc1",
            "p80",
            [172, 30, 0, 41],
            &[[10, 180, 0, 1], [10, 180, 0, 2], [10, 180, 0, 3]],
        );
        let out = iptables_restore(&[s], "10.0.0.0/8");
        let chain: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SVC-XPGD46QRK7WJZT7O "))
            .collect();
        let comment = "-m comment --comment";
        assert_eq!(
            chain,
            [
                format!(
                    "-A KUBE-SVC-XPGD46QRK7WJZT7O {comment} \"ns1/svc1:p80 cluster IP\" \
                     -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ"
                ),
                format!(
                    "-A KUBE-SVC-XPGD46QRK7WJZT7O {comment} \"ns1/svc1:p80 -> 10.180.0.1:80\" \
                     -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-SXIVWICOYRO3J4NJ"
                ),
                format!(
                    "-A KUBE-SVC-XPGD46QRK7WJZT7O {comment} \"ns1/svc1:p80 -> 10.180.0.2:80\" \
                     -m statistic --mode random --probability 0.5000000000 -j {}",
                    sep_chain(&out, "10.180.0.2")
                ),
                format!(
                    "-A KUBE-SVC-XPGD46QRK7WJZT7O {comment} \"ns1/svc1:p80 -> 10.180.0.3:80\" -j {}",
                    sep_chain(&out, "10.180.0.3")
                ),
            ]
        );
        assert!(out.contains(
            "-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 \
             -j KUBE-MARK-MASQ\n-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 \
             -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80\n"
        ));
    }

    /// The KUBE-SEP chain whose DNAT goes to `ip`.
    fn sep_chain(out: &str, ip: &str) -> String {
        let dnat = format!("--to-destination {ip}:");
        let line = out.lines().find(|l| l.contains(&dnat)).expect("dnat rule");
        line.split_whitespace().nth(1).expect("chain").to_owned()
    }

    #[test]
    fn input_order_is_kept_and_the_last_service_is_the_last_portal() {
        let mut services = filler_services(3, 2);
        services.push(svc("ns", "last", "p", [10, 96, 9, 9], &[[10, 1, 1, 1]]));
        let out = iptables_restore(&services, "10.0.0.0/8");
        let portals: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SERVICES "))
            .collect();
        assert_eq!(portals.len(), 5, "{out}");
        for (i, p) in portals[..3].iter().enumerate() {
            assert!(
                p.contains(&format!("\"bench/svc-{i}:http cluster IP\"")),
                "{p}"
            );
        }
        assert!(
            portals[3].contains("-d 10.96.9.9 --dport 80"),
            "{}",
            portals[3]
        );
        assert_eq!(
            portals[4],
            "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this \
             must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
        );
        let nft = nft_ruleset(&services, "10.0.0.0/8");
        let elems: Vec<&str> = nft
            .lines()
            .filter(|l| l.starts_with("add element ip kube-proxy service-ips "))
            .collect();
        assert_eq!(elems.len(), 4);
        assert!(elems[3].contains("{ 10.96.9.9 . tcp . 80 : goto service-"));
    }

    #[test]
    fn services_without_endpoints_are_rejected_like_kube_proxy() {
        let s = svc("ns1", "svc6", "p80", [172, 30, 0, 46], &[]);
        let ipt = iptables_restore(std::slice::from_ref(&s), "10.0.0.0/8");
        assert!(ipt.contains(
            "-A KUBE-SERVICES -m comment --comment \"ns1/svc6:p80 has no endpoints\" -m tcp -p tcp \
             -d 172.30.0.46 --dport 80 -j REJECT\n"
        ));
        assert!(!ipt.contains("KUBE-SVC-"));
        let nft = nft_ruleset(&[s], "10.0.0.0/8");
        assert!(nft.contains(
            "add element ip kube-proxy no-endpoint-services { 172.30.0.46 . tcp . 80 comment \
             \"ns1/svc6:p80\" : goto reject-chain }\n"
        ));
        assert!(nft.contains("add element ip kube-proxy cluster-ips { 172.30.0.46 }\n"));
        assert!(!nft.contains("service-ips { 172.30.0.46"));
    }

    /// kube-proxy's `TestNodePort` (iptables proxier_test.go): ns1/svc1:p80,
    /// ClusterIP 172.30.0.41, NodePort 3001, endpoint 10.180.0.1:80, eTP
    /// Cluster. Its expected output is sorted; the order checked here is the
    /// one `syncProxyRules` writes.
    #[test]
    fn iptables_node_port_matches_kube_proxy_fixture() {
        let s = node_port_svc("ns1", "svc1", [172, 30, 0, 41], 3001, &[[10, 180, 0, 1]]);
        let out = iptables_restore(&[s], "10.0.0.0/8");
        let nat = &out[out.find("*nat\n").expect("nat")..];
        let chains: Vec<&str> = nat
            .lines()
            .filter(|l| l.starts_with(":KUBE-EXT-") || l.starts_with(":KUBE-SVC-"))
            .collect();
        assert_eq!(
            chains,
            [
                ":KUBE-EXT-XPGD46QRK7WJZT7O - [0:0]",
                ":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]"
            ]
        );
        let rules: Vec<&str> = nat
            .lines()
            .filter(|l| {
                l.starts_with("-A KUBE-SERVICES ")
                    || l.starts_with("-A KUBE-NODEPORTS ")
                    || l.starts_with("-A KUBE-EXT-")
                    || l.starts_with("-A KUBE-SVC-")
            })
            .collect();
        assert_eq!(
            rules,
            [
                "-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp \
                 -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O",
                "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 \
                 -j KUBE-EXT-XPGD46QRK7WJZT7O",
                "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" \
                 -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ",
                "-A KUBE-EXT-XPGD46QRK7WJZT7O -m comment --comment \"masquerade traffic for \
                 ns1/svc1:p80 external destinations\" -j KUBE-MARK-MASQ",
                "-A KUBE-EXT-XPGD46QRK7WJZT7O -j KUBE-SVC-XPGD46QRK7WJZT7O",
                "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> \
                 10.180.0.1:80\" -j KUBE-SEP-SXIVWICOYRO3J4NJ",
                "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this \
                 must be the last rule in this chain\" -m addrtype --dst-type LOCAL \
                 -j KUBE-NODEPORTS",
            ]
        );
        // eTP Cluster: nothing in filter but the fixed rules.
        let filter = &out[..out.find("*nat\n").expect("nat")];
        assert!(!filter.contains("-A KUBE-NODEPORTS"), "{filter}");
        assert!(!filter.contains("-A KUBE-EXTERNAL-SERVICES"), "{filter}");
        assert!(!filter.contains("svc1"), "{filter}");

        // TestOverallIPTablesRules' ns3/svc3 (NodePort 3003).
        let s = node_port_svc("ns3", "svc3", [172, 30, 0, 43], 3003, &[[10, 180, 0, 3]]);
        let out = iptables_restore(&[s], "10.0.0.0/8");
        for line in [
            ":KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]",
            ":KUBE-SEP-OYPFS5VJICHGATKP - [0:0]",
            "-A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 \
             -j KUBE-EXT-X27LE4BHSL4DOUIK",
            "-A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment \"masquerade traffic for \
             ns3/svc3:p80 external destinations\" -j KUBE-MARK-MASQ",
            "-A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK",
        ] {
            assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        }
    }

    /// kube-proxy's `TestOverallNFTablesRules` (nftables proxier_test.go):
    /// ns3/svc3:p80, ClusterIP 172.30.0.43, NodePort 3003, endpoint
    /// 10.180.0.3:80. Its expected dump is grouped by object; the order here
    /// is the transaction's.
    #[test]
    fn nft_node_port_matches_kube_proxy_fixture() {
        let s = node_port_svc("ns3", "svc3", [172, 30, 0, 43], 3003, &[[10, 180, 0, 3]]);
        let nft = nft_ruleset(&[s], "10.0.0.0/8");
        let svc = &nft[nft.find("add chain ip kube-proxy endpoint-").expect("svc")..];
        let ep = "endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80";
        let chain = "service-4AT6LBPK-ns3/svc3/tcp/p80";
        let ext = "external-4AT6LBPK-ns3/svc3/tcp/p80";
        let t = "ip kube-proxy";
        assert_eq!(
            svc.lines().collect::<Vec<_>>(),
            [
                format!("add chain {t} {ep}"),
                format!("flush chain {t} {ep}"),
                format!("add chain {t} {chain}"),
                format!("flush chain {t} {chain}"),
                format!("add chain {t} {ext}"),
                format!("flush chain {t} {ext}"),
                format!("add element {t} cluster-ips {{ 172.30.0.43 }}"),
                format!("add element {t} service-ips {{ 172.30.0.43 . tcp . 80 : goto {chain} }}"),
                format!("add element {t} service-nodeports {{ tcp . 3003 : goto {ext} }}"),
                format!(
                    "add rule {t} {chain} ip daddr 172.30.0.43 tcp dport 80 \
                     ip saddr != 10.0.0.0/8 jump mark-for-masquerade"
                ),
                format!("add rule {t} {ext} jump mark-for-masquerade"),
                format!("add rule {t} {ext} goto {chain}"),
                format!("add rule {t} {chain} numgen random mod 1 vmap {{ 0 : goto {ep} }}"),
                format!("add rule {t} {ep} ip saddr 10.180.0.3 jump mark-for-masquerade"),
                format!("add rule {t} {ep} meta l4proto tcp dnat to 10.180.0.3:80"),
            ]
        );
    }

    /// kube-proxy's IPv6 fixture of `TestNodePorts` (nftables):
    /// ns1/svc1:p80, ClusterIP fd00:172:30::41, NodePort 3001, endpoints
    /// fd00:10:180::1 and fd00:10:180::2:1 port 80, cluster CIDR
    /// fd00:10::/64. Its dump is sorted; these are its lines of the service.
    #[test]
    fn nft_ipv6_node_port_matches_kube_proxy_fixture() {
        let s = SvcSpec {
            vip: "fd00:172:30::41".parse().expect("vip"),
            endpoints: ["fd00:10:180::1", "fd00:10:180::2:1"]
                .map(|ip| (ip.parse().expect("ip"), 80))
                .into(),
            ..node_port_svc("ns1", "svc1", [0; 4], 3001, &[])
        };
        let nft = nft_ruleset(&[s], "fd00:10::/64");
        let t = "ip6 kube-proxy";
        let chain = "service-ULMVA6XW-ns1/svc1/tcp/p80";
        let ext = "external-ULMVA6XW-ns1/svc1/tcp/p80";
        let ep1 = "endpoint-ZVRFLKHO-ns1/svc1/tcp/p80__fd00.10.180..1/80";
        let ep2 = "endpoint-2CRNCTTE-ns1/svc1/tcp/p80__fd00.10.180..2.1/80";
        for line in [
            format!("add chain {t} {ep1}"),
            format!("add chain {t} {ep2}"),
            format!(
                "add set {t} cluster-ips {{ type ipv6_addr ; comment \"Active ClusterIPs\" ; }}"
            ),
            format!("add rule {t} {ep2} ip6 saddr fd00:10:180::2:1 jump mark-for-masquerade"),
            format!("add rule {t} {ep2} meta l4proto tcp dnat to [fd00:10:180::2:1]:80"),
            format!("add rule {t} {ep1} meta l4proto tcp dnat to [fd00:10:180::1]:80"),
            format!("add rule {t} {ext} goto {chain}"),
            format!(
                "add rule {t} {chain} ip6 daddr fd00:172:30::41 tcp dport 80 \
                 ip6 saddr != fd00:10::/64 jump mark-for-masquerade"
            ),
            format!(
                "add rule {t} {chain} numgen random mod 2 vmap {{ 0 : goto {ep1} , 1 : goto {ep2} }}"
            ),
            format!(
                "add rule {t} service-endpoints-check ip6 daddr . meta l4proto . th dport vmap @no-endpoint-services"
            ),
            format!("add element {t} cluster-ips {{ fd00:172:30::41 }}"),
            format!("add element {t} service-ips {{ fd00:172:30::41 . tcp . 80 : goto {chain} }}"),
            format!("add element {t} service-nodeports {{ tcp . 3001 : goto {ext} }}"),
        ] {
            assert!(nft.lines().any(|l| l == line), "no {line:?} in\n{nft}");
        }
        assert!(!nft.contains(" ip "), "{nft}");
    }

    /// The IPv6 proxier's iptables layout: the IPv4 one with IPv6
    /// addresses, `[ip]:port` endpoints (in the `KUBE-SEP` hashes too), and
    /// no localhost NodePort rule.
    #[test]
    fn ip6tables_layout_is_ipv4s_with_ipv6_addresses() {
        let s = SvcSpec {
            vip: "fd00:172:30::41".parse().expect("vip"),
            endpoints: vec![("fd00:10:180::1".parse().expect("ip"), 80)],
            ..node_port_svc("ns1", "svc1", [0; 4], 3001, &[])
        };
        let out = iptables_restore(&[s], "fd00:10::/64");
        let sep = format!(
            "KUBE-SEP-{}",
            hash_b32("ns1/svc1:p80tcp[fd00:10:180::1]:80", 16)
        );
        for line in [
            "-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp \
             -d fd00:172:30::41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O"
                .to_owned(),
            format!(
                "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> [fd00:10:180::1]:80\" -j {sep}"
            ),
            format!(
                "-A {sep} -m comment --comment ns1/svc1:p80 -s fd00:10:180::1 -j KUBE-MARK-MASQ"
            ),
            format!(
                "-A {sep} -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT \
                 --to-destination [fd00:10:180::1]:80"
            ),
        ] {
            assert!(out.lines().any(|l| l == line), "no {line:?} in\n{out}");
        }
        assert!(!out.contains("127.0.0.0/8"), "{out}");
        assert!(out.contains(":KUBE-FIREWALL - [0:0]"), "{out}");
    }

    #[test]
    #[should_panic(expected = "addresses of one family only")]
    fn families_are_not_mixed() {
        let mut s = svc("ns1", "svc1", "p80", [172, 30, 0, 41], &[]);
        s.endpoints = vec![("fd00::1".parse().expect("ip"), 80)];
        iptables_restore(&[s], "10.0.0.0/8");
    }

    /// kube-proxy's `TestHealthCheckNodePort` (iptables): ns1/svc1:p80 with
    /// NodePort 3001 and no endpoints is rejected on the NodePort too (that
    /// service is eTP Local, but without any endpoint both policies write the
    /// same `REJECT`; its health-check rule is eTP Local's and not here).
    #[test]
    fn node_ports_without_endpoints_are_rejected_like_kube_proxy() {
        let s = node_port_svc("ns1", "svc1", [172, 30, 0, 42], 3001, &[]);
        let ipt = iptables_restore(std::slice::from_ref(&s), "10.0.0.0/8");
        assert!(ipt.contains(
            "-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 has no endpoints\" -m tcp -p tcp \
             -d 172.30.0.42 --dport 80 -j REJECT\n\
             -A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns1/svc1:p80 has no endpoints\" \
             -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j REJECT\n"
        ));
        assert!(!ipt.contains("KUBE-EXT-"), "{ipt}");
        assert!(!ipt.contains("-A KUBE-NODEPORTS"), "{ipt}");
        let nft = nft_ruleset(&[s], "10.0.0.0/8");
        assert!(nft.contains(
            "add element ip kube-proxy no-endpoint-services { 172.30.0.42 . tcp . 80 comment \
             \"ns1/svc1:p80\" : goto reject-chain }\n\
             add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment \
             \"ns1/svc1:p80\" : goto reject-chain }\n"
        ));
        assert!(!nft.contains("external-"), "{nft}");
        assert!(
            !nft.contains("add element ip kube-proxy service-nodeports"),
            "{nft}"
        );
    }

    /// kube-proxy's `TestOnlyLocalNodePorts` (iptables proxier_test.go):
    /// ns1/svc1:p80, ClusterIP 172.30.0.41, NodePort 3001 with eTP Local,
    /// endpoints 10.180.0.1:80 (on another node) and 10.180.2.1:80 (on this
    /// one), `--cluster-cidr` 10.0.0.0/8. Its expected output is sorted (and
    /// its `--nodeport-addresses` is 192.168.0.0/24, so its tail rule is
    /// `-d 192.168.0.2`); the order checked here is the one `syncProxyRules`
    /// writes.
    #[test]
    fn iptables_local_node_port_matches_kube_proxy_fixture() {
        let s = local_node_port_svc(
            "ns1",
            "svc1",
            [172, 30, 0, 41],
            3001,
            &[[10, 180, 0, 1], [10, 180, 2, 1]],
            &[[10, 180, 2, 1]],
        );
        let out = iptables_restore(&[s], "10.0.0.0/8");
        let (nat, filter) = service_lines(&out);
        let (ext, svc, svl) = (
            "KUBE-EXT-XPGD46QRK7WJZT7O",
            "KUBE-SVC-XPGD46QRK7WJZT7O",
            "KUBE-SVL-XPGD46QRK7WJZT7O",
        );
        let (remote, local) = ("KUBE-SEP-SXIVWICOYRO3J4NJ", "KUBE-SEP-ZX7GRIZKSNUQ3LAJ");
        let c = "-m comment --comment";
        assert_eq!(
            nat,
            [
                format!(":{ext} - [0:0]"),
                format!(":{svc} - [0:0]"),
                format!(":{svl} - [0:0]"),
                format!(":{remote} - [0:0]"),
                format!(":{local} - [0:0]"),
                format!(
                    "-A KUBE-SERVICES {c} \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp \
                     -d 172.30.0.41 --dport 80 -j {svc}"
                ),
                format!("-A KUBE-NODEPORTS {c} ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j {ext}"),
                format!(
                    "-A {svc} {c} \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 \
                     --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ"
                ),
                format!(
                    "-A {ext} {c} \"pod traffic for ns1/svc1:p80 external destinations\" \
                     -s 10.0.0.0/8 -j {svc}"
                ),
                format!(
                    "-A {ext} {c} \"masquerade LOCAL traffic for ns1/svc1:p80 external \
                     destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
                ),
                format!(
                    "-A {ext} {c} \"route LOCAL traffic for ns1/svc1:p80 external \
                     destinations\" -m addrtype --src-type LOCAL -j {svc}"
                ),
                format!("-A {ext} -j {svl}"),
                format!(
                    "-A {svc} {c} \"ns1/svc1:p80 -> 10.180.0.1:80\" -m statistic --mode random \
                     --probability 0.5000000000 -j {remote}"
                ),
                format!("-A {svc} {c} \"ns1/svc1:p80 -> 10.180.2.1:80\" -j {local}"),
                format!("-A {svl} {c} \"ns1/svc1:p80 -> 10.180.2.1:80\" -j {local}"),
                format!("-A {remote} {c} ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ"),
                format!(
                    "-A {remote} {c} ns1/svc1:p80 -m tcp -p tcp -j DNAT \
                     --to-destination 10.180.0.1:80"
                ),
                format!("-A {local} {c} ns1/svc1:p80 -s 10.180.2.1 -j KUBE-MARK-MASQ"),
                format!(
                    "-A {local} {c} ns1/svc1:p80 -m tcp -p tcp -j DNAT \
                     --to-destination 10.180.2.1:80"
                ),
                format!(
                    "-A KUBE-SERVICES {c} \"kubernetes service nodeports; NOTE: this must be \
                     the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
                ),
            ]
        );
        // A local endpoint: nothing dropped, and a NodePort service has no
        // health-check port.
        assert!(filter.is_empty(), "{filter:?}");
    }

    /// kube-proxy's `TestOverallIPTablesRules` service ns2/svc2:p80
    /// (ClusterIP 172.30.0.42, NodePort 3001, eTP Local) with its one
    /// endpoint 10.180.0.2:80 on another node. That service is `type:
    /// LoadBalancer`; its load-balancer IP, external IP and health-check port
    /// rules are not reproduced, the rest is.
    #[test]
    fn iptables_local_node_port_without_local_endpoints_matches_kube_proxy_fixture() {
        let s = local_node_port_svc(
            "ns2",
            "svc2",
            [172, 30, 0, 42],
            3001,
            &[[10, 180, 0, 2]],
            &[],
        );
        let out = iptables_restore(&[s], "10.0.0.0/8");
        let (nat, filter) = service_lines(&out);
        let (ext, svc) = ("KUBE-EXT-GNZBNJ2PO5MGZ6GT", "KUBE-SVC-GNZBNJ2PO5MGZ6GT");
        let sep = "KUBE-SEP-RS4RBKLTHTF2IUXJ";
        let c = "-m comment --comment";
        assert_eq!(
            filter,
            [format!(
                "-A KUBE-EXTERNAL-SERVICES {c} \"ns2/svc2:p80 has no local endpoints\" \
                 -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP"
            )]
        );
        // No KUBE-SVL chain and no fall-through rule in KUBE-EXT: pods and
        // the node still reach the endpoint, the rest is dropped in filter.
        assert_eq!(
            nat,
            [
                format!(":{ext} - [0:0]"),
                format!(":{svc} - [0:0]"),
                format!(":{sep} - [0:0]"),
                format!(
                    "-A KUBE-SERVICES {c} \"ns2/svc2:p80 cluster IP\" -m tcp -p tcp \
                     -d 172.30.0.42 --dport 80 -j {svc}"
                ),
                format!("-A KUBE-NODEPORTS {c} ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j {ext}"),
                format!(
                    "-A {svc} {c} \"ns2/svc2:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.42 \
                     --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ"
                ),
                format!(
                    "-A {ext} {c} \"pod traffic for ns2/svc2:p80 external destinations\" \
                     -s 10.0.0.0/8 -j {svc}"
                ),
                format!(
                    "-A {ext} {c} \"masquerade LOCAL traffic for ns2/svc2:p80 external \
                     destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
                ),
                format!(
                    "-A {ext} {c} \"route LOCAL traffic for ns2/svc2:p80 external \
                     destinations\" -m addrtype --src-type LOCAL -j {svc}"
                ),
                format!("-A {svc} {c} \"ns2/svc2:p80 -> 10.180.0.2:80\" -j {sep}"),
                format!("-A {sep} {c} ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ"),
                format!(
                    "-A {sep} {c} ns2/svc2:p80 -m tcp -p tcp -j DNAT \
                     --to-destination 10.180.0.2:80"
                ),
                format!(
                    "-A KUBE-SERVICES {c} \"kubernetes service nodeports; NOTE: this must be \
                     the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
                ),
            ]
        );
    }

    /// eTP Local in large-cluster mode and on a partial sync: the KUBE-SVL
    /// dispatch loses its comments like KUBE-SVC's, and a partial sync
    /// rewrites the changed service's KUBE-SVL chain while filter's "no local
    /// endpoints" rules are all rewritten.
    #[test]
    fn iptables_local_node_ports_in_large_clusters_and_partial_syncs() {
        let mut services = filler_services(251, 4);
        // Endpoints 0 and 2 of svc-1 run on this node; svc-2 has none here.
        for (i, local) in [(1, vec![0, 2]), (2, vec![])] {
            let s = &mut services[i];
            let ips: Vec<IpAddr> = local.iter().map(|&e| s.endpoints[e].0).collect();
            s.node_port = Some(NodePort::local(30_000 + i as u16, ips));
        }
        let out = iptables_restore(&services, "10.0.0.0/8");
        let count = |out: &str, prefix: &str| out.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(count(&out, ":KUBE-SVL-"), 1);
        let svl: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("-A KUBE-SVL-"))
            .collect();
        assert_eq!(svl.len(), 2);
        assert!(svl[0].contains(" -m statistic --mode random --probability 0.5000000000 -j "));
        assert!(!svl[0].contains("--comment") && !svl[1].contains("--comment"));
        assert_eq!(count(&out, "-A KUBE-EXTERNAL-SERVICES "), 1);
        assert!(out.contains("\"bench/svc-2:http has no local endpoints\""));

        let partial = iptables_partial_restore(&services, &[1], "10.0.0.0/8");
        assert_eq!(count(&partial, ":KUBE-SVL-"), 1);
        assert_eq!(count(&partial, "-A KUBE-SVL-"), 2);
        assert_eq!(count(&partial, ":KUBE-EXT-"), 1);
        assert_eq!(count(&partial, "-A KUBE-EXT-"), 4);
        assert_eq!(count(&partial, "-A KUBE-NODEPORTS "), 2);
        assert_eq!(count(&partial, "-A KUBE-EXTERNAL-SERVICES "), 1);
        let partial = iptables_partial_restore(&services, &[0], "10.0.0.0/8");
        assert_eq!(count(&partial, ":KUBE-SVL-"), 0);
        assert_eq!(count(&partial, "-A KUBE-EXTERNAL-SERVICES "), 1);
    }

    #[test]
    #[should_panic(expected = "eTP Local is only reproduced by the iptables layout")]
    fn nft_refuses_local_node_ports() {
        let s = local_node_port_svc("ns", "svc", [10, 96, 0, 1], 30000, &[[10, 1, 0, 1]], &[]);
        nft_ruleset(&[s], "10.0.0.0/8");
    }

    #[test]
    #[should_panic(expected = "node endpoint 10.1.0.2 is not an endpoint")]
    fn local_endpoints_must_be_endpoints() {
        let s = local_node_port_svc(
            "ns",
            "svc",
            [10, 96, 0, 1],
            30000,
            &[[10, 1, 0, 1]],
            &[[10, 1, 0, 2]],
        );
        iptables_restore(&[s], "10.0.0.0/8");
    }

    /// A NodePort only adds lines: the ClusterIP-only layout is a subsequence.
    #[test]
    fn node_ports_only_add_lines() {
        let plain = filler_services(20, 3);
        let with_ports = filler_node_ports(20, 3, 32760);
        assert_eq!(with_ports[7].node_port, Some(NodePort::cluster(32767)));
        assert_eq!(with_ports[19].node_port, Some(32779.into()));
        let is_subsequence = |small: &str, big: &str| {
            let mut big = big.lines();
            small.lines().all(|l| big.any(|b| b == l))
        };
        let (a, b) = (
            iptables_restore(&plain, "10.0.0.0/8"),
            iptables_restore(&with_ports, "10.0.0.0/8"),
        );
        assert!(is_subsequence(&a, &b));
        assert_eq!(b.lines().count() - a.lines().count(), 20 * 4);
        let (a, b) = (
            nft_ruleset(&plain, "10.0.0.0/8"),
            nft_ruleset(&with_ports, "10.0.0.0/8"),
        );
        assert!(is_subsequence(&a, &b));
        assert_eq!(b.lines().count() - a.lines().count(), 20 * 5);
    }

    /// On a partial sync only the changed service's KUBE-EXT / external chain
    /// is rewritten; `KUBE-NODEPORTS` keeps every service's rule.
    #[test]
    fn partial_syncs_rewrite_the_changed_external_chain() {
        let services = filler_node_ports(3, 2, 30000);
        let ipt = iptables_partial_restore(&services, &[1], "10.0.0.0/8");
        let count = |out: &str, prefix: &str| out.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(count(&ipt, "-A KUBE-NODEPORTS "), 3);
        assert_eq!(count(&ipt, ":KUBE-EXT-"), 1);
        assert_eq!(count(&ipt, "-A KUBE-EXT-"), 2);
        assert!(ipt.contains("masquerade traffic for bench/svc-1:http external destinations"));
        let nft = nft_partial_sync(&services, &[1], &[], "10.0.0.0/8");
        assert_eq!(count(&nft, "add chain ip kube-proxy external-"), 1);
        assert_eq!(count(&nft, "add rule ip kube-proxy external-"), 2);
        assert!(nft.contains("-bench/svc-1/tcp/http jump mark-for-masquerade\n"));
        assert!(!nft.contains("add element"), "{nft}");
    }

    /// kube-proxy drops per-endpoint comments above 1000 endpoints.
    #[test]
    fn large_clusters_drop_endpoint_comments() {
        let small = iptables_restore(&filler_services(250, 4), "10.0.0.0/8");
        let large = iptables_restore(&filler_services(251, 4), "10.0.0.0/8");
        let commented = |out: &str| {
            out.lines()
                .filter(|l| l.starts_with("-A KUBE-SEP-") && l.contains("--comment"))
                .count()
        };
        assert_eq!(commented(&small), 250 * 4 * 2);
        assert_eq!(commented(&large), 0);
    }

    /// Structure at benchmark scale; the time is printed, not asserted.
    #[test]
    fn ten_thousand_services_of_ten_endpoints() {
        let services = filler_services(10_000, 10);
        let t = Instant::now();
        let ipt = iptables_restore(&services, "10.0.0.0/8");
        let t_ipt = t.elapsed();
        let t = Instant::now();
        let nft = nft_ruleset(&services, "10.0.0.0/8");
        let t_nft = t.elapsed();
        eprintln!(
            "10000x10: iptables {} lines in {t_ipt:?}, nft {} lines in {t_nft:?}",
            ipt.lines().count(),
            nft.lines().count()
        );
        let count = |out: &str, prefix: &str| out.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(count(&ipt, ":KUBE-SEP-"), 100_000);
        assert_eq!(count(&ipt, ":KUBE-SVC-"), 10_000);
        assert_eq!(count(&ipt, "-A KUBE-SERVICES "), 10_001);
        assert_eq!(count(&nft, "add chain ip kube-proxy endpoint-"), 100_000);
        assert_eq!(
            count(&nft, "add element ip kube-proxy service-ips "),
            10_000
        );
    }

    /// 10,000 NodePort services (ports 20000..30000, below the default range).
    #[test]
    fn ten_thousand_node_port_services_of_ten_endpoints() {
        let services = filler_node_ports(10_000, 10, 20_000);
        let ipt = iptables_restore(&services, "10.0.0.0/8");
        let nft = nft_ruleset(&services, "10.0.0.0/8");
        let count = |out: &str, prefix: &str| out.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!(count(&ipt, ":KUBE-EXT-"), 10_000);
        assert_eq!(count(&ipt, ":KUBE-SVC-"), 10_000);
        assert_eq!(count(&ipt, "-A KUBE-EXT-"), 20_000);
        assert_eq!(count(&ipt, "-A KUBE-NODEPORTS "), 10_000);
        assert_eq!(count(&ipt, "-A KUBE-SERVICES "), 10_001);
        assert!(ipt.contains("--dport 20000 -j KUBE-EXT-"));
        assert!(ipt.contains("--dport 29999 -j KUBE-EXT-"));
        assert_eq!(count(&nft, "add chain ip kube-proxy external-"), 10_000);
        assert_eq!(count(&nft, "add rule ip kube-proxy external-"), 20_000);
        assert_eq!(
            count(&nft, "add element ip kube-proxy service-nodeports "),
            10_000
        );
        assert!(nft.contains("service-nodeports { tcp . 29999 : goto external-"));
    }
}
