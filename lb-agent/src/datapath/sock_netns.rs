//! `LB_SOCK_NETNS`: the network namespaces of the pods whose sockets the
//! socket programs leave to the pods' tc programs (`lb_common::sock_netns`).

use std::{collections::BTreeSet, path::Path};

use aya::maps::{HashMap, Map, MapData};
use lb_common::{SOCK_NETNS, SOCK_NETNS_OPT_OUT};

use super::error::{Error, map_err};

/// Makes `LB_SOCK_NETNS` in `maps_dir` name exactly `cookies`, new entries
/// first; whether it changed anything.
pub fn write(maps_dir: &Path, cookies: &BTreeSet<u64>) -> Result<bool, Error> {
    let path = maps_dir.join(SOCK_NETNS.pin);
    let data = MapData::from_pin(&path).map_err(map_err(&path))?;
    let mut map: HashMap<MapData, u64, u32> =
        HashMap::try_from(Map::HashMap(data)).map_err(map_err(&path))?;
    let present: BTreeSet<u64> = map
        .keys()
        .collect::<Result<_, _>>()
        .map_err(map_err(&path))?;
    let mut changed = false;
    for cookie in cookies.difference(&present) {
        map.insert(cookie, SOCK_NETNS_OPT_OUT, 0)
            .map_err(map_err(&path))?;
        changed = true;
    }
    for cookie in present.difference(cookies) {
        map.remove(cookie).map_err(map_err(&path))?;
        changed = true;
    }
    Ok(changed)
}

/// The namespaces `LB_SOCK_NETNS` in `maps_dir` names (`lb-agent dump`).
pub fn read(maps_dir: &Path) -> Result<BTreeSet<u64>, Error> {
    let path = maps_dir.join(SOCK_NETNS.pin);
    let data = MapData::from_pin(&path).map_err(map_err(&path))?;
    let map: HashMap<MapData, u64, u32> =
        HashMap::try_from(Map::HashMap(data)).map_err(map_err(&path))?;
    map.keys().collect::<Result<_, _>>().map_err(map_err(&path))
}
