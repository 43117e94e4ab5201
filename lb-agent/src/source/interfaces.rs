//! The addresses on this node's interfaces, which `--nodeport-addresses`
//! selects from (kube-proxy reads `net.InterfaceAddrs()` the same way).

use std::net::IpAddr;

use tracing::warn;

/// The last addresses read, so that only a change reaches the model.
#[derive(Debug, Default)]
pub struct Interfaces {
    last: Option<Vec<IpAddr>>,
}

impl Interfaces {
    /// The addresses now, if they differ from the last read. A failed read
    /// keeps the last addresses in force.
    pub fn changed(&mut self) -> Option<Vec<IpAddr>> {
        let mut now: Vec<IpAddr> = match if_addrs::get_if_addrs() {
            Ok(all) => all.into_iter().map(|i| i.ip()).collect(),
            Err(e) => {
                warn!(
                    error = &e as &dyn std::error::Error,
                    "reading this node's interface addresses"
                );
                return None;
            }
        };
        now.sort_unstable();
        now.dedup();
        if self.last.as_ref() == Some(&now) {
            return None;
        }
        self.last = Some(now.clone());
        Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_read_reports_loopback_and_an_unchanged_one_nothing() {
        let mut i = Interfaces::default();
        let first = i.changed().expect("the first read is a change");
        assert!(first.iter().any(IpAddr::is_loopback), "{first:?}");
        assert_eq!(i.changed(), None);
    }
}
