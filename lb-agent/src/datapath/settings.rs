//! The tc programs' settings maps (`LB_CONFIG`, `LB4_SRC_RANGES`) as the
//! reconciler's [`SettingsStore`].

use std::{collections::BTreeSet, path::Path};

use aya::maps::{
    Array, Map, MapData, MapError,
    lpm_trie::{Key, LpmTrie},
};
use lb_common::{ADDRS, CONFIG, DatapathConfig, MapSpec, SOURCE_RANGES4, SourceRange4};

use super::batch::Typed;
use crate::reconcile::{SettingsStore, SourceRangeKey, StoreError};

/// The settings maps pinned in one maps directory, opened once: the file
/// descriptors keep naming the same maps when a migration moves the pins.
pub struct BpfSettings {
    config: Array<MapData, DatapathConfig>,
    ranges: LpmTrie<MapData, SourceRange4, u32>,
    addresses: Typed<u32, u64>,
}

impl BpfSettings {
    pub fn open(maps_dir: &Path) -> Result<Self, StoreError> {
        let data = |spec: &MapSpec| {
            MapData::from_pin(maps_dir.join(spec.pin)).map_err(store_err(spec, "open"))
        };
        Ok(Self {
            config: Array::try_from(Map::Array(data(&CONFIG)?))
                .map_err(store_err(&CONFIG, "open"))?,
            ranges: LpmTrie::try_from(Map::LpmTrie(data(&SOURCE_RANGES4)?))
                .map_err(store_err(&SOURCE_RANGES4, "open"))?,
            addresses: Typed::new(data(&ADDRS)?).map_err(store_err(&ADDRS, "open"))?,
        })
    }
}

fn store_err(spec: &MapSpec, op: &'static str) -> impl Fn(MapError) -> StoreError {
    let map = spec.name;
    move |source| StoreError::Map { map, op, source }
}

impl SettingsStore for BpfSettings {
    fn write_config(&mut self, config: &DatapathConfig) -> Result<(), StoreError> {
        self.config
            .set(0, *config, 0)
            .map_err(store_err(&CONFIG, "update"))
    }

    fn source_ranges(&self) -> Result<BTreeSet<SourceRangeKey>, StoreError> {
        self.ranges
            .keys()
            .map(|k| k.map(|k| (k.prefix_len(), k.data())))
            .collect::<Result<_, _>>()
            .map_err(store_err(&SOURCE_RANGES4, "iterate"))
    }

    fn insert_source_range(&mut self, (len, data): &SourceRangeKey) -> Result<(), StoreError> {
        self.ranges
            .insert(&Key::new(*len, *data), 1, 0)
            .map_err(store_err(&SOURCE_RANGES4, "update"))
    }

    fn remove_source_range(&mut self, (len, data): &SourceRangeKey) -> Result<(), StoreError> {
        self.ranges
            .remove(&Key::new(*len, *data))
            .map_err(store_err(&SOURCE_RANGES4, "delete"))
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
