//! The SNAT port range against the node's own ports, and the seed that
//! spreads clients over it.
//!
//! The tc programs SNAT flows to remote backends to the node's address.
//! Linux picks the source ports of the node's own connections from
//! `net.ipv4.ip_local_port_range` without knowing the programs' mappings,
//! so a SNAT port in that range could be the very tuple a local socket
//! uses. As Cilium checks its NodePort range against that range at start,
//! the agent refuses a SNAT range that overlaps it.

use std::{fs, hash::Hasher as _, io, path::Path};

const EPHEMERAL: &str = "/proc/sys/net/ipv4/ip_local_port_range";
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

#[derive(Debug, thiserror::Error)]
pub enum SnatPortsError {
    #[error("reading {EPHEMERAL}")]
    Read(#[source] io::Error),
    #[error("{EPHEMERAL} holds {0:?}, not two port numbers")]
    Parse(String),
    #[error(
        "the SNAT port range {}-{} overlaps this node's ephemeral ports {}-{} \
         (net.ipv4.ip_local_port_range): a SNATed flow could take the port of one of \
         the node's own connections. Pass --snat-port-range with ports outside {}-{}, \
         or narrow net.ipv4.ip_local_port_range",
        snat.0, snat.1, ephemeral.0, ephemeral.1, ephemeral.0, ephemeral.1
    )]
    Overlap {
        snat: (u16, u16),
        ephemeral: (u16, u16),
    },
}

/// The node's ephemeral port range (this network namespace's).
pub fn ephemeral_range() -> Result<(u16, u16), SnatPortsError> {
    parse_range(&fs::read_to_string(EPHEMERAL).map_err(SnatPortsError::Read)?)
}

fn parse_range(text: &str) -> Result<(u16, u16), SnatPortsError> {
    let mut ports = text.split_whitespace().map(str::parse::<u16>);
    match (ports.next(), ports.next(), ports.next()) {
        (Some(Ok(min)), Some(Ok(max)), None) => Ok((min, max)),
        _ => Err(SnatPortsError::Parse(text.trim().to_owned())),
    }
}

/// Refuses a SNAT range (inclusive) that overlaps the ephemeral one.
pub fn check(snat: (u16, u16), ephemeral: (u16, u16)) -> Result<(), SnatPortsError> {
    if snat.0 <= ephemeral.1 && ephemeral.0 <= snat.1 {
        return Err(SnatPortsError::Overlap { snat, ephemeral });
    }
    Ok(())
}

/// The seed mixed into where a client's SNAT ports land: the same for
/// every agent started since the node booted (so a restart keeps each
/// client on its ports), and not known outside the node.
pub fn seed() -> u32 {
    seed_from(Path::new(BOOT_ID))
}

fn seed_from(path: &Path) -> u32 {
    let boot = fs::read_to_string(path).unwrap_or_default();
    // SipHash with fixed keys: the same boot id gives the same seed.
    let mut h = std::hash::DefaultHasher::new();
    h.write(boot.trim().as_bytes());
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_overlapping_the_ephemeral_ports_is_refused_naming_both() {
        assert!(check((1024, 29999), (32768, 60999)).is_ok());
        assert!(check((61000, 65535), (32768, 60999)).is_ok());
        let e = check((30000, 40000), (32768, 60999)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("30000-40000") && text.contains("32768-60999"),
            "{text}"
        );
        assert!(check((60999, 61000), (32768, 60999)).is_err());
        assert!(check((1024, 32768), (32768, 60999)).is_err());
    }

    #[test]
    fn the_proc_file_is_read_as_two_ports() {
        assert_eq!(parse_range("32768\t60999\n").unwrap(), (32768, 60999));
        assert!(parse_range("32768").is_err());
        assert!(parse_range("a b").is_err());
        assert!(ephemeral_range().is_ok());
    }

    #[test]
    fn the_seed_follows_the_boot() {
        assert_eq!(seed(), seed());
        let dir = std::env::temp_dir().join(format!("lb-seed-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        fs::write(&a, "6c8d2ad6-0000\n").unwrap();
        fs::write(&b, "6c8d2ad6-0001\n").unwrap();
        assert_ne!(seed_from(&a), seed_from(&b));
        fs::remove_dir_all(&dir).unwrap();
    }
}
