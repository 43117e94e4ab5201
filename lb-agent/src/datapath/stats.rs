//! Reading the datapath counters (`LB_STATS`).

use std::{collections::BTreeMap, path::Path};

use aya::maps::{Map, MapData, MapError, PerCpuArray};
use lb_common::{STATS, STATS_COUNT, StatKey, counted_keys};

/// Each counter the programs may count ([`lb_common::Reason::places`]),
/// 0 included, summed over CPUs; and any other that is not 0.
pub fn read(maps_dir: &Path) -> Result<BTreeMap<StatKey, u64>, MapError> {
    let data = MapData::from_pin(maps_dir.join(STATS.pin))?;
    let array: PerCpuArray<MapData, u64> = PerCpuArray::try_from(Map::PerCpuArray(data))?;
    let mut out: BTreeMap<StatKey, u64> = counted_keys().map(|key| (key, 0)).collect();
    for index in 0..STATS_COUNT {
        let Some(key) = StatKey::from_index(index) else {
            continue;
        };
        let total: u64 = array.get(&index, 0)?.iter().sum();
        if total != 0 || out.contains_key(&key) {
            out.insert(key, total);
        }
    }
    Ok(out)
}
