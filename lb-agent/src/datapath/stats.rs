//! Reading the datapath counters (`LB_STATS`).

use std::path::Path;

use aya::maps::{Map, MapData, MapError, PerCpuArray};
use lb_common::{STAT_NAMES, STATS, STATS_COUNT};

/// Every counter summed over CPUs, in `lb_common::stats` order.
pub fn read(maps_dir: &Path) -> Result<[u64; STATS_COUNT as usize], MapError> {
    let data = MapData::from_pin(maps_dir.join(STATS.pin))?;
    let array: PerCpuArray<MapData, u64> = PerCpuArray::try_from(Map::PerCpuArray(data))?;
    let mut out = [0; STATS_COUNT as usize];
    for (index, total) in (0u32..).zip(out.iter_mut()) {
        *total = array.get(&index, 0)?.iter().sum();
    }
    Ok(out)
}

/// Counter names with their totals.
pub fn named(totals: &[u64; STATS_COUNT as usize]) -> impl Iterator<Item = (&'static str, u64)> {
    STAT_NAMES.iter().copied().zip(totals.iter().copied())
}
