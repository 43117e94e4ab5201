//! The NodePort bed's address plan: its networks, each mode's node,
//! client and sink link (`172.16.k.0/24`, `10.44.k.0/24`), the pods, and
//! every address's IPv6 image (`fd00::` and the IPv4 address's 32 bits,
//! `netns::v6_of`) in a prefix 96 bits longer.

use std::net::{IpAddr, Ipv4Addr};

use lb_tests::{
    kubeproxy::SvcSpec,
    netns::{ip, v6_of},
};

use super::super::{
    plan::Plan,
    results::nodeport::{Family, Mode},
};

/// The sink Service's endpoints: routed to each node's sink.
pub(super) const SINK_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 43, 0, 0), 16);
/// The pods' network: kube-proxy's `--cluster-cidr` (IPv4's; IPv6's is its
/// image).
pub(super) const CLUSTER_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 42, 0, 0), 16);

/// `ip` in `family`: itself, or its IPv6 image.
pub(super) fn at(family: Family, ip: Ipv4Addr) -> IpAddr {
    match family {
        Family::V4 => ip.into(),
        Family::V6 => v6_of(ip).into(),
    }
}

/// `ip/len` in `family`.
pub(super) fn prefix(family: Family, (ip, len): (Ipv4Addr, u8)) -> String {
    match family {
        Family::V4 => format!("{ip}/{len}"),
        Family::V6 => format!("{}/{}", v6_of(ip), len + 96),
    }
}

/// `specs` over `family`: their addresses' images.
pub(super) fn in_family(specs: &[SvcSpec], family: Family) -> Vec<SvcSpec> {
    let map = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => at(family, v4),
        IpAddr::V6(_) => ip,
    };
    specs
        .iter()
        .map(|s| SvcSpec {
            vip: map(s.vip),
            endpoints: s.endpoints.iter().map(|&(ip, p)| (map(ip), p)).collect(),
            ..s.clone()
        })
        .collect()
}

/// Gives `dev` in `ns` the address `ip/len` and its IPv6 image.
pub(super) fn addrs(ns: &str, dev: &str, net: (Ipv4Addr, u8)) -> anyhow::Result<()> {
    for family in Family::ALL {
        let addr = prefix(family, net);
        let mut args = vec!["-n", ns, "addr", "add", &addr, "dev", dev];
        if family == Family::V6 {
            args.push("nodad");
        }
        ip(&args)?;
    }
    Ok(())
}

/// Routes `to` via `via` in `ns`, in both families.
pub(super) fn route(ns: &str, to: Option<(Ipv4Addr, u8)>, via: Ipv4Addr) -> anyhow::Result<()> {
    for family in Family::ALL {
        let to = to.map_or("default".to_owned(), |net| prefix(family, net));
        ip(&[
            "-n",
            ns,
            "route",
            "add",
            &to,
            "via",
            &at(family, via).to_string(),
        ])?;
    }
    Ok(())
}

impl Mode {
    /// The index of this mode's node and client (`172.16.k.0/24`).
    pub(super) fn k(self) -> u8 {
        self as u8
    }

    /// This mode's node on its client's link.
    pub(super) fn node_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(172, 16, self.k(), 1)
    }

    /// This mode's client.
    pub(super) fn client_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(172, 16, self.k(), 2)
    }

    /// This mode's node on the pods' bridge.
    pub(super) fn fabric_addr(self) -> Ipv4Addr {
        Ipv4Addr::new(10, 42, 0, 101 + self.k())
    }

    /// This mode's node, and its sink, on their link (`10.44.k.0/24`).
    pub(super) fn sink_link(self) -> (Ipv4Addr, Ipv4Addr) {
        (
            Ipv4Addr::new(10, 44, self.k(), 1),
            Ipv4Addr::new(10, 44, self.k(), 2),
        )
    }
}

/// The endpoints' addresses.
pub(super) fn pods(plan: &Plan) -> Vec<Ipv4Addr> {
    (0..plan.endpoints)
        .map(|i| Ipv4Addr::new(10, 42, 0, i as u8 + 1))
        .collect()
}
