//! `--exclude-cluster-cidr`: pod networks owned by another CNI.

use std::{net::IpAddr, str::FromStr};

use ipnet::IpNet;

/// The set of excluded CIDRs. Endpoints inside any of them are never programmed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExcludedCidrs(Vec<IpNet>);

#[derive(Debug, thiserror::Error)]
#[error("invalid CIDR {input:?} in --exclude-cluster-cidr: {source}")]
pub struct ParseCidrError {
    input: String,
    source: ipnet::AddrParseError,
}

impl ExcludedCidrs {
    /// Parses kube-proxy's flag syntax: comma-separated, any number of
    /// occurrences, empty items (a trailing comma, as in the seed) ignored.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Self, ParseCidrError> {
        let mut nets = Vec::new();
        for item in values.into_iter().flat_map(|v| v.split(',')) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let net = IpNet::from_str(item).map_err(|source| ParseCidrError {
                input: item.to_owned(),
                source,
            })?;
            nets.push(net.trunc());
        }
        Ok(Self(nets))
    }

    pub fn contains(&self, ip: impl Into<IpAddr>) -> bool {
        let ip = ip.into();
        self.0.iter().any(|net| net.contains(&ip))
    }

    pub fn nets(&self) -> &[IpNet] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn parses_seed_flag_with_trailing_comma() {
        let ex = ExcludedCidrs::parse(["10.244.0.0/16,"]).unwrap();
        assert_eq!(ex.nets().len(), 1);
        assert!(ex.contains(Ipv4Addr::new(10, 244, 0, 11)));
        assert!(!ex.contains(Ipv4Addr::new(10, 144, 219, 69)));
    }

    #[test]
    fn repeated_and_comma_separated_are_merged() {
        let ex = ExcludedCidrs::parse(["10.244.0.0/16,10.1.0.0/24", "192.168.0.0/16"]).unwrap();
        assert_eq!(ex.nets().len(), 3);
        assert!(ex.contains(Ipv4Addr::new(10, 1, 0, 255)));
        assert!(!ex.contains(Ipv4Addr::new(10, 1, 1, 0)));
        assert!(ex.contains(Ipv4Addr::new(192, 168, 3, 4)));
    }

    #[test]
    fn host_bits_are_truncated_and_garbage_rejected() {
        let ex = ExcludedCidrs::parse(["10.244.1.7/16"]).unwrap();
        assert!(ex.contains(Ipv4Addr::new(10, 244, 200, 1)));
        assert!(ExcludedCidrs::parse(["10.244.0.0/33"]).is_err());
        assert!(ExcludedCidrs::parse(["nope"]).is_err());
    }
}
