//! A star of network namespaces: one `hub` router namespace, and one
//! leaf namespace per host, each with a /32 address on `eth0` and a default
//! route to the hub (169.254.1.1), Calico style. Every host is dual-stack:
//! it also owns [`v6_of`] its IPv4 address (`fd00::a.b.c.d/128`, from the
//! unique-local range), with the hub at `fd00::1`; duplicate address
//! detection is off so that no test waits for it. An address no leaf owns
//! (an untranslated VIP) gets "network unreachable" from the hub and never
//! leaves.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{Namespaces, ip, no_dad, sysctl, veth};

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

/// The hub and its hosts; all removed on drop.
pub struct Topology {
    namespaces: Namespaces,
    hub: String,
    /// Hosts added so far: names the hub's veth ends, never reused when
    /// hosts are removed.
    added: usize,
}

impl Topology {
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        let mut namespaces = Namespaces::new(prefix);
        let hub = namespaces.add("hub")?;
        sysctl(
            &hub,
            &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
        )?;
        no_dad(&hub)?;
        Ok(Self {
            namespaces,
            hub,
            added: 0,
        })
    }

    pub fn hub(&self) -> &str {
        &self.hub
    }

    /// Adds a host `name` owning `addr`; returns its namespace name.
    pub fn add_host(&mut self, name: &str, addr: Ipv4Addr) -> anyhow::Result<String> {
        let ns = self.namespaces.add(name)?;
        no_dad(&ns)?;
        self.added += 1;
        let hub_if = format!("v{}", self.added);
        let host = format!("{addr}/32");
        let host6 = format!("{}/128", v6_of(addr));
        veth(
            (&self.hub, &hub_if, Some(&format!("{GATEWAY}/32"))),
            (&ns, "eth0", Some(&host)),
        )?;
        ip(&["-n", &self.hub, "route", "add", &host, "dev", &hub_if])?;
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
        self.namespaces.remove(ns)
    }
}
