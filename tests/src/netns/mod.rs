//! The topology builder: network namespaces owned by one test
//! ([`Namespaces`], removed on drop), veth pairs between them ([`veth`]),
//! and running commands inside them ([`ip`], [`exec`], [`within`]). The
//! ready-made [`Topology`] (a star of hosts around a router) and the
//! two-node bed (`crate::two_nodes`) are built from these. Nothing here
//! touches the root namespace: every interface, address and route is
//! created inside a namespace of the test.

mod foreign_cni;
mod namespaces;
mod star;
mod veth_xdp;

pub use foreign_cni::{foreign_cni_dnat, foreign_cni_hits};
pub use namespaces::{End, Namespaces, veth};
pub use star::{Topology, v6_of};
pub use veth_xdp::{XdpPass, tx_checksum_off, xdp_pass};

use std::process::Command;

use anyhow::{Context as _, bail};
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

/// Runs `f` on a thread of its own that has entered network namespace `ns`
/// (under /run/netns) with setns(2): only that thread moves, so the caller's
/// sockets stay where they are.
pub fn within<T: Send>(
    ns: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    let file =
        std::fs::File::open(format!("/run/netns/{ns}")).with_context(|| format!("netns {ns}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            use std::os::fd::AsRawFd as _;
            // SAFETY: a valid netns fd, open for the call; setns moves only
            // this thread.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                bail!("setns {ns}: {}", std::io::Error::last_os_error());
            }
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread in {ns} panicked"))?
    })
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
