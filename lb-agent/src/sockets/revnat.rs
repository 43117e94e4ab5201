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
use lb_common::{
    REVNAT4, REVNAT6, RevNat4Key, RevNat4Value, RevNat6Key, RevNat6Value, SOCK_REVNAT_V4,
    SOCK_REVNAT_V6, SockRevNat,
};

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
        if let Some(backend) = ipv4_peer(peer) {
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

/// `peer` as IPv4, also when it is IPv4-mapped (an AF_INET6 socket
/// connected to an IPv4 address, whose translation was IPv4's).
fn ipv4_peer(peer: SocketAddr) -> Option<SocketAddrV4> {
    match peer {
        SocketAddr::V4(v4) => Some(v4),
        SocketAddr::V6(v6) => v6
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, v6.port())),
    }
}

/// The frontend a socket's storage says it was sent through to `peer`,
/// and the backend address, if `peer` is the backend it names (a socket
/// connected elsewhere since, straight to an address, no longer is). A
/// v4-mapped peer is IPv4, as in [`RevNat::frontend`].
pub(super) fn stored_frontend(
    entry: &SockRevNat,
    peer: SocketAddr,
) -> Option<(SocketAddr, IpAddr)> {
    let v4 = ipv4_peer(peer);
    if entry.backend_port_be != peer.port().to_be() {
        return None;
    }
    let narrow = |a: &[u8; 16]| [a[0], a[1], a[2], a[3]];
    let port = u16::from_be(entry.frontend_port_be);
    match (entry.family, v4, peer) {
        (SOCK_REVNAT_V4, Some(backend), _)
            if narrow(&entry.backend_be) == backend.ip().octets() =>
        {
            let frontend = SocketAddrV4::new(narrow(&entry.frontend_be).into(), port);
            Some((frontend.into(), (*backend.ip()).into()))
        }
        (SOCK_REVNAT_V6, None, SocketAddr::V6(backend))
            if entry.backend_be == backend.ip().octets() =>
        {
            let frontend = SocketAddrV6::new(entry.frontend_be.into(), port, 0, 0);
            Some((frontend.into(), (*backend.ip()).into()))
        }
        _ => None,
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

    fn entry(family: u8, backend: SocketAddr, frontend: SocketAddr) -> SockRevNat {
        let wide = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => {
                let mut out = [0; 16];
                out[..4].copy_from_slice(&v4.octets());
                out
            }
            IpAddr::V6(v6) => v6.octets(),
        };
        SockRevNat {
            backend_be: wide(backend.ip()),
            frontend_be: wide(frontend.ip()),
            backend_port_be: backend.port().to_be(),
            frontend_port_be: frontend.port().to_be(),
            family,
            _pad0: [0; 3],
        }
    }

    #[test]
    fn storage_names_the_frontend_only_of_the_backend_it_recorded() {
        let (b4, f4) = (
            "10.42.0.1:5353".parse().unwrap(),
            "10.96.0.10:53".parse().unwrap(),
        );
        let e4 = entry(SOCK_REVNAT_V4, b4, f4);
        let want = Some((f4, b4.ip()));
        assert_eq!(stored_frontend(&e4, b4), want);
        // An AF_INET6 socket that reached it as ::ffff:10.42.0.1.
        let mapped = "[::ffff:10.42.0.1]:5353".parse().unwrap();
        assert_eq!(stored_frontend(&e4, mapped), want);
        // Connected elsewhere since, or to another port of the backend.
        for other in ["10.42.0.2:5353", "10.42.0.1:5354", "[fd00::1]:5353"] {
            assert_eq!(
                stored_frontend(&e4, other.parse().unwrap()),
                None,
                "{other}"
            );
        }
        // `connect*` wiped it (family 0): connected straight to the backend.
        let wiped = SockRevNat { family: 0, ..e4 };
        assert_eq!(stored_frontend(&wiped, b4), None);

        let (b6, f6) = (
            "[fd00:42::1]:5353".parse().unwrap(),
            "[fd00:96::10]:53".parse().unwrap(),
        );
        let e6 = entry(SOCK_REVNAT_V6, b6, f6);
        assert_eq!(stored_frontend(&e6, b6), Some((f6, b6.ip())));
        assert_eq!(
            stored_frontend(&e6, "[fd00:42::2]:5353".parse().unwrap()),
            None
        );
    }

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
