//! Star topology of network namespaces: one `hub` router namespace, and one
//! leaf namespace per host, each with a /32 address on `eth0` and a default
//! route to the hub (169.254.1.1), Calico style. Every host is dual-stack:
//! it also owns [`v6_of`] its IPv4 address (`fd00::a.b.c.d/128`, from the
//! unique-local range), with the hub at `fd00::1`; duplicate address
//! detection is off so that no test waits for it. Nothing touches the root
//! namespace. An address no leaf owns (an untranslated VIP) gets "network
//! unreachable" from the hub and never leaves.

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    process::Command,
};

use anyhow::{Context as _, bail};

const GATEWAY: &str = "169.254.1.1";
const GATEWAY6: &str = "fd00::1";

/// A host's IPv6 address: `fd00::/96` followed by its IPv4 address.
pub fn v6_of(ip: Ipv4Addr) -> Ipv6Addr {
    let [a, b, c, d] = ip.octets();
    Ipv6Addr::new(
        0xfd00,
        0,
        0,
        0,
        0,
        0,
        u16::from_be_bytes([a, b]),
        u16::from_be_bytes([c, d]),
    )
}

/// Turns duplicate address detection off for interfaces created in `ns`
/// from now on.
fn no_dad(ns: &str) -> anyhow::Result<()> {
    exec(
        ns,
        &[
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_dad=0",
        ],
    )
    .map(drop)
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

/// The namespaces of one test; all removed on drop.
pub struct Topology {
    prefix: String,
    hub: String,
    leaves: Vec<(String, Ipv4Addr)>,
    /// Hosts added so far: names the hub's veth ends, never reused when
    /// hosts are removed.
    added: usize,
}

impl Topology {
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        let hub = format!("{prefix}-hub");
        ip(&["netns", "add", &hub])?;
        let topo = Self {
            prefix: prefix.to_owned(),
            hub,
            leaves: Vec::new(),
            added: 0,
        };
        ip(&["-n", &topo.hub, "link", "set", "lo", "up"])?;
        exec(
            &topo.hub,
            &[
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1",
            ],
        )?;
        no_dad(&topo.hub)?;
        Ok(topo)
    }

    pub fn hub(&self) -> &str {
        &self.hub
    }

    /// Adds a host `name` owning `addr`; returns its namespace name.
    pub fn add_host(&mut self, name: &str, addr: Ipv4Addr) -> anyhow::Result<String> {
        let ns = format!("{}-{name}", self.prefix);
        ip(&["netns", "add", &ns])?;
        self.leaves.push((ns.clone(), addr));
        no_dad(&ns)?;
        self.added += 1;
        let hub_if = format!("v{}", self.added);
        let a = addr.to_string();
        let host = format!("{a}/32");
        let host6 = format!("{}/128", v6_of(addr));
        ip(&[
            "-n", &self.hub, "link", "add", &hub_if, "type", "veth", "peer", "name", "eth0",
            "netns", &ns,
        ])?;
        ip(&[
            "-n",
            &self.hub,
            "addr",
            "add",
            &format!("{GATEWAY}/32"),
            "dev",
            &hub_if,
        ])?;
        ip(&["-n", &self.hub, "link", "set", &hub_if, "up"])?;
        ip(&["-n", &self.hub, "route", "add", &host, "dev", &hub_if])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "addr", "add", &host, "dev", "eth0"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip(&[
            "-n", &ns, "route", "add", GATEWAY, "dev", "eth0", "scope", "link",
        ])?;
        ip(&[
            "-n", &ns, "route", "add", "default", "via", GATEWAY, "dev", "eth0",
        ])?;
        let gateway6 = format!("{GATEWAY6}/128");
        ip(&[
            "-n", &self.hub, "addr", "add", &gateway6, "dev", &hub_if, "nodad",
        ])?;
        ip(&["-n", &self.hub, "route", "add", &host6, "dev", &hub_if])?;
        ip(&["-n", &ns, "addr", "add", &host6, "dev", "eth0", "nodad"])?;
        ip(&["-n", &ns, "route", "add", GATEWAY6, "dev", "eth0"])?;
        ip(&[
            "-n", &ns, "route", "add", "default", "via", GATEWAY6, "dev", "eth0",
        ])?;
        Ok(ns)
    }

    /// Removes the host whose namespace is `ns` (its veth and its route in
    /// the hub go with the namespace).
    pub fn remove_host(&mut self, ns: &str) -> anyhow::Result<()> {
        self.leaves.retain(|(n, _)| n != ns);
        ip(&["netns", "del", ns])
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth ends and routes with it.
        for (ns, _) in self.leaves.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

/// Plays the CNI that owns an excluded pod network: DNATs `vip:port` to
/// `backend` in the hub with iptables, and counts what arrives untranslated.
pub fn foreign_cni_dnat(hub: &str, vip: &str, port: u16, backend: &str) -> anyhow::Result<()> {
    let port = port.to_string();
    exec(
        hub,
        &[
            "iptables",
            "-t",
            "nat",
            "-A",
            "PREROUTING",
            "-d",
            vip,
            "-p",
            "tcp",
            "--dport",
            &port,
            "-j",
            "DNAT",
            "--to-destination",
            backend,
        ],
    )?;
    Ok(())
}

/// Packets (first of each connection) the foreign CNI's DNAT rule saw.
pub fn foreign_cni_hits(hub: &str) -> anyhow::Result<u64> {
    let out = exec(
        hub,
        &[
            "iptables",
            "-t",
            "nat",
            "-L",
            "PREROUTING",
            "-n",
            "-v",
            "-x",
        ],
    )?;
    Ok(out
        .lines()
        .filter(|l| l.contains("DNAT"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum())
}
