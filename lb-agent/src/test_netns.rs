//! A network namespace of a test's own, for the privileged tests: every
//! packet they send stays on its loopback.

use std::{
    fs::File,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use crate::sockets::DEFAULT_NETNS_DIR;

pub(crate) fn require_root() {
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        0,
        "privileged test: needs root for network namespaces, setns, BPF maps \
         and SOCK_DESTROY; run the unprivileged set with `-- --skip privileged`"
    );
}

/// `lbt<pid><tag><n>`: the test harness's orphan sweep removes what a
/// killed run leaves under such names.
pub(crate) fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("lbt{}{tag}{n}", std::process::id())
}

pub(crate) fn ip(args: &[&str]) {
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
pub(crate) struct TestNetns {
    name: String,
}

impl TestNetns {
    pub(crate) fn new() -> Self {
        let ns = Self { name: unique("sk") };
        ip(&["netns", "add", &ns.name]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn path(&self) -> PathBuf {
        Path::new(DEFAULT_NETNS_DIR).join(&self.name)
    }

    /// Runs `f` on a thread inside the namespace: sockets it opens stay in
    /// the namespace. The test's own threads never move.
    pub(crate) fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
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
