//! The settings maps the reconciler fills (`LB4_SRC_RANGES`,
//! `LB6_SRC_RANGES`, `LB_ADDRS`, `LB4_DSR_EPS`, `LB6_DSR_EPS`,
//! `LB4_NODE_NETS`, `LB6_NODE_NETS`) as its [`SettingsStore`].
//! `LB_CONFIG` is written by [`super::Datapath::write_settings`].

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
};

use aya::maps::{
    HashMap, Map, MapData, MapError,
    lpm_trie::{Key, LpmTrie},
};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use lb_common::{
    ADDRS, DSR_EPS4, DSR_EPS6, DsrEndpoint4Key, DsrEndpoint6Key, MapSpec, NODE_NETS4, NODE_NETS6,
    NodeNet, SOURCE_RANGES4, SOURCE_RANGES6, SourceRange4, SourceRange6,
};

use super::batch::Typed;
use crate::reconcile::{DsrEndpointKey, SettingsStore, SourceRangeKey, StoreError};

/// The settings maps pinned in one maps directory, opened once: the file
/// descriptors keep naming the same maps when a migration moves the pins.
pub struct BpfSettings {
    ranges: LpmTrie<MapData, SourceRange4, u32>,
    ranges6: LpmTrie<MapData, SourceRange6, u32>,
    addresses: Typed<u32, u64>,
    dsr_eps: HashMap<MapData, DsrEndpoint4Key, u32>,
    dsr_eps6: HashMap<MapData, DsrEndpoint6Key, u32>,
    node_nets: LpmTrie<MapData, [u8; 4], NodeNet>,
    node_nets6: LpmTrie<MapData, [u8; 16], NodeNet>,
}

impl BpfSettings {
    pub fn open(maps_dir: &Path) -> Result<Self, StoreError> {
        let data = |spec: &MapSpec| {
            MapData::from_pin(maps_dir.join(spec.pin)).map_err(store_err(spec, "open"))
        };
        Ok(Self {
            ranges: LpmTrie::try_from(Map::LpmTrie(data(&SOURCE_RANGES4)?))
                .map_err(store_err(&SOURCE_RANGES4, "open"))?,
            ranges6: LpmTrie::try_from(Map::LpmTrie(data(&SOURCE_RANGES6)?))
                .map_err(store_err(&SOURCE_RANGES6, "open"))?,
            addresses: Typed::new(data(&ADDRS)?).map_err(store_err(&ADDRS, "open"))?,
            dsr_eps: HashMap::try_from(Map::HashMap(data(&DSR_EPS4)?))
                .map_err(store_err(&DSR_EPS4, "open"))?,
            dsr_eps6: HashMap::try_from(Map::HashMap(data(&DSR_EPS6)?))
                .map_err(store_err(&DSR_EPS6, "open"))?,
            node_nets: LpmTrie::try_from(Map::LpmTrie(data(&NODE_NETS4)?))
                .map_err(store_err(&NODE_NETS4, "open"))?,
            node_nets6: LpmTrie::try_from(Map::LpmTrie(data(&NODE_NETS6)?))
                .map_err(store_err(&NODE_NETS6, "open"))?,
        })
    }
}

fn store_err(spec: &MapSpec, op: &'static str) -> impl Fn(MapError) -> StoreError {
    let map = spec.name;
    move |source| StoreError::Map { map, op, source }
}

impl SettingsStore for BpfSettings {
    fn source_ranges(&self) -> Result<BTreeSet<SourceRangeKey>, StoreError> {
        let v4 = self
            .ranges
            .keys()
            .map(|k| k.map(|k| SourceRangeKey::V4(k.prefix_len(), k.data())))
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(store_err(&SOURCE_RANGES4, "iterate"))?;
        let v6 = self
            .ranges6
            .keys()
            .map(|k| k.map(|k| SourceRangeKey::V6(k.prefix_len(), k.data())))
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(store_err(&SOURCE_RANGES6, "iterate"))?;
        Ok(v4.into_iter().chain(v6).collect())
    }

    fn insert_source_range(&mut self, key: &SourceRangeKey) -> Result<(), StoreError> {
        match *key {
            SourceRangeKey::V4(len, data) => self
                .ranges
                .insert(&Key::new(len, data), 1, 0)
                .map_err(store_err(&SOURCE_RANGES4, "update")),
            SourceRangeKey::V6(len, data) => self
                .ranges6
                .insert(&Key::new(len, data), 1, 0)
                .map_err(store_err(&SOURCE_RANGES6, "update")),
        }
    }

    fn remove_source_range(&mut self, key: &SourceRangeKey) -> Result<(), StoreError> {
        match *key {
            SourceRangeKey::V4(len, data) => self
                .ranges
                .remove(&Key::new(len, data))
                .map_err(store_err(&SOURCE_RANGES4, "delete")),
            SourceRangeKey::V6(len, data) => self
                .ranges6
                .remove(&Key::new(len, data))
                .map_err(store_err(&SOURCE_RANGES6, "delete")),
        }
    }

    fn dsr_endpoints(&self) -> Result<BTreeSet<DsrEndpointKey>, StoreError> {
        let v4 = self
            .dsr_eps
            .keys()
            .map(|k| k.map(DsrEndpointKey::V4))
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(store_err(&DSR_EPS4, "iterate"))?;
        let v6 = self
            .dsr_eps6
            .keys()
            .map(|k| k.map(DsrEndpointKey::V6))
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(store_err(&DSR_EPS6, "iterate"))?;
        Ok(v4.into_iter().chain(v6).collect())
    }

    fn insert_dsr_endpoint(&mut self, key: &DsrEndpointKey) -> Result<(), StoreError> {
        match key {
            DsrEndpointKey::V4(k) => self
                .dsr_eps
                .insert(k, 1, 0)
                .map_err(store_err(&DSR_EPS4, "update")),
            DsrEndpointKey::V6(k) => self
                .dsr_eps6
                .insert(k, 1, 0)
                .map_err(store_err(&DSR_EPS6, "update")),
        }
    }

    fn remove_dsr_endpoint(&mut self, key: &DsrEndpointKey) -> Result<(), StoreError> {
        match key {
            DsrEndpointKey::V4(k) => self
                .dsr_eps
                .remove(k)
                .map_err(store_err(&DSR_EPS4, "delete")),
            DsrEndpointKey::V6(k) => self
                .dsr_eps6
                .remove(k)
                .map_err(store_err(&DSR_EPS6, "delete")),
        }
    }

    fn node_nets(&self) -> Result<BTreeMap<IpNet, u32>, StoreError> {
        let mut out = BTreeMap::new();
        for entry in self.node_nets.iter() {
            let (k, v) = entry.map_err(store_err(&NODE_NETS4, "iterate"))?;
            if let Ok(net) = Ipv4Net::new(Ipv4Addr::from(k.data()), k.prefix_len() as u8) {
                out.insert(IpNet::V4(net), v.node);
            }
        }
        for entry in self.node_nets6.iter() {
            let (k, v) = entry.map_err(store_err(&NODE_NETS6, "iterate"))?;
            if let Ok(net) = Ipv6Net::new(Ipv6Addr::from(k.data()), k.prefix_len() as u8) {
                out.insert(IpNet::V6(net), v.node);
            }
        }
        Ok(out)
    }

    fn insert_node_net(&mut self, net: &IpNet, node: u32) -> Result<(), StoreError> {
        let value = NodeNet { node };
        let len = u32::from(net.prefix_len());
        match net {
            IpNet::V4(n) => self
                .node_nets
                .insert(&Key::new(len, n.network().octets()), value, 0)
                .map_err(store_err(&NODE_NETS4, "update")),
            IpNet::V6(n) => self
                .node_nets6
                .insert(&Key::new(len, n.network().octets()), value, 0)
                .map_err(store_err(&NODE_NETS6, "update")),
        }
    }

    fn remove_node_net(&mut self, net: &IpNet) -> Result<(), StoreError> {
        let len = u32::from(net.prefix_len());
        match net {
            IpNet::V4(n) => self
                .node_nets
                .remove(&Key::new(len, n.network().octets()))
                .map_err(store_err(&NODE_NETS4, "delete")),
            IpNet::V6(n) => self
                .node_nets6
                .remove(&Key::new(len, n.network().octets()))
                .map_err(store_err(&NODE_NETS6, "delete")),
        }
    }

    fn write_address_words(&mut self, writes: &[(u32, u64)]) -> Result<(), StoreError> {
        let (indexes, words): (Vec<u32>, Vec<u64>) = writes.iter().copied().unzip();
        self.addresses
            .update(&indexes, &words, 0)
            .map_err(|(_, source)| StoreError::Syscall {
                map: ADDRS.name,
                op: "update",
                source,
            })
    }
}
