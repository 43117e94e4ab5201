//! The kernel's own counters of a network namespace, as `nstat` reads
//! them (`/proc/net/snmp`, `/proc/net/snmp6`): where the kernel dropped a
//! datagram that a test's clients or pods sent or should have received. A
//! failed request next to a rise of `Udp.RcvbufErrors` in the namespace
//! of the socket that should have read the reply (or the request) was
//! lost by the kernel, outside the agent's programs.

use std::{collections::BTreeMap, fmt::Write as _, fs};

use anyhow::Context as _;

use crate::netns;

/// The counters that count a datagram or packet the kernel dropped (or,
/// `NoPorts`, answered with an ICMP port unreachable): a loss can be
/// attributed to them. Everything else read is kept but not printed.
pub const DROPS: [&str; 18] = [
    "Udp.InErrors",
    "Udp.RcvbufErrors",
    "Udp.SndbufErrors",
    "Udp.NoPorts",
    "Udp.InCsumErrors",
    "Udp.MemErrors",
    "Udp6.InErrors",
    "Udp6.RcvbufErrors",
    "Udp6.SndbufErrors",
    "Udp6.NoPorts",
    "Udp6.InCsumErrors",
    "Udp6.MemErrors",
    "Ip.InDiscards",
    "Ip.OutDiscards",
    "Ip.OutNoRoutes",
    "Ip.InAddrErrors",
    "Ip6.InDiscards",
    "Ip6.OutNoRoutes",
];

/// One namespace's counters, named `<table>.<field>` (`Udp.RcvbufErrors`,
/// `Udp6.RcvbufErrors`): `/proc/net/snmp`'s `Udp6` rows are
/// `/proc/net/snmp6`'s `Udp6RcvbufErrors`, split after the table name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters(pub BTreeMap<String, u64>);

impl Counters {
    /// The counters of the calling thread's namespace.
    pub fn here() -> anyhow::Result<Self> {
        // `thread-self`: `netns::within` moves one thread, and
        // `/proc/self/net` is the process's (its first thread's) view.
        let snmp = fs::read_to_string("/proc/thread-self/net/snmp")
            .context("reading /proc/thread-self/net/snmp")?;
        let mut c = Self::parse_snmp(&snmp)?;
        // IPv6 may be off in a namespace: then there is no snmp6.
        if let Ok(snmp6) = fs::read_to_string("/proc/thread-self/net/snmp6") {
            c.0.extend(Self::parse_snmp6(&snmp6).0);
        }
        Ok(c)
    }

    /// The counters of network namespace `ns` (under /run/netns).
    pub fn of(ns: &str) -> anyhow::Result<Self> {
        netns::within(ns, Self::here)
    }

    /// `/proc/net/snmp`: per table, a line of names then a line of values,
    /// both led by `<Table>:`.
    pub fn parse_snmp(text: &str) -> anyhow::Result<Self> {
        let mut out = BTreeMap::new();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let [names, values] = pair else {
                anyhow::bail!("an odd line in /proc/net/snmp: {pair:?}");
            };
            let (table, names) = names.split_once(':').context("no table name")?;
            let (again, values) = values.split_once(':').context("no table name")?;
            anyhow::ensure!(table == again, "{table} names, {again} values");
            for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
                // Ip.Forwarding, Tcp.MaxConn and the like are signed;
                // they are settings, not counters, and nothing reads them.
                if let Ok(v) = value.parse() {
                    out.insert(format!("{table}.{name}"), v);
                }
            }
        }
        Ok(Self(out))
    }

    /// `/proc/net/snmp6`: `Udp6RcvbufErrors  12` lines.
    pub fn parse_snmp6(text: &str) -> Self {
        let mut out = BTreeMap::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(Ok(value))) = (words.next(), words.next().map(str::parse)) else {
                continue;
            };
            for table in ["Udp6", "UdpLite6", "Ip6", "Icmp6"] {
                if let Some(field) = name.strip_prefix(table)
                    && field.starts_with(|c: char| c.is_ascii_uppercase())
                {
                    out.insert(format!("{table}.{field}"), value);
                    break;
                }
            }
        }
        Self(out)
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// What rose since `before` (counters only rise; one that fell, as
    /// none should, counts 0).
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k))))
                .filter(|(_, d)| *d > 0)
                .collect(),
        )
    }

    /// Adds `other` to these (the totals of several namespaces).
    pub fn add(&mut self, other: &Self) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }

    /// The [`DROPS`] that are not zero.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        DROPS
            .iter()
            .map(|name| (*name, self.get(name)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// `Udp.RcvbufErrors 2, Udp.InErrors 2`, or `none`.
    pub fn drops_text(&self) -> String {
        let drops = self.drops();
        if drops.is_empty() {
            return "none".into();
        }
        let mut o = String::new();
        for (i, (name, n)) in drops.iter().enumerate() {
            let _ = write!(o, "{}{name} {n}", if i > 0 { ", " } else { "" });
        }
        o
    }
}

/// Counters of several namespaces, read at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot(pub BTreeMap<String, Counters>);

impl Snapshot {
    /// Reads every namespace of `nss`.
    pub fn read<S: AsRef<str>>(nss: &[S]) -> anyhow::Result<Self> {
        nss.iter()
            .map(|ns| Ok((ns.as_ref().to_owned(), Counters::of(ns.as_ref())?)))
            .collect::<anyhow::Result<_>>()
            .map(Self)
    }

    /// What rose since `before`, per namespace (one absent then counts
    /// from zero: a namespace starts with every counter at zero).
    pub fn since(&self, before: &Self) -> Self {
        let zero = Counters::default();
        Self(
            self.0
                .iter()
                .map(|(ns, c)| (ns.clone(), c.since(before.0.get(ns).unwrap_or(&zero))))
                .collect(),
        )
    }

    /// The sum over every namespace.
    pub fn total(&self) -> Counters {
        let mut t = Counters::default();
        for c in self.0.values() {
            t.add(c);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates OutTransmits
Ip: 2 64 10 0 0 0 0 3 10 12 0 1 0 0 0 0 0 0 0 12
Icmp: InMsgs InErrors InCsumErrors InDestUnreachs
Icmp: 0 0 0 0
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 100 4 7 100 7 0 0 0 0
";

    const SNMP6: &str = "\
Ip6InReceives                   	5
Ip6InDiscards                   	0
Udp6InDatagrams                 	9
Udp6RcvbufErrors                	2
UdpLite6InDatagrams             	0
Icmp6InMsgs                     	1
";

    #[test]
    fn the_tables_are_read_by_name() -> anyhow::Result<()> {
        let c = Counters::parse_snmp(SNMP)?;
        assert_eq!(c.get("Udp.RcvbufErrors"), 7);
        assert_eq!(c.get("Udp.InErrors"), 7);
        assert_eq!(c.get("Udp.NoPorts"), 4);
        assert_eq!(c.get("Ip.InDiscards"), 3);
        assert_eq!(c.get("Ip.OutNoRoutes"), 1);
        let c6 = Counters::parse_snmp6(SNMP6);
        assert_eq!(c6.get("Udp6.RcvbufErrors"), 2);
        assert_eq!(c6.get("Udp6.InDatagrams"), 9);
        assert_eq!(c6.get("UdpLite6.InDatagrams"), 0);
        assert!(!c6.0.contains_key("Udp6.teDatagrams"));
        Ok(())
    }

    #[test]
    fn a_delta_keeps_what_rose_and_the_drops_name_it() -> anyhow::Result<()> {
        let before = Counters::parse_snmp(SNMP)?;
        let mut after = before.clone();
        after.0.insert("Udp.RcvbufErrors".into(), 9);
        after.0.insert("Udp.InErrors".into(), 9);
        after.0.insert("Udp.InDatagrams".into(), 150);
        let d = after.since(&before);
        assert_eq!(d.get("Udp.InDatagrams"), 50);
        assert_eq!(d.drops(), [("Udp.InErrors", 2), ("Udp.RcvbufErrors", 2)]);
        assert_eq!(d.drops_text(), "Udp.InErrors 2, Udp.RcvbufErrors 2");
        assert_eq!(before.since(&before).drops_text(), "none");
        Ok(())
    }
}
