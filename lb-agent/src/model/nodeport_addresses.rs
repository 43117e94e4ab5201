//! `--nodeport-addresses` (`nodePortAddresses` in the config file): which of
//! the node's addresses serve NodePorts, as kube-proxy decides
//! (`pkg/proxy/util/nodeport_addresses.go`, `cmd/kube-proxy/app/server.go`).

use std::{net::IpAddr, str::FromStr};

use ipnet::IpNet;

use super::IpFamily;

/// The setting, before it meets the node's addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NodePortAddresses {
    /// The node's primary address of each family (`status.addresses`), as
    /// kube-proxy's nftables mode does by default.
    #[default]
    Primary,
    /// Every address of the node but loopback (ours; kube-proxy's iptables
    /// default, an empty list).
    All,
    /// The node's addresses inside these CIDRs.
    Cidrs(Vec<IpNet>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NodePortAddressesError {
    #[error("invalid CIDR {input:?} in --nodeport-addresses: {source}")]
    Cidr {
        input: String,
        source: ipnet::AddrParseError,
    },
    #[error("--nodeport-addresses: {keyword:?} must be the only value")]
    NotAlone { keyword: &'static str },
}

impl NodePortAddresses {
    /// Parses the flag's syntax (comma-separated, repeatable) or the file's
    /// list: `primary`, `all`, or CIDRs. No value at all is the default.
    pub fn parse<'a>(
        values: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, NodePortAddressesError> {
        let items: Vec<&str> = values
            .into_iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .collect();
        for keyword in ["primary", "all"] {
            if items.contains(&keyword) {
                return match items.len() {
                    1 if keyword == "primary" => Ok(Self::Primary),
                    1 => Ok(Self::All),
                    _ => Err(NodePortAddressesError::NotAlone { keyword }),
                };
            }
        }
        if items.is_empty() {
            return Ok(Self::default());
        }
        let nets = items
            .into_iter()
            .map(|item| {
                IpNet::from_str(item)
                    .map(|net| net.trunc())
                    .map_err(|source| NodePortAddressesError::Cidr {
                        input: item.to_owned(),
                        source,
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self::Cidrs(nets))
    }

    /// The addresses of `family` that serve NodePorts, from the node's
    /// primary address of that family and every address it holds (`local`).
    ///
    /// As kube-proxy: a family the setting names nothing of (no CIDR, no
    /// primary address) serves NodePorts on all of its addresses, and
    /// loopback never does. The primary address is taken as the Node
    /// reports it; kube-proxy also looks for it on an interface, where a
    /// node's own address always is.
    pub fn select(
        &self,
        family: IpFamily,
        primary: Option<IpAddr>,
        local: &[IpAddr],
    ) -> Vec<IpAddr> {
        let of_family = |ip: &IpAddr| IpFamily::of(*ip) == family;
        let nets: Vec<IpNet> = match self {
            Self::Primary => match primary.filter(|ip| of_family(ip) && !ip.is_loopback()) {
                Some(ip) => return vec![ip],
                None => Vec::new(),
            },
            Self::All => Vec::new(),
            Self::Cidrs(nets) => nets
                .iter()
                .filter(|net| of_family(&net.addr()))
                .copied()
                .collect(),
        };
        let mut out: Vec<IpAddr> = local
            .iter()
            .copied()
            .filter(|ip| of_family(ip) && !ip.is_loopback())
            .filter(|ip| nets.is_empty() || nets.iter().any(|net| net.contains(ip)))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// [`Self::select`] for both families: `primary` holds at most one
    /// address of each.
    pub fn select_all(&self, primary: &[IpAddr], local: &[IpAddr]) -> Vec<IpAddr> {
        [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .flat_map(|family| {
                let p = primary
                    .iter()
                    .copied()
                    .find(|ip| IpFamily::of(*ip) == family);
                self.select(family, p, local)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|s| s.parse().expect("an IP")).collect()
    }

    /// A dual-stack node: eth0 with a primary and a secondary address of
    /// each family, a bridge address, and loopback.
    fn local() -> Vec<IpAddr> {
        ips(&[
            "127.0.0.1",
            "::1",
            "192.0.2.10",
            "192.0.2.11",
            "10.244.0.1",
            "2001:db8::10",
            "2001:db8::11",
        ])
    }

    #[test]
    fn parses_keywords_cidrs_and_the_default() {
        assert_eq!(NodePortAddresses::parse([]), Ok(NodePortAddresses::Primary));
        assert_eq!(
            NodePortAddresses::parse([""]),
            Ok(NodePortAddresses::Primary)
        );
        assert_eq!(
            NodePortAddresses::parse(["primary"]),
            Ok(NodePortAddresses::Primary)
        );
        assert_eq!(
            NodePortAddresses::parse(["all"]),
            Ok(NodePortAddresses::All)
        );
        assert_eq!(
            NodePortAddresses::parse(["192.0.2.7/24,", "2001:db8::/64"]),
            Ok(NodePortAddresses::Cidrs(vec![
                "192.0.2.0/24".parse().unwrap(),
                "2001:db8::/64".parse().unwrap(),
            ]))
        );
        assert_eq!(
            NodePortAddresses::parse(["primary,10.0.0.0/8"]),
            Err(NodePortAddressesError::NotAlone { keyword: "primary" })
        );
        assert!(matches!(
            NodePortAddresses::parse(["10.0.0.0/33"]),
            Err(NodePortAddressesError::Cidr { .. })
        ));
    }

    #[test]
    fn primary_takes_the_node_address_of_each_family() {
        let p = NodePortAddresses::Primary;
        let v4 = "192.0.2.10".parse().ok();
        let v6 = "2001:db8::10".parse().ok();
        assert_eq!(p.select(IpFamily::V4, v4, &local()), ips(&["192.0.2.10"]));
        assert_eq!(p.select(IpFamily::V6, v6, &local()), ips(&["2001:db8::10"]));
    }

    #[test]
    fn the_primary_address_serves_as_the_node_reports_it() {
        let p = NodePortAddresses::Primary;
        let elsewhere = "198.51.100.9".parse().ok();
        assert_eq!(
            p.select(IpFamily::V4, elsewhere, &local()),
            ips(&["198.51.100.9"])
        );
        assert_eq!(
            p.select_all(&ips(&["2001:db8::10", "192.0.2.11"]), &local()),
            ips(&["192.0.2.11", "2001:db8::10"])
        );
    }

    #[test]
    fn a_family_without_a_primary_address_serves_on_all_of_its_addresses() {
        // kube-proxy's fallback: a family the setting names nothing of is
        // match-all (NewNodePortAddresses), loopback excepted.
        let p = NodePortAddresses::Primary;
        assert_eq!(
            p.select(IpFamily::V6, None, &local()),
            ips(&["2001:db8::10", "2001:db8::11"])
        );
        let loopback = "127.0.0.1".parse().ok();
        assert_eq!(
            p.select(IpFamily::V4, loopback, &local()),
            ips(&["10.244.0.1", "192.0.2.10", "192.0.2.11"])
        );
    }

    #[test]
    fn cidrs_select_the_addresses_inside_and_never_loopback() {
        let c = NodePortAddresses::parse(["192.0.2.0/24,127.0.0.0/8"]).unwrap();
        assert_eq!(
            c.select(IpFamily::V4, None, &local()),
            ips(&["192.0.2.10", "192.0.2.11"])
        );
        // No IPv6 CIDR: IPv6 is match-all.
        assert_eq!(
            c.select(IpFamily::V6, None, &local()),
            ips(&["2001:db8::10", "2001:db8::11"])
        );
        let none_inside = NodePortAddresses::parse(["198.51.100.0/24"]).unwrap();
        assert!(none_inside.select(IpFamily::V4, None, &local()).is_empty());
    }

    #[test]
    fn all_is_every_address_but_loopback() {
        assert_eq!(
            NodePortAddresses::All.select(IpFamily::V4, None, &local()),
            ips(&["10.244.0.1", "192.0.2.10", "192.0.2.11"])
        );
    }
}
