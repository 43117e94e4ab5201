//! On real namespaces, sockets and a pinned BPF map: needs root
//! (CAP_SYS_ADMIN for `ip netns` and `setns`, CAP_BPF, CAP_NET_ADMIN for
//! `SOCK_DESTROY`), and fails without it. Skipped by `cargo test -p
//! lb-agent --lib -- --skip privileged` (ARCHITECTURE.md, "Testing tiers").
//!
//! Network safety: every packet is sent on the loopback of a namespace the
//! test created; the frontends are map entries only, never addressed.

use std::{
    fs, io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket},
    path::{Path, PathBuf},
    time::Duration,
};

use aya::maps::{HashMap, MapData};
use lb_common::{REVNAT4, REVNAT6, RevNat4Key, RevNat4Value, RevNat6Key, RevNat6Value};
use lb_test_netns::{TestNetns, require_root, unique};

use super::*;

/// A directory of this test's own, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(parent: &Path) -> Self {
        let dir = parent.join(unique("sk"));
        fs::create_dir(&dir).expect("create test dir");
        Self(dir)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// LRU hash maps with `LB4_REVNAT`'s and `LB6_REVNAT`'s layouts, pinned
/// in `dir` under their names, as the agent pins them in `maps/`.
fn revnat_maps(dir: &Path) -> (RevNat4Map, RevNat6Map) {
    (lru(&dir.join(REVNAT4.pin)), lru(&dir.join(REVNAT6.pin)))
}

type RevNat4Map = HashMap<MapData, RevNat4Key, RevNat4Value>;
type RevNat6Map = HashMap<MapData, RevNat6Key, RevNat6Value>;

fn lru<K: aya::Pod, V: aya::Pod>(pin: &Path) -> HashMap<MapData, K, V> {
    const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
    let fd = crate::bpf_sys::test_map(
        BPF_MAP_TYPE_LRU_HASH,
        size_of::<K>() as u32,
        size_of::<V>() as u32,
        64,
    );
    let data = MapData::from_fd(fd).expect("map info");
    data.pin(pin).expect("pin the map");
    HashMap::try_from(aya::maps::Map::LruHashMap(data)).expect("revnat layout")
}

/// What `connect4` records for `socket` sent through `frontend` (and
/// `connect6` for a v4-mapped one).
fn record(map: &mut RevNat4Map, socket: &UdpSocket, frontend: SocketAddrV4) {
    let cookie = rustix::net::sockopt::socket_cookie(socket).expect("SO_COOKIE");
    let backend = match socket.peer_addr().expect("connected") {
        SocketAddr::V4(b) => b,
        SocketAddr::V6(b) => {
            SocketAddrV4::new(b.ip().to_ipv4_mapped().expect("v4-mapped"), b.port())
        }
    };
    let key = RevNat4Key {
        cookie,
        addr_be: backend.ip().octets(),
        port_be: backend.port().to_be(),
        _pad0: [0; 2],
    };
    let value = RevNat4Value {
        addr_be: frontend.ip().octets(),
        port_be: frontend.port().to_be(),
        _pad0: [0; 2],
    };
    map.insert(key, value, 0).expect("revnat insert");
}

/// What `connect6` records for `socket` sent through IPv6 `frontend`.
fn record6(map: &mut RevNat6Map, socket: &UdpSocket, frontend: SocketAddr) {
    let cookie = rustix::net::sockopt::socket_cookie(socket).expect("SO_COOKIE");
    let (SocketAddr::V6(backend), SocketAddr::V6(frontend)) =
        (socket.peer_addr().expect("connected"), frontend)
    else {
        panic!("IPv6 only");
    };
    let key = RevNat6Key {
        cookie,
        addr_be: backend.ip().octets(),
        port_be: backend.port().to_be(),
        _pad0: [0; 6],
    };
    let value = RevNat6Value {
        addr_be: frontend.ip().octets(),
        port_be: frontend.port().to_be(),
        _pad0: [0; 2],
    };
    map.insert(key, value, 0).expect("revnat insert");
}

/// A UDP "backend" on `ip` (a loopback address) and a client connected to
/// it, both opened inside `ns`.
fn backend_and_client(ns: &TestNetns, ip: impl Into<IpAddr>) -> (UdpSocket, UdpSocket) {
    backend_and_client_at(ns, ip.into(), |backend| backend)
}

/// As [`backend_and_client`], the client (of the backend's family, or
/// AF_INET6 for a v4-mapped target) connecting to `target(backend address)`.
fn backend_and_client_at(
    ns: &TestNetns,
    ip: IpAddr,
    target: fn(SocketAddr) -> SocketAddr,
) -> (UdpSocket, UdpSocket) {
    ns.run(|| {
        let backend = UdpSocket::bind((ip, 0)).expect("bind backend");
        let to = target(backend.local_addr().unwrap());
        let any: IpAddr = if to.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        let client = UdpSocket::bind((any, 0)).expect("bind client");
        client.connect(to).expect("connect");
        backend
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (backend, client)
    })
}

/// The client can still talk to its backend.
fn assert_alive(what: &str, backend: &UdpSocket, client: &UdpSocket) {
    client
        .send(what.as_bytes())
        .unwrap_or_else(|e| panic!("{what}: send: {e}"));
    let mut buf = [0u8; 64];
    let n = backend
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("{what}: the backend got nothing: {e}"));
    assert_eq!(&buf[..n], what.as_bytes());
}

/// The client's socket was destroyed: its next receive says so, and it is
/// no longer connected, so sends fail until the application reconnects.
fn assert_aborted(what: &str, client: &UdpSocket) {
    client.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let e = client
        .recv(&mut buf)
        .expect_err("a destroyed socket cannot receive");
    assert_eq!(e.raw_os_error(), Some(libc::ECONNABORTED), "{what}: {e}");
    let e = client
        .send(b"x")
        .expect_err("a destroyed socket cannot send");
    assert_eq!(e.raw_os_error(), Some(libc::EDESTADDRREQ), "{what}: {e}");
    let e = client.peer_addr().expect_err("disconnected");
    assert_eq!(e.kind(), io::ErrorKind::NotConnected, "{what}: {e}");
}

const STALE_VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 10), 53);
const LIVE_VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 11), 53);
const UNNAMED_VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 12), 53);

/// A request naming `frontends`.
fn request(frontends: &[SocketAddrV4]) -> StaleUdp {
    frontends.iter().map(|&f| f.into()).collect()
}

/// Only the namespaces in `dirs`, each time it is listed.
fn sources_in(dirs: Vec<PathBuf>) -> NetnsSources {
    NetnsSources {
        own: false,
        dirs,
        proc: None,
    }
}

#[test]
fn stale_sockets_are_destroyed_in_every_namespace_and_the_others_survive() {
    require_root();
    let (a, b) = (TestNetns::new(), TestNetns::new());
    let pins = TestDir::new(Path::new("/sys/fs/bpf"));
    let (mut map, _map6) = revnat_maps(&pins.0);

    // Through the frontend with no serving backend left: stale.
    let (stale_backend, stale_a) = backend_and_client(&a, Ipv4Addr::new(127, 0, 0, 1));
    record(&mut map, &stale_a, STALE_VIP);
    // In another namespace, through a frontend that serves other IPs now.
    let (_, stale_b) = backend_and_client(&b, Ipv4Addr::new(127, 0, 0, 3));
    record(&mut map, &stale_b, LIVE_VIP);
    // Its backend still serves.
    let (serving_backend, serving) = backend_and_client(&a, Ipv4Addr::new(127, 0, 0, 2));
    record(&mut map, &serving, LIVE_VIP);
    // Connected without the load balancer: no reverse-NAT entry.
    let (direct_backend, direct) = backend_and_client(&a, Ipv4Addr::new(127, 0, 0, 1));
    // Through a frontend the request does not name.
    let (unnamed_backend, unnamed) = backend_and_client(&b, Ipv4Addr::new(127, 0, 0, 4));
    record(&mut map, &unnamed, UNNAMED_VIP);
    assert_alive("before", &stale_backend, &stale_a);

    // STALE_VIP serves nothing any more; LIVE_VIP serves 127.0.0.2 only.
    let stale = request(&[STALE_VIP, LIVE_VIP]);
    let now = UdpServing::default();
    now.narrow([(LIVE_VIP.into(), &[Ipv4Addr::new(127, 0, 0, 2).into()][..])]);
    let sources = sources_in(vec![PathBuf::from(DEFAULT_NETNS_DIR)]);
    let report = destroy_stale(&pins.0, None, &stale, &now, &sources).expect("pass");

    // Other tests' namespaces may be in the directory too; only this
    // test's map entries can match.
    assert_eq!(report.sockets_destroyed, 2, "{report:?}");
    assert_eq!(report.destroy_failed, 0, "{report:?}");
    assert!(report.netns_visited >= 2, "{report:?}");
    assert!(report.sockets_examined >= 5, "{report:?}");
    assert_aborted("stale in a", &stale_a);
    assert_aborted("stale in b", &stale_b);
    assert_alive("serving", &serving_backend, &serving);
    assert_alive("direct", &direct_backend, &direct);
    assert_alive("unnamed", &unnamed_backend, &unnamed);

    // A second pass finds nothing more: destroyed sockets are disconnected.
    let again = destroy_stale(&pins.0, None, &stale, &now, &sources).expect("second pass");
    assert_eq!(again.sockets_destroyed, 0, "{again:?}");
}

#[test]
fn each_namespace_is_visited_once_and_vanished_ones_are_skipped() {
    require_root();
    let (a, b) = (TestNetns::new(), TestNetns::new());
    let pins = TestDir::new(Path::new("/sys/fs/bpf"));
    let _maps = revnat_maps(&pins.0);
    let (_backend, _client) = backend_and_client(&a, Ipv4Addr::new(127, 0, 0, 1));

    // a twice, b once, a namespace deleted since, and a plain file (what
    // an unmounted bind mount leaves).
    let dir = TestDir::new(&std::env::temp_dir());
    std::os::unix::fs::symlink(a.path(), dir.0.join("a")).unwrap();
    std::os::unix::fs::symlink(a.path(), dir.0.join("a-again")).unwrap();
    std::os::unix::fs::symlink(b.path(), dir.0.join("b")).unwrap();
    let gone = TestNetns::new();
    std::os::unix::fs::symlink(gone.path(), dir.0.join("gone")).unwrap();
    drop(gone);
    fs::write(dir.0.join("plain"), "").unwrap();

    let sources = sources_in(vec![dir.0.clone(), dir.0.clone()]);
    let report = destroy_stale(
        &pins.0,
        None,
        &request(&[STALE_VIP]),
        &UdpServing::default(),
        &sources,
    )
    .expect("pass");
    assert_eq!(report.netns_visited, 2, "{report:?}");
    // The plain file once (its identity is remembered), the deleted
    // namespace each time it is listed (it has none).
    assert_eq!(report.netns_skipped, 3, "{report:?}");
    assert_eq!(report.netns_failed, 0, "{report:?}");
    assert_eq!(report.sockets_examined, 1, "the one connected socket, once");
    assert_eq!(report.sockets_destroyed, 0, "{report:?}");
}

#[test]
fn the_default_sources_cover_the_host_and_every_namespace() {
    require_root();
    let a = TestNetns::new();
    let pins = TestDir::new(Path::new("/sys/fs/bpf"));
    let (mut map, _map6) = revnat_maps(&pins.0);
    let (_, stale_a) = backend_and_client(&a, Ipv4Addr::new(127, 0, 0, 1));
    record(&mut map, &stale_a, STALE_VIP);
    // In the host namespace, on loopback. No packet: a UDP connect sends
    // nothing, and the only send here comes after the destroy, and fails.
    let host_backend = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let host_client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    host_client
        .connect(host_backend.local_addr().unwrap())
        .unwrap();
    record(&mut map, &host_client, STALE_VIP);

    let report = destroy_stale(
        &pins.0,
        None,
        &request(&[STALE_VIP]),
        &UdpServing::default(),
        &NetnsSources::default(),
    )
    .expect("pass");
    assert_eq!(report.sockets_destroyed, 2, "{report:?}");
    // Not `netns_failed == 0`: a process with capabilities this one lacks
    // (a sandbox's pid 1, say) refuses its ns/net even to root; that is
    // counted and the pass goes on.
    assert!(report.netns_visited >= 2, "{report:?}");
    assert_aborted("stale in a", &stale_a);
    assert_aborted("stale in the host", &host_client);
}

#[test]
fn stale_ipv6_and_v4_mapped_sockets_are_destroyed_and_the_others_survive() {
    require_root();
    let a = TestNetns::new();
    let pins = TestDir::new(Path::new("/sys/fs/bpf"));
    let (mut map4, mut map6) = revnat_maps(&pins.0);
    let stale6: SocketAddr = "[fd00:96::10]:53".parse().unwrap();
    let live6: SocketAddr = "[fd00:96::11]:53".parse().unwrap();

    // IPv6, through a frontend with no serving backend left: stale.
    let (stale_backend, stale) = backend_and_client(&a, Ipv6Addr::LOCALHOST);
    record6(&mut map6, &stale, stale6);
    // IPv6, its backend still serving.
    let (serving_backend, serving) = backend_and_client(&a, Ipv6Addr::LOCALHOST);
    record6(&mut map6, &serving, live6);
    // An AF_INET6 socket that reached an IPv4 frontend through ::ffff: is
    // in LB4_REVNAT (connect6 translated it through the IPv4 maps).
    let mapped = |b: SocketAddr| -> SocketAddr {
        let SocketAddr::V4(b) = b else { unreachable!() };
        SocketAddr::new(b.ip().to_ipv6_mapped().into(), b.port())
    };
    let (_, stale_mapped) = backend_and_client_at(&a, Ipv4Addr::LOCALHOST.into(), mapped);
    record(&mut map4, &stale_mapped, STALE_VIP);
    assert_alive("before", &stale_backend, &stale);

    let request: StaleUdp = [stale6, live6, STALE_VIP.into()].into_iter().collect();
    let now = UdpServing::default();
    now.narrow([(live6, &[IpAddr::from(Ipv6Addr::LOCALHOST)][..])]);
    // This namespace only, so the counts are exact.
    let dir = TestDir::new(&std::env::temp_dir());
    std::os::unix::fs::symlink(a.path(), dir.0.join("a")).unwrap();
    let sources = sources_in(vec![dir.0.clone()]);
    let report = destroy_stale(&pins.0, None, &request, &now, &sources).expect("pass");
    assert_eq!(report.sockets_destroyed, 2, "{report:?}");
    assert_eq!(report.sockets_examined, 3, "{report:?}");
    assert_aborted("stale IPv6", &stale);
    assert_aborted("stale v4-mapped", &stale_mapped);
    assert_alive("serving IPv6", &serving_backend, &serving);
}
