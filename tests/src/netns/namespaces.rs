//! The network namespaces of one test, and veth pairs between them.

use super::ip;

/// Namespaces `<prefix>-<host>`, created by [`Self::add`] and all deleted
/// on drop (last created first), which takes their interfaces and routes
/// with them.
pub struct Namespaces {
    prefix: String,
    names: Vec<String>,
}

impl Namespaces {
    /// An empty set; `prefix` should come from [`crate::unique`], so that
    /// parallel tests never share a name and orphans are swept.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            names: Vec::new(),
        }
    }

    /// The name of `host`'s namespace (whether or not it exists).
    pub fn ns(&self, host: &str) -> String {
        format!("{}-{host}", self.prefix)
    }

    /// Creates `host`'s namespace with its loopback up; returns its name.
    pub fn add(&mut self, host: &str) -> anyhow::Result<String> {
        let ns = self.ns(host);
        ip(&["netns", "add", &ns])?;
        self.names.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Deletes namespace `ns` now.
    pub fn remove(&mut self, ns: &str) -> anyhow::Result<()> {
        self.names.retain(|n| n != ns);
        ip(&["netns", "del", ns])
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.names.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
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
