//! [`Serving`]: the endpoint IPs each frontend serves now. The sync loop
//! writes it around every map write; a reaper reads it just before it
//! destroys a socket ([`UdpServing`], UDP frontends) or a flow's conntrack
//! entries (external frontends). A reaper runs after the sync that asked
//! for it, often after later syncs too: without this, it would destroy
//! sockets or flows sent to an endpoint that left and came back in the
//! meantime, which kube-proxy's conntrack flush (run in the sync itself)
//! never does.

use std::{
    hash::Hash,
    net::{IpAddr, SocketAddr},
    sync::{Mutex, MutexGuard, PoisonError},
};

use foldhash::{HashMap, HashSet};

/// Frontend -> its serving endpoint IPs. A frontend without an entry serves
/// nothing.
#[derive(Debug)]
pub struct Serving<K> {
    frontends: Mutex<HashMap<K, HashSet<IpAddr>>>,
}

/// UDP frontends by VIP:port, for the socket reaper.
pub type UdpServing = Serving<SocketAddr>;

impl<K> Default for Serving<K> {
    fn default() -> Self {
        Self {
            frontends: Mutex::default(),
        }
    }
}

impl<K: Hash + Eq> Serving<K> {
    /// Before the maps are written: each frontend serves its new IPs as
    /// well as its old ones, as connects reach the new ones the moment the
    /// maps change.
    pub fn widen<'a>(&self, changed: impl IntoIterator<Item = (K, &'a [IpAddr])>) {
        let mut frontends = self.lock();
        for (fe, now) in changed {
            if !now.is_empty() {
                frontends.entry(fe).or_default().extend(now);
            }
        }
    }

    /// After the maps are written: each frontend serves exactly its new IPs.
    pub fn narrow<'a>(&self, changed: impl IntoIterator<Item = (K, &'a [IpAddr])>) {
        let mut frontends = self.lock();
        for (fe, now) in changed {
            if now.is_empty() {
                frontends.remove(&fe);
            } else {
                frontends.insert(fe, now.iter().copied().collect());
            }
        }
    }

    /// Whether `frontend` serves `backend` now.
    pub fn serves(&self, frontend: &K, backend: IpAddr) -> bool {
        self.lock()
            .get(frontend)
            .is_some_and(|ips| ips.contains(&backend))
    }

    /// How many frontends serve something.
    pub fn frontends(&self) -> usize {
        self.lock().len()
    }

    /// A panic elsewhere cannot leave the table half-written (every write
    /// is a single insert or remove), so a poisoned lock is still good.
    fn lock(&self) -> MutexGuard<'_, HashMap<K, HashSet<IpAddr>>> {
        self.frontends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FE: SocketAddr = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 10)), 53);

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn widen_keeps_the_old_ips_until_narrow_drops_them() {
        let t = UdpServing::default();
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        t.narrow([(FE, &[a][..])]);
        assert!(t.serves(&FE, a) && !t.serves(&FE, b));
        // a leaves and b comes: while the maps are written, both serve.
        t.widen([(FE, &[b][..])]);
        assert!(t.serves(&FE, a) && t.serves(&FE, b));
        t.narrow([(FE, &[b][..])]);
        assert!(!t.serves(&FE, a) && t.serves(&FE, b));
    }

    #[test]
    fn a_frontend_that_serves_nothing_has_no_entry() {
        let t = UdpServing::default();
        t.narrow([(FE, &[ip("10.0.0.1")][..])]);
        t.widen([(FE, &[][..])]);
        assert_eq!(t.frontends(), 1, "widening by nothing keeps the old IPs");
        t.narrow([(FE, &[][..])]);
        assert_eq!(t.frontends(), 0);
        assert!(!t.serves(&FE, ip("10.0.0.1")));
    }
}
