//! A foreign CNI that owns an excluded pod network, played with iptables
//! in a router namespace.

use super::exec;

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
