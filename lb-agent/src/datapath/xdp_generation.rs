//! The generation of the XDP fast path's flow cache (`LB_XDP_GENERATION`,
//! see `lb_common::XdpFlow`): an entry written at another generation is
//! not used. The cache holds each flow's next hop (device, MAC addresses,
//! MTU) as the FIB gave it, and its translation as the conntrack entries
//! gave it: the generation moves on whenever either may have changed,
//! here on every route, neighbour, link and address notification of the
//! node's network namespace, and when the conntrack collector deletes
//! flows. (Without a change, an entry lives a second at most.)
//!
//! The map, like the cache, is the loaded object's own (unpinned): a new
//! build's programs start with an empty cache (a restart of the same build
//! adopts the programs, and with them both).

use std::{
    io,
    sync::{Arc, Mutex, PoisonError},
    thread,
};

use aya::maps::{Array, Map, MapData, MapError};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use super::error::Error;

/// The map's symbol in the object.
pub const MAP: &str = "LB_XDP_GENERATION";

/// The notification groups whose messages bump the generation: links,
/// neighbours, addresses and routes of both families.
const GROUPS: [u32; 6] = [
    libc::RTNLGRP_LINK,
    libc::RTNLGRP_NEIGH,
    libc::RTNLGRP_IPV4_IFADDR,
    libc::RTNLGRP_IPV4_ROUTE,
    libc::RTNLGRP_IPV6_IFADDR,
    libc::RTNLGRP_IPV6_ROUTE,
];

/// A handle on the generation, shared by whoever bumps it.
#[derive(Clone)]
pub struct Generation(Arc<Mutex<Array<MapData, u32>>>);

impl Generation {
    /// The generation in `map` ([`MAP`], taken out of the programs' maps).
    pub fn new(map: Option<Map>) -> Result<Self, Error> {
        let map = map.ok_or(Error::MissingGlobal(MAP))?;
        let array = Array::try_from(map).map_err(|source| Error::Global {
            section: MAP,
            source,
        })?;
        Ok(Self(Arc::new(Mutex::new(array))))
    }

    /// The generation now.
    pub fn get(&self) -> Result<u32, MapError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&0, 0)
    }

    /// Moves the generation on: every cache entry is stale.
    pub fn bump(&self) -> Result<u32, MapError> {
        let mut array = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let next = array.get(&0, 0)?.wrapping_add(1);
        array.set(0, next, 0)?;
        Ok(next)
    }

    /// Bumps the generation on every notification of [`GROUPS`], on a
    /// thread of its own, for as long as the agent runs. A notification
    /// the kernel could not queue (`ENOBUFS`) bumps it too.
    pub fn watch_routes(&self) -> io::Result<()> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind(&SocketAddr::new(0, 0))?;
        for group in GROUPS {
            socket.add_membership(group)?;
        }
        let generation = self.clone();
        thread::Builder::new()
            .name("xdp-generation".into())
            .spawn(move || {
                let mut buf = Vec::with_capacity(1 << 16);
                loop {
                    buf.clear();
                    match socket.recv(&mut buf, 0) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                        Err(e) => {
                            tracing::warn!(
                                error = &e as &dyn std::error::Error,
                                "route notifications stopped: XDP's flow cache is renewed each second only"
                            );
                            return;
                        }
                    }
                    if let Err(e) = generation.bump() {
                        tracing::warn!(
                            error = &e as &dyn std::error::Error,
                            "bumping the XDP flow cache's generation"
                        );
                    }
                }
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod privileged {
    use std::time::{Duration, Instant};

    use lb_test_netns::{TestNetns, require_root};

    use super::*;
    use crate::datapath::loader;

    /// Whether the generation moves past `than` within a few seconds.
    fn moves_past(g: &Generation, than: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if g.get().expect("reading the generation") != than {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn link_address_route_and_neighbour_changes_each_move_the_generation_on() {
        require_root();
        let ns = TestNetns::new();
        let mut ebpf = aya::EbpfLoader::new()
            .load(loader::object())
            .expect("loading the object (needs root: CAP_BPF)");
        let g = Generation::new(ebpf.take_map(MAP)).expect("the generation in the object");
        ns.run(|| g.watch_routes())
            .expect("subscribing in the namespace");
        for change in [
            &["link", "add", "d0", "type", "veth", "peer", "name", "d1"][..],
            &["link", "set", "d0", "up"],
            &["addr", "add", "10.9.0.1/24", "dev", "d0"],
            &["route", "add", "10.8.0.0/24", "via", "10.9.0.2"],
            &[
                "neigh",
                "replace",
                "10.9.0.2",
                "lladdr",
                "02:00:00:00:00:02",
                "dev",
                "d0",
            ],
            // The next hop's MAC address changes: the cached one is stale.
            &[
                "neigh",
                "replace",
                "10.9.0.2",
                "lladdr",
                "02:00:00:00:00:03",
                "dev",
                "d0",
            ],
            &["route", "del", "10.8.0.0/24"],
        ] {
            let before = g.get().expect("reading the generation");
            ns.ip(change);
            assert!(
                moves_past(&g, before),
                "ip {change:?} left the generation at {before}"
            );
        }
    }
}
