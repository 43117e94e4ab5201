//! `LB4_REVNAT` and `LB6_REVNAT` lookups: which frontend the load balancer
//! sent a socket through to its backend.

use std::{
    net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6},
    path::Path,
};

use aya::{
    Pod,
    maps::{HashMap, Map, MapData, MapError},
};
use lb_common::{REVNAT4, REVNAT6, RevNat4Key, RevNat4Value, RevNat6Key, RevNat6Value};

use super::SocketsError;

/// The pinned reverse-NAT maps, opened read-only in spirit: a pass never
/// writes them.
pub(super) struct RevNat {
    v4: HashMap<MapData, RevNat4Key, RevNat4Value>,
    v6: HashMap<MapData, RevNat6Key, RevNat6Value>,
}

impl RevNat {
    /// Opens both maps pinned in `maps_dir` under this layout's names.
    pub(super) fn open(maps_dir: &Path) -> Result<Self, SocketsError> {
        Ok(Self {
            v4: open(&maps_dir.join(REVNAT4.pin))?,
            v6: open(&maps_dir.join(REVNAT6.pin))?,
        })
    }

    /// The frontend socket `cookie` was sent through to `peer`, and the
    /// backend address, if the load balancer translated it (and the LRU map
    /// still remembers). A v4-mapped peer is IPv4: `connect6` translated it
    /// through the IPv4 maps, and both come back as IPv4.
    pub(super) fn frontend(
        &self,
        cookie: u64,
        peer: SocketAddr,
    ) -> Result<Option<(SocketAddr, IpAddr)>, MapError> {
        let v4 = match peer {
            SocketAddr::V4(v4) => Some(v4),
            SocketAddr::V6(v6) => v6
                .ip()
                .to_ipv4_mapped()
                .map(|ip| SocketAddrV4::new(ip, v6.port())),
        };
        if let Some(backend) = v4 {
            let found = get(&self.v4, &key4(cookie, backend))?;
            return Ok(found.map(|v| {
                let frontend = SocketAddrV4::new(v.addr_be.into(), u16::from_be(v.port_be));
                (frontend.into(), (*backend.ip()).into())
            }));
        }
        let SocketAddr::V6(backend) = peer else {
            return Ok(None);
        };
        let found = get(&self.v6, &key6(cookie, backend))?;
        Ok(found.map(|v| {
            let frontend = SocketAddrV6::new(v.addr_be.into(), u16::from_be(v.port_be), 0, 0);
            (frontend.into(), (*backend.ip()).into())
        }))
    }
}

/// The pinned map at `pin`, typed.
fn open<K: Pod, V: Pod>(pin: &Path) -> Result<HashMap<MapData, K, V>, SocketsError> {
    let map_err = |source| SocketsError::RevNat {
        path: pin.to_owned(),
        source,
    };
    let data = MapData::from_pin(pin).map_err(map_err)?;
    Map::from_map_data(data)
        .and_then(HashMap::try_from)
        .map_err(map_err)
}

fn get<K: Pod, V: Pod>(map: &HashMap<MapData, K, V>, key: &K) -> Result<Option<V>, MapError> {
    match map.get(key, 0) {
        Ok(value) => Ok(Some(value)),
        Err(MapError::KeyNotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The key `connect4` (or `connect6`, v4-mapped) writes for a socket and
/// the backend it chose.
fn key4(cookie: u64, backend: SocketAddrV4) -> RevNat4Key {
    RevNat4Key {
        cookie,
        addr_be: backend.ip().octets(),
        port_be: backend.port().to_be(),
        _pad0: [0; 2],
    }
}

/// The key `connect6` writes for a socket and the IPv6 backend it chose.
fn key6(cookie: u64, backend: SocketAddrV6) -> RevNat6Key {
    RevNat6Key {
        cookie,
        addr_be: backend.ip().octets(),
        port_be: backend.port().to_be(),
        _pad0: [0; 6],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_ports_are_in_network_order_and_the_cookie_in_host_order() {
        let k = key4(0x0102_0304_0506_0708, "10.1.2.3:8053".parse().unwrap());
        assert_eq!(k.cookie, 0x0102_0304_0506_0708);
        assert_eq!(k.addr_be, [10, 1, 2, 3]);
        assert_eq!(k.port_be.to_ne_bytes(), 8053u16.to_be_bytes());
        let k = key6(7, "[fd00::1:2]:8053".parse().unwrap());
        assert_eq!(k.cookie, 7);
        assert_eq!(
            k.addr_be,
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2]
        );
        assert_eq!(k.port_be.to_ne_bytes(), 8053u16.to_be_bytes());
    }
}
