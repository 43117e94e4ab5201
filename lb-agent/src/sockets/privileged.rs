//! On real namespaces, sockets and a pinned BPF map: needs root
//! (CAP_SYS_ADMIN for `ip netns` and `setns`, CAP_BPF, CAP_NET_ADMIN for
//! `SOCK_DESTROY`), and fails without it. Skipped by `cargo test -p
//! lb-agent --lib -- --skip privileged` (ARCHITECTURE.md, "Testing tiers").
//!
//! Network safety: every packet is sent on the loopback of a namespace the
//! test created; the frontends are map entries only, never addressed.

use std::{
    fs::{self, File},
    io,
    net::{Ipv4Addr, SocketAddrV4, UdpSocket},
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use aya::maps::{HashMap, MapData};
use lb_common::{RevNat4Key, RevNat4Value};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use super::*;

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "privileged test: needs root for network namespaces, setns, BPF maps \
         and SOCK_DESTROY; run the unprivileged set with `-- --skip privileged`"
    );
}

/// `lbt<pid><tag><n>`: the test harness's orphan sweep removes what a
/// killed run leaves under such names.
fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("lbt{}{tag}{n}", std::process::id())
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace made with `ip netns add`, loopback up; deleted on
/// drop, also when the test panics.
struct TestNetns {
    name: String,
}

impl TestNetns {
    fn new() -> Self {
        let ns = Self { name: unique("sk") };
        ip(&["netns", "add", &ns.name]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    fn path(&self) -> PathBuf {
        Path::new(DEFAULT_NETNS_DIR).join(&self.name)
    }

    /// Runs `f` on a thread inside the namespace: sockets it opens stay in
    /// the namespace. The test's own threads never move.
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = File::open(self.path()).expect("open netns");
        std::thread::scope(|s| {
            s.spawn(move || {
                move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
                    .expect("setns");
                f()
            })
            .join()
            .expect("netns thread")
        })
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

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

/// An LRU hash map with `LB4_REVNAT`'s layout, pinned at `pin`.
fn revnat_map(pin: &Path) -> HashMap<MapData, RevNat4Key, RevNat4Value> {
    const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
    let fd = crate::datapath::test_map(
        BPF_MAP_TYPE_LRU_HASH,
        size_of::<RevNat4Key>() as u32,
        size_of::<RevNat4Value>() as u32,
        64,
    );
    let data = MapData::from_fd(fd).expect("map info");
    data.pin(pin).expect("pin the map");
    HashMap::try_from(aya::maps::Map::LruHashMap(data)).expect("revnat layout")
}

/// What `connect4` records for `socket` sent through `frontend`.
fn record(
    map: &mut HashMap<MapData, RevNat4Key, RevNat4Value>,
    socket: &UdpSocket,
    frontend: SocketAddrV4,
) {
    let cookie = rustix::net::sockopt::socket_cookie(socket).expect("SO_COOKIE");
    let std::net::SocketAddr::V4(backend) = socket.peer_addr().expect("connected") else {
        panic!("IPv4 only");
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

/// A UDP "backend" on `ip` (a loopback address) and a client connected to
/// it, both opened inside `ns`.
fn backend_and_client(ns: &TestNetns, ip: Ipv4Addr) -> (UdpSocket, UdpSocket) {
    ns.run(|| {
        let backend = UdpSocket::bind((ip, 0)).expect("bind backend");
        let client = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind client");
        client
            .connect(backend.local_addr().unwrap())
            .expect("connect");
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
    let pin = pins.0.join("LB4_REVNAT");
    let mut map = revnat_map(&pin);

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
    let report = destroy_stale(&pin, &stale, &now, &sources).expect("pass");

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
    let again = destroy_stale(&pin, &stale, &now, &sources).expect("second pass");
    assert_eq!(again.sockets_destroyed, 0, "{again:?}");
}

#[test]
fn each_namespace_is_visited_once_and_vanished_ones_are_skipped() {
    require_root();
    let (a, b) = (TestNetns::new(), TestNetns::new());
    let pins = TestDir::new(Path::new("/sys/fs/bpf"));
    let pin = pins.0.join("LB4_REVNAT");
    let _map = revnat_map(&pin);
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
        &pin,
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
    let pin = pins.0.join("LB4_REVNAT");
    let mut map = revnat_map(&pin);
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
        &pin,
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
