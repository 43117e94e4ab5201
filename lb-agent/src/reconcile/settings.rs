//! The programs' settings that follow the Services: the source ranges of
//! the external frontends `loadBalancerSourceRanges` guards
//! (`LB4_SRC_RANGES`, `LB6_SRC_RANGES`), the endpoints on this node of DSR
//! frontends (`LB4_DSR_EPS`, `LB6_DSR_EPS`), which node each address is on
//! (`LB4_NODE_NETS`, `LB6_NODE_NETS`), and the bitmap of frontend
//! addresses (`LB_ADDRS`). (`LB_CONFIG`, which follows the flags and the
//! node's addresses, is the datapath's to write.)

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnet::IpNet;
use lb_common::{
    DsrEndpoint4Key, DsrEndpoint6Key, SOURCE_RANGE_PREFIX, SOURCE_RANGE6_PREFIX, SourceRange4,
    SourceRange6,
};

use super::{StoreError, addresses::AddressBits};
use crate::model::{Backend, Frontend, FrontendKind};

/// One source-range key, in the map of its family: prefix length in bits,
/// and the data behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceRangeKey {
    V4(u32, SourceRange4),
    V6(u32, SourceRange6),
}

/// One key of `LB4_DSR_EPS` or `LB6_DSR_EPS`: an endpoint on this node of
/// a DSR frontend (see `lb_common::dsr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DsrEndpointKey {
    V4(DsrEndpoint4Key),
    V6(DsrEndpoint6Key),
}

/// Where the settings are kept: the pinned maps, or memory in tests.
pub trait SettingsStore {
    /// Every key of `LB4_SRC_RANGES` and `LB6_SRC_RANGES`.
    fn source_ranges(&self) -> Result<BTreeSet<SourceRangeKey>, StoreError>;
    fn insert_source_range(&mut self, key: &SourceRangeKey) -> Result<(), StoreError>;
    fn remove_source_range(&mut self, key: &SourceRangeKey) -> Result<(), StoreError>;
    /// Sets words of `LB_ADDRS`: `(index, word)`, in one batch.
    fn write_address_words(&mut self, writes: &[(u32, u64)]) -> Result<(), StoreError>;
    /// Every key of `LB4_DSR_EPS` and `LB6_DSR_EPS`.
    fn dsr_endpoints(&self) -> Result<BTreeSet<DsrEndpointKey>, StoreError>;
    fn insert_dsr_endpoint(&mut self, key: &DsrEndpointKey) -> Result<(), StoreError>;
    fn remove_dsr_endpoint(&mut self, key: &DsrEndpointKey) -> Result<(), StoreError>;
    /// Every entry of `LB4_NODE_NETS` and `LB6_NODE_NETS`: prefix -> node
    /// number.
    fn node_nets(&self) -> Result<BTreeMap<IpNet, u32>, StoreError>;
    /// Inserts or replaces the entry of `net` (host bits clear).
    fn insert_node_net(&mut self, net: &IpNet, node: u32) -> Result<(), StoreError>;
    fn remove_node_net(&mut self, net: &IpNet) -> Result<(), StoreError>;
}

/// Writes the settings; the source ranges only when they changed.
#[derive(Debug)]
pub struct Settings<S> {
    store: S,
    /// The source ranges changed since they were last written (true at
    /// first, so that what an earlier agent left is reconciled).
    ranges_stale: bool,
    /// The same for the DSR frontends' endpoints.
    dsr_stale: bool,
    /// The same for the node networks.
    node_nets_stale: bool,
    /// The node networks' maps as written (`None`: to be read first, at
    /// start and after a failed write).
    node_nets: Option<BTreeMap<IpNet, u32>>,
    addresses: AddressBits,
}

impl<S: SettingsStore> Settings<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            ranges_stale: true,
            dsr_stale: true,
            node_nets_stale: true,
            node_nets: None,
            addresses: AddressBits::default(),
        }
    }

    /// The guarded frontends or their ranges changed: the next
    /// [`Self::write_source_ranges`] writes.
    pub fn source_ranges_changed(&mut self) {
        self.ranges_stale = true;
    }

    /// Makes the source-range maps hold exactly the source ranges of
    /// `guarded`, if they changed since they were last written: new
    /// entries first, then the ones no longer wanted, so that a frontend
    /// whose ranges change never admits less than both. Says whether it
    /// wrote; after a failure, the next call tries again.
    pub fn write_source_ranges(
        &mut self,
        guarded: &BTreeMap<Frontend, Vec<IpNet>>,
    ) -> Result<bool, StoreError> {
        if !self.ranges_stale {
            return Ok(false);
        }
        let want = source_range_keys(guarded);
        let have = self.store.source_ranges()?;
        for key in want.difference(&have) {
            self.store.insert_source_range(key)?;
        }
        for key in have.difference(&want) {
            self.store.remove_source_range(key)?;
        }
        self.ranges_stale = false;
        Ok(true)
    }

    /// The DSR frontends or their endpoints on this node changed: the
    /// next [`Self::write_dsr_endpoints`] writes.
    pub fn dsr_endpoints_changed(&mut self) {
        self.dsr_stale = true;
    }

    /// Makes the DSR endpoint maps hold exactly the endpoints on this node
    /// of the DSR frontends in `dsr` (frontend -> its kind and endpoints),
    /// if they changed since they were last written: new entries first,
    /// then the ones no longer wanted. Says whether it wrote; after a
    /// failure, the next call tries again.
    pub fn write_dsr_endpoints(
        &mut self,
        dsr: &BTreeMap<Frontend, (FrontendKind, Vec<Backend>)>,
    ) -> Result<bool, StoreError> {
        if !self.dsr_stale {
            return Ok(false);
        }
        let want = dsr_endpoint_keys(dsr);
        let have = self.store.dsr_endpoints()?;
        for key in want.difference(&have) {
            self.store.insert_dsr_endpoint(key)?;
        }
        for key in have.difference(&want) {
            self.store.remove_dsr_endpoint(key)?;
        }
        self.dsr_stale = false;
        Ok(true)
    }

    /// The nodes or their networks, or the DSR frontends' endpoints,
    /// changed: the next [`Self::write_node_nets`] writes.
    pub fn node_nets_changed(&mut self) {
        self.node_nets_stale = true;
    }

    /// Whether [`Self::write_node_nets`] has anything to do.
    pub fn node_nets_stale(&self) -> bool {
        self.node_nets_stale
    }

    /// The node networks' maps read afresh at the next write, and written
    /// whether or not anything changed (repairing a hand edit).
    pub fn reload_node_nets(&mut self) {
        self.node_nets = None;
        self.node_nets_stale = true;
    }

    /// What the node networks' maps hold: as last written, or read.
    pub fn written_node_nets(&mut self) -> Result<&BTreeMap<IpNet, u32>, StoreError> {
        let have = match self.node_nets.take() {
            Some(have) => have,
            None => self.store.node_nets()?,
        };
        Ok(self.node_nets.insert(have))
    }

    /// Makes the node networks' maps hold exactly `want` (prefix -> node
    /// number), if anything changed since they were last written: new and
    /// renumbered entries first, then the ones no longer wanted, so that
    /// no address loses its node on the way. Says whether it wrote; after
    /// a failure, the next call reads the maps and tries again.
    pub fn write_node_nets(&mut self, want: &BTreeMap<IpNet, u32>) -> Result<bool, StoreError> {
        if !self.node_nets_stale {
            return Ok(false);
        }
        let mut have = match self.node_nets.take() {
            Some(have) => have,
            None => self.store.node_nets()?,
        };
        for (net, node) in want {
            if have.get(net) != Some(node) {
                self.store.insert_node_net(net, *node)?;
                have.insert(*net, *node);
            }
        }
        let gone: Vec<IpNet> = have
            .keys()
            .filter(|net| !want.contains_key(net))
            .copied()
            .collect();
        for net in gone {
            self.store.remove_node_net(&net)?;
            have.remove(&net);
        }
        self.node_nets = Some(have);
        self.node_nets_stale = false;
        Ok(true)
    }

    /// Sets the `LB_ADDRS` bits of `addrs`, keeping the others: before
    /// frontends of theirs are written.
    pub fn add_addresses(
        &mut self,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Result<(), StoreError> {
        let (words, writes) = self.addresses.with(addrs);
        self.write_addresses(words, &writes)
    }

    /// Makes `LB_ADDRS` hold the bits of `addrs` only: after frontends
    /// were deleted, with `addrs` every address left in the maps.
    pub fn set_addresses(
        &mut self,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Result<(), StoreError> {
        let (words, writes) = self.addresses.exactly(addrs);
        self.write_addresses(words, &writes)
    }

    fn write_addresses(
        &mut self,
        words: Vec<u64>,
        writes: &[(u32, u64)],
    ) -> Result<(), StoreError> {
        if let Err(e) = self.store.write_address_words(writes) {
            self.addresses.written(None);
            return Err(e);
        }
        self.addresses.written(Some(words));
        Ok(())
    }

    /// The store, to look at in tests.
    #[cfg(test)]
    pub fn store(&self) -> &S {
        &self.store
    }
}

/// The source-range keys of `guarded`: `src/n` of frontend
/// `addr:port/proto` has prefix length [`SOURCE_RANGE_PREFIX`] (IPv6:
/// [`SOURCE_RANGE6_PREFIX`]) + n. A range of the other family than its
/// frontend's guards nothing there, as in kube-proxy.
fn source_range_keys(guarded: &BTreeMap<Frontend, Vec<IpNet>>) -> BTreeSet<SourceRangeKey> {
    let mut keys = BTreeSet::new();
    for (fe, ranges) in guarded {
        let (port_be, proto) = (fe.port.to_be(), fe.proto.number());
        for range in ranges {
            let len = u32::from(range.prefix_len());
            let key = match (fe.vip, range) {
                (IpAddr::V4(addr), IpNet::V4(net)) => SourceRangeKey::V4(
                    SOURCE_RANGE_PREFIX + len,
                    SourceRange4 {
                        addr_be: addr.octets(),
                        port_be,
                        proto,
                        _pad0: 0,
                        src_be: net.network().octets(),
                    },
                ),
                (IpAddr::V6(addr), IpNet::V6(net)) => SourceRangeKey::V6(
                    SOURCE_RANGE6_PREFIX + len,
                    SourceRange6 {
                        addr_be: addr.octets(),
                        port_be,
                        proto,
                        _pad0: 0,
                        src_be: net.network().octets(),
                    },
                ),
                _ => continue,
            };
            keys.insert(key);
        }
    }
    keys
}

/// The DSR endpoint keys of `dsr`: a NodePort's under the all-zero
/// address, since the packets carry the address of whichever node
/// balanced them (every node's address serves a NodePort); an external or
/// load-balancer IP's under its address.
fn dsr_endpoint_keys(
    dsr: &BTreeMap<Frontend, (FrontendKind, Vec<Backend>)>,
) -> BTreeSet<DsrEndpointKey> {
    let mut keys = BTreeSet::new();
    for (fe, (kind, endpoints)) in dsr {
        let node_port = *kind == FrontendKind::NodePort;
        let (frontend_port_be, proto) = (fe.port.to_be(), fe.proto.number());
        for ep in endpoints {
            let endpoint_port_be = ep.port.to_be();
            let key = match (fe.vip, ep.ip) {
                (IpAddr::V4(vip), IpAddr::V4(ip)) => DsrEndpointKey::V4(DsrEndpoint4Key {
                    frontend_be: if node_port { [0; 4] } else { vip.octets() },
                    endpoint_be: ip.octets(),
                    frontend_port_be,
                    endpoint_port_be,
                    proto,
                    _pad0: [0; 3],
                }),
                (IpAddr::V6(vip), IpAddr::V6(ip)) => DsrEndpointKey::V6(DsrEndpoint6Key {
                    frontend_be: if node_port { [0; 16] } else { vip.octets() },
                    endpoint_be: ip.octets(),
                    frontend_port_be,
                    endpoint_port_be,
                    proto,
                    _pad0: [0; 3],
                }),
                _ => continue,
            };
            keys.insert(key);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{Proto, Scope},
        reconcile::mem::MemSettings,
    };

    fn external(vip: &str, port: u16) -> Frontend {
        Frontend {
            vip: vip.parse().unwrap(),
            port,
            proto: Proto::Tcp,
            scope: Scope::External,
        }
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn a_range_is_keyed_by_frontend_then_source_in_its_familys_map() {
        let guarded = BTreeMap::from([
            (
                external("192.0.2.1", 443),
                nets(&["10.1.0.0/16", "fd00::/8"]),
            ),
            (
                external("2001:db8::1", 443),
                nets(&["fd00:1::/32", "10.0.0.0/8"]),
            ),
        ]);
        let keys: Vec<_> = source_range_keys(&guarded).into_iter().collect();
        let v6 = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(
            keys,
            [
                SourceRangeKey::V4(
                    SOURCE_RANGE_PREFIX + 16,
                    SourceRange4 {
                        addr_be: [192, 0, 2, 1],
                        port_be: 443u16.to_be(),
                        proto: 6,
                        _pad0: 0,
                        src_be: [10, 1, 0, 0],
                    }
                ),
                SourceRangeKey::V6(
                    SOURCE_RANGE6_PREFIX + 32,
                    SourceRange6 {
                        addr_be: v6("2001:db8::1"),
                        port_be: 443u16.to_be(),
                        proto: 6,
                        _pad0: 0,
                        src_be: v6("fd00:1::"),
                    }
                ),
            ]
        );
    }

    fn node_nets(list: &[(&str, u32)]) -> BTreeMap<IpNet, u32> {
        list.iter().map(|(n, v)| (n.parse().unwrap(), *v)).collect()
    }

    #[test]
    fn node_networks_are_written_new_and_renumbered_first_and_only_when_changed() {
        // An earlier agent's.
        let store = MemSettings {
            node_nets: node_nets(&[("10.42.9.0/24", 3), ("192.168.57.2/32", 1)]),
            ..MemSettings::default()
        };
        let mut settings = Settings::new(store);
        assert_eq!(
            settings.written_node_nets().unwrap(),
            &node_nets(&[("10.42.9.0/24", 3), ("192.168.57.2/32", 1)])
        );
        let want = node_nets(&[
            ("192.168.57.2/32", 2),
            ("fd42:2::/64", 2),
            ("10.42.2.0/24", 2),
        ]);
        assert!(settings.write_node_nets(&want).unwrap());
        assert_eq!(settings.store().node_nets, want);
        let op = |insert, net: &str| (insert, net.parse::<IpNet>().unwrap());
        assert_eq!(
            settings.store().node_net_ops,
            [
                op(true, "10.42.2.0/24"),
                op(true, "192.168.57.2/32"),
                op(true, "fd42:2::/64"),
                op(false, "10.42.9.0/24"),
            ]
        );
        // Unchanged: nothing read or written.
        assert!(!settings.write_node_nets(&want).unwrap());
        settings.node_nets_changed();
        assert!(settings.write_node_nets(&want).unwrap());
        assert_eq!(settings.store().node_net_ops.len(), 4, "the same entries");
        // A hand edit is repaired once the maps are read again.
        settings.store.node_nets.clear();
        settings.node_nets_changed();
        assert!(settings.write_node_nets(&want).unwrap());
        assert!(settings.store().node_nets.is_empty(), "not read again");
        settings.reload_node_nets();
        assert!(settings.write_node_nets(&want).unwrap());
        assert_eq!(settings.store().node_nets, want);
    }

    #[test]
    fn what_an_earlier_agent_left_is_reconciled_on_the_first_write() {
        let mut store = MemSettings::default();
        let stale = external("192.0.2.2", 80);
        let stale = BTreeMap::from([(stale, nets(&["10.9.0.0/16"]))]);
        store.ranges = source_range_keys(&stale);
        let mut settings = Settings::new(store);
        assert!(settings.write_source_ranges(&BTreeMap::new()).unwrap());
        assert!(settings.store().ranges.is_empty());
        // Nothing changed since: nothing read or written.
        assert!(!settings.write_source_ranges(&stale).unwrap());
        settings.source_ranges_changed();
        assert!(settings.write_source_ranges(&stale).unwrap());
        assert_eq!(settings.store().ranges, source_range_keys(&stale));
    }
}
