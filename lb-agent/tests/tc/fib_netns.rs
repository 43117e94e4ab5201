//! A network namespace for the XDP program's FIB lookups under
//! `BPF_PROG_TEST_RUN`: a device `x0` (the node's external device;
//! backends on other nodes and clients behind a router on it), `x1` (local
//! pods) and `x2` (another external device, to a third network of
//! backends). Only routes and neighbours: no packet is ever sent in it.
//! Shared by `xdp_programs.rs` and the `tc_cost` bench.

use std::{fs::File, process::Command};

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test's network namespace, deleted on drop (also when the test
/// panics). Only routes and neighbours: no packet is ever sent in it.
pub(crate) struct Netns(String);

impl Netns {
    pub(crate) fn new() -> Self {
        let ns = Self(format!("lbt{}xdp{}", std::process::id(), fastrand_tag()));
        ip(&["netns", "add", &ns.0]);
        let n = ns.0.as_str();
        for cmd in [
            "link set lo up",
            "link add x0 address 02:00:00:00:00:0a type veth peer name x0p",
            "link add x1 type veth peer name x1p",
            "link add x2 address 02:00:00:00:00:0b type veth peer name x2p",
            "link set x2 up",
            "link set x2p up",
            "addr add 192.0.3.10/24 dev x2",
            "neigh add 192.0.3.1 lladdr 02:00:00:00:00:33 dev x2 nud permanent",
            "route add 10.3.0.0/24 via 192.0.3.1 dev x2",
            "link set x0 up",
            "link set x0p up",
            "link set x1 up",
            "link set x1p up",
            "addr add 192.0.2.10/24 dev x0",
            "addr add fd00:57::1/64 dev x0 nodad",
            "addr add 10.1.0.1/24 dev x1",
            "addr add fd42:1::1/64 dev x1 nodad",
            "neigh add 192.0.2.1 lladdr 02:00:00:00:00:99 dev x0 nud permanent",
            "neigh add fd00:57::fe lladdr 02:00:00:00:00:99 dev x0 nud permanent",
            "neigh add 10.1.0.5 lladdr 02:00:00:00:00:55 dev x1 nud permanent",
            "neigh add fd42:1::5 lladdr 02:00:00:00:00:55 dev x1 nud permanent",
            "route add 10.2.0.0/24 via 192.0.2.1 dev x0",
            "route add 198.51.100.0/24 via 192.0.2.1 dev x0",
            "route add fd42:2::/64 via fd00:57::fe dev x0",
            "route add 2001:db8:c::/64 via fd00:57::fe dev x0",
        ] {
            let mut args = vec!["-n", n];
            args.extend(cmd.split(' '));
            ip(&args);
        }
        for setting in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
            let out = Command::new("ip")
                .args(["netns", "exec", n, "sysctl", "-qw", setting])
                .output()
                .expect("running sysctl");
            assert!(out.status.success(), "sysctl {setting}");
        }
        ns
    }

    /// The ifindex of `dev` in the namespace.
    pub(crate) fn ifindex(&self, dev: &str) -> u32 {
        let out = Command::new("ip")
            .args(["-n", &self.0, "-o", "link", "show", dev])
            .output()
            .expect("running ip");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split(':').next().unwrap().trim().parse().unwrap()
    }

    /// Moves the calling thread into the namespace for good: it outlives
    /// this handle (which only deletes its name) until the thread ends.
    pub(crate) fn enter(&self) {
        let file = File::open(format!("/var/run/netns/{}", self.0)).expect("the netns");
        move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(LinkNameSpaceType::Network),
        )
        .expect("setns (needs root)");
    }

    /// Runs `f` on a thread inside the namespace, where the program's FIB
    /// lookups happen.
    pub(crate) fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter();
                f()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A tag unique within this process.
fn fastrand_tag() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
