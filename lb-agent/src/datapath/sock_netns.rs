//! `LB_SOCK_NETNS`: what the socket programs know of the pods' network
//! namespaces (`lb_common::sock_netns`): those whose sockets they leave to
//! the pods' tc programs, and the address each sends from.

use std::{collections::BTreeMap, path::Path};

use aya::maps::{HashMap, Map, MapData};
use lb_common::{SOCK_NETNS, SockNetns};

use super::error::{Error, map_err};

fn open(maps_dir: &Path) -> Result<HashMap<MapData, u64, SockNetns>, Error> {
    let path = maps_dir.join(SOCK_NETNS.pin);
    let data = MapData::from_pin(&path).map_err(map_err(&path))?;
    HashMap::try_from(Map::HashMap(data)).map_err(map_err(&path))
}

/// Makes `LB_SOCK_NETNS` in `maps_dir` hold exactly `entries`, new and
/// changed ones first; whether it changed anything.
pub fn write(maps_dir: &Path, entries: &BTreeMap<u64, SockNetns>) -> Result<bool, Error> {
    let path = maps_dir.join(SOCK_NETNS.pin);
    let mut map = open(maps_dir)?;
    let present: BTreeMap<u64, SockNetns> = map
        .iter()
        .collect::<Result<_, _>>()
        .map_err(map_err(&path))?;
    let mut changed = false;
    for (cookie, entry) in entries {
        if present.get(cookie) != Some(entry) {
            map.insert(cookie, entry, 0).map_err(map_err(&path))?;
            changed = true;
        }
    }
    for cookie in present.keys().filter(|c| !entries.contains_key(c)) {
        map.remove(cookie).map_err(map_err(&path))?;
        changed = true;
    }
    Ok(changed)
}

/// Every entry of `LB_SOCK_NETNS` in `maps_dir` (`lb-agent dump`).
pub fn read(maps_dir: &Path) -> Result<BTreeMap<u64, SockNetns>, Error> {
    let path = maps_dir.join(SOCK_NETNS.pin);
    open(maps_dir)?
        .iter()
        .collect::<Result<_, _>>()
        .map_err(map_err(&path))
}
