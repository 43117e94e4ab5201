//! A process's listening TCP sockets, from `/proc`: how the harness finds
//! the agent's listeners on ephemeral ports without reading its log.

use std::{
    collections::HashSet,
    fs,
    net::{Ipv4Addr, SocketAddr},
};

use anyhow::Context as _;

/// The IPv4 addresses `pid` listens on, sorted.
pub fn listening_tcp(pid: u32) -> anyhow::Result<Vec<SocketAddr>> {
    let mut inodes = HashSet::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd"))? {
        // An fd closed since the listing has no link any more.
        let Ok(target) = fs::read_link(entry?.path()) else {
            continue;
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    // The process's own network namespace's table.
    let table = fs::read_to_string(format!("/proc/{pid}/net/tcp"))?;
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        let f: Vec<&str> = line.split_whitespace().collect();
        const LISTEN: &str = "0A";
        if f.len() < 10 || f[3] != LISTEN || !inodes.contains(f[9]) {
            continue;
        }
        out.push(local_address(f[1]).with_context(|| format!("reading {line:?}"))?);
    }
    out.sort();
    // The table is read in pages, not as one snapshot: under churn a
    // socket can be listed twice.
    out.dedup();
    Ok(out)
}

/// `0100007F:1F90`: the address as the kernel's `%08X` of its in-memory
/// (network order) bytes read as a native integer, then the port.
fn local_address(field: &str) -> anyhow::Result<SocketAddr> {
    let (ip, port) = field.split_once(':').context("no ':'")?;
    let ip = Ipv4Addr::from(u32::from_str_radix(ip, 16)?.to_ne_bytes());
    Ok(SocketAddr::new(ip.into(), u16::from_str_radix(port, 16)?))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn finds_this_process_listeners() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let found = listening_tcp(std::process::id()).unwrap();
        assert!(found.contains(&addr), "{addr} not in {found:?}");
        drop(l);
        let found = listening_tcp(std::process::id()).unwrap();
        assert!(!found.contains(&addr), "{addr} still in {found:?}");
    }
}
