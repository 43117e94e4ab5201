//! Network namespaces for the privileged tests, shared by lb-agent's unit
//! tests, the tc/XDP test bed (`lb-testbed`) and the harness (`lb-tests`):
//!
//! * [`require_root`]: privileged tests fail loudly (never skip) without
//!   root.
//! * [`unique`]: names `lbt<pid><tag><n>`, which the harness's orphan sweep
//!   recognises.
//! * [`TestNetns`]: one namespace of a test's own, deleted on drop (also
//!   when the test panics); [`Namespaces`]: a test's set of them.
//! * [`veth`] pairs between namespaces; [`ip`], [`exec`], [`sysctl`] and
//!   [`within`] run commands and threads inside them.
//!
//! Nothing here touches the root namespace: every interface, address and
//! route is created inside a namespace of the test.

use std::{
    fs::File,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{Context as _, bail};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

/// Where `ip netns add` mounts namespaces (iproute2's `NETNS_RUN_DIR`).
pub const NETNS_DIR: &str = "/var/run/netns";

/// Fails loudly (never skips) when the test lacks root.
pub fn require_root() {
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        0,
        "privileged test: needs root (CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN) for network \
         namespaces, setns, cgroups, BPF maps and SOCK_DESTROY (lb-agent's unprivileged \
         unit tests: `cargo test -p lb-agent --lib -- --skip privileged`)"
    );
}

/// `lbt<pid><tag><n>`, unique within this process (tags start with a
/// letter): the harness's orphan sweep removes what a killed run leaves
/// under such names.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("lbt{}{tag}{n}", std::process::id())
}

/// Runs `ip` with args; fails with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs a command inside a namespace with `ip netns exec`.
pub fn exec(ns: &str, cmd: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .context("running ip netns exec")?;
    if !out.status.success() {
        bail!(
            "{} in {ns}: {}",
            cmd.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Sets sysctls (`key=value`) inside namespace `ns`.
pub fn sysctl(ns: &str, settings: &[&str]) -> anyhow::Result<()> {
    let mut cmd = vec!["sysctl", "-qw"];
    cmd.extend_from_slice(settings);
    exec(ns, &cmd).map(drop)
}

/// Turns duplicate address detection off for interfaces created in `ns`
/// from now on.
pub fn no_dad(ns: &str) -> anyhow::Result<()> {
    sysctl(
        ns,
        &[
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_dad=0",
        ],
    )
}

/// Moves the calling thread into network namespace `ns` (under
/// [`NETNS_DIR`]) for good.
pub fn enter(ns: &str) -> anyhow::Result<()> {
    let file = File::open(Path::new(NETNS_DIR).join(ns)).with_context(|| format!("netns {ns}"))?;
    move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
        .with_context(|| format!("setns {ns}"))
}

/// Runs `f` on a thread of its own that has entered network namespace `ns`
/// with setns(2): only that thread moves, so the caller's sockets stay
/// where they are.
pub fn within<T: Send>(
    ns: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    let file = File::open(Path::new(NETNS_DIR).join(ns)).with_context(|| format!("netns {ns}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
                .with_context(|| format!("setns {ns}"))?;
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread in {ns} panicked"))?
    })
}

/// A network namespace made with `ip netns add`, loopback up; deleted on
/// drop, also when the test panics.
pub struct TestNetns {
    name: String,
}

impl TestNetns {
    /// A namespace named by [`unique`]`("sk")`; panics if it cannot be
    /// made.
    #[expect(
        clippy::new_without_default,
        reason = "every call makes a namespace: not a default value"
    )]
    pub fn new() -> Self {
        Self::tagged("sk")
    }

    /// A namespace named by [`unique`]`(tag)`; panics if it cannot be made.
    pub fn tagged(tag: &str) -> Self {
        Self::create(unique(tag)).expect("making the test's network namespace")
    }

    /// Makes namespace `name`, loopback up (deleted again if that fails).
    pub fn create(name: String) -> anyhow::Result<Self> {
        ip(&["netns", "add", &name])?;
        let ns = Self { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file under [`NETNS_DIR`].
    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// Runs `ip -n <name>` with args; panics with its stderr if it fails.
    pub fn ip(&self, args: &[&str]) {
        ip(&[&["-n", self.name.as_str()][..], args].concat()).unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// The ifindex of `dev` in the namespace.
    pub fn ifindex(&self, dev: &str) -> u32 {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-o", "link", "show", dev])
            .output()
            .expect("running ip");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split(':').next().unwrap().trim().parse().unwrap()
    }

    /// Moves the calling thread into the namespace for good: it outlives
    /// this handle (which only deletes its name) until the thread ends.
    pub fn enter(&self) {
        enter(&self.name).expect("setns (needs root)");
    }

    /// Runs `f` on a thread inside the namespace: sockets it opens stay in
    /// the namespace. The test's own threads never move.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
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

    /// Deletes the namespace now.
    pub fn delete(self) -> anyhow::Result<()> {
        let mut this = std::mem::ManuallyDrop::new(self);
        ip(&["netns", "del", &std::mem::take(&mut this.name)])
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Namespaces `<prefix>-<host>`, created by [`Self::add`] and all deleted
/// on drop (last created first), which takes their interfaces and routes
/// with them.
pub struct Namespaces {
    prefix: String,
    list: Vec<TestNetns>,
}

impl Namespaces {
    /// An empty set; `prefix` should come from [`unique`] (the harness's,
    /// which also sweeps orphans), so that parallel tests never share a
    /// name.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            list: Vec::new(),
        }
    }

    /// The name of `host`'s namespace (whether or not it exists).
    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    /// Creates `host`'s namespace with its loopback up; returns its name.
    pub fn add(&mut self, host: &str) -> anyhow::Result<String> {
        let ns = TestNetns::create(self.ns(host))?;
        let name = ns.name.clone();
        self.list.push(ns);
        Ok(name)
    }

    /// Deletes namespace `ns` now.
    pub fn remove(&mut self, ns: &str) -> anyhow::Result<()> {
        match self.list.iter().position(|n| n.name == ns) {
            Some(i) => self.list.remove(i).delete(),
            None => ip(&["netns", "del", ns]),
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        while let Some(ns) = self.list.pop() {
            drop(ns);
        }
    }
}

/// One end of a veth pair: (namespace, interface name, address with prefix
/// length, if any).
pub type End<'a> = (&'a str, &'a str, Option<&'a str>);

/// A veth pair between two namespaces, both ends up with their addresses.
pub fn veth(a: End<'_>, b: End<'_>) -> anyhow::Result<()> {
    // Created under temporary names, so that both ends may be called the
    // same (`eth0`) in their namespaces.
    ip(&[
        "link", "add", "name", "lbtveth0", "netns", a.0, "type", "veth", "peer", "name",
        "lbtveth1", "netns", b.0,
    ])?;
    for ((ns, dev, addr), tmp) in [(a, "lbtveth0"), (b, "lbtveth1")] {
        ip(&["-n", ns, "link", "set", tmp, "name", dev])?;
        if let Some(addr) = addr {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
        }
        ip(&["-n", ns, "link", "set", dev, "up"])?;
    }
    Ok(())
}

/// Real namespaces: needs root, and fails without it.
#[cfg(test)]
mod privileged {
    use super::*;

    #[test]
    fn namespaces_go_when_removed_and_the_rest_on_drop() {
        require_root();
        let prefix = unique("ns");
        let mut set = Namespaces::new(&prefix);
        let a = set.add("a").expect("add a");
        let b = set.add("b").expect("add b");
        let exists = |ns: &str| Path::new(NETNS_DIR).join(ns).exists();
        assert!(exists(&a) && exists(&b));
        set.remove(&a).expect("remove a");
        assert!(!exists(&a) && exists(&b));
        assert!(set.remove(&a).is_err(), "a is gone already");
        let answer = within(&b, || Ok(42)).expect("a thread in b");
        assert_eq!(answer, 42);
        drop(set);
        assert!(!exists(&b));
    }

    #[test]
    fn a_test_netns_runs_threads_inside_and_goes_on_drop_or_delete() {
        require_root();
        let ns = TestNetns::new();
        let path = ns.path();
        assert!(path.exists());
        ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]);
        let index = ns.ifindex("d0");
        assert!(index > 1, "lo is 1");
        // A thread's own view: /proc/thread-self/net is its namespace's.
        let devices = || std::fs::read_to_string("/proc/thread-self/net/dev").expect("net/dev");
        assert!(ns.run(devices).contains("d0:"));
        assert!(
            !devices().contains("d0:"),
            "the test's own thread never moved"
        );
        drop(ns);
        assert!(!path.exists());
        let ns = TestNetns::tagged("del");
        let path = ns.path();
        ns.delete().expect("delete");
        assert!(!path.exists());
    }
}
