//! `LB4_REVNAT` lookups: which frontend the load balancer sent a socket
//! through to its backend.

use std::{net::SocketAddrV4, path::Path};

use aya::maps::{HashMap, Map, MapData, MapError};
use lb_common::{RevNat4Key, RevNat4Value};

use super::SocketsError;

/// The pinned reverse-NAT map, opened read-only in spirit: a pass never
/// writes it.
pub(super) struct RevNat {
    map: HashMap<MapData, RevNat4Key, RevNat4Value>,
}

impl RevNat {
    /// Opens the map pinned at `pin`; its key and value sizes must be
    /// `RevNat4Key`'s and `RevNat4Value`'s.
    pub(super) fn open(pin: &Path) -> Result<Self, SocketsError> {
        let map_err = |source| SocketsError::RevNat {
            path: pin.to_owned(),
            source,
        };
        let data = MapData::from_pin(pin).map_err(map_err)?;
        let map = Map::from_map_data(data)
            .and_then(HashMap::try_from)
            .map_err(map_err)?;
        Ok(Self { map })
    }

    /// The frontend socket `cookie` was sent through to `backend`, if the
    /// load balancer translated it (and the LRU map still remembers).
    pub(super) fn frontend(
        &self,
        cookie: u64,
        backend: SocketAddrV4,
    ) -> Result<Option<SocketAddrV4>, MapError> {
        match self.map.get(&key(cookie, backend), 0) {
            Ok(value) => Ok(Some(frontend(value))),
            Err(MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The key `connect4` writes for a socket and the backend it chose.
fn key(cookie: u64, backend: SocketAddrV4) -> RevNat4Key {
    RevNat4Key {
        cookie,
        addr_be: backend.ip().octets(),
        port_be: backend.port().to_be(),
        _pad0: [0; 2],
    }
}

fn frontend(value: RevNat4Value) -> SocketAddrV4 {
    SocketAddrV4::new(value.addr_be.into(), u16::from_be(value.port_be))
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn addresses_and_ports_are_in_network_order_and_the_cookie_in_host_order() {
        let k = key(0x0102_0304_0506_0708, "10.1.2.3:8053".parse().unwrap());
        assert_eq!(k.cookie, 0x0102_0304_0506_0708);
        assert_eq!(k.addr_be, [10, 1, 2, 3]);
        assert_eq!(k.port_be.to_ne_bytes(), 8053u16.to_be_bytes());
        let v = RevNat4Value {
            addr_be: [192, 0, 2, 10],
            port_be: 53u16.to_be(),
            _pad0: [0; 2],
        };
        assert_eq!(
            frontend(v),
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 10), 53)
        );
    }
}
