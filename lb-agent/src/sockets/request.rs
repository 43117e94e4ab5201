//! What a pass destroys: per UDP frontend, the backends still serving.

use std::{
    collections::{HashMap, HashSet},
    net::{Ipv4Addr, SocketAddrV4},
};

/// Frontends (VIP:port) whose UDP backends changed, each with the backend
/// IPs still serving. A connected socket the load balancer sent through
/// one of them to any other IP is stale; an empty set makes every socket
/// sent through that frontend stale. Frontends not named are left alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleUdp {
    frontends: HashMap<SocketAddrV4, HashSet<Ipv4Addr>>,
}

impl StaleUdp {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `frontend`'s serving backends, replacing what was set before.
    pub fn set(
        &mut self,
        frontend: SocketAddrV4,
        serving: impl IntoIterator<Item = Ipv4Addr>,
    ) -> &mut Self {
        self.frontends
            .insert(frontend, serving.into_iter().collect());
        self
    }

    pub fn is_empty(&self) -> bool {
        self.frontends.is_empty()
    }

    /// How many frontends the request names.
    pub fn len(&self) -> usize {
        self.frontends.len()
    }

    /// Takes in a later request: its frontends replace the same ones here,
    /// as it describes newer backends.
    pub fn merge(&mut self, later: StaleUdp) {
        self.frontends.extend(later.frontends);
    }

    /// Whether a socket sent through `frontend` to `backend` must go.
    pub fn is_stale(&self, frontend: SocketAddrV4, backend: Ipv4Addr) -> bool {
        self.frontends
            .get(&frontend)
            .is_some_and(|serving| !serving.contains(&backend))
    }
}

impl FromIterator<(SocketAddrV4, HashSet<Ipv4Addr>)> for StaleUdp {
    fn from_iter<I: IntoIterator<Item = (SocketAddrV4, HashSet<Ipv4Addr>)>>(iter: I) -> Self {
        Self {
            frontends: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 10), 53);
    const OTHER_VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 11), 53);
    const B1: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B2: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    #[test]
    fn a_backend_is_stale_only_through_a_named_frontend_that_no_longer_serves_it() {
        let mut req = StaleUdp::new();
        req.set(VIP, [B1]);
        assert!(!req.is_stale(VIP, B1), "still serving");
        assert!(req.is_stale(VIP, B2));
        assert!(!req.is_stale(OTHER_VIP, B2), "frontend not in the request");
        // The same VIP on another port is another frontend.
        assert!(!req.is_stale(SocketAddrV4::new(*VIP.ip(), 54), B2));
    }

    #[test]
    fn an_empty_serving_set_makes_every_backend_stale() {
        let mut req = StaleUdp::new();
        req.set(VIP, []);
        assert!(req.is_stale(VIP, B1));
        assert!(req.is_stale(VIP, B2));
    }

    #[test]
    fn a_later_request_replaces_the_same_frontend_and_keeps_the_others() {
        let mut first = StaleUdp::new();
        first.set(VIP, []).set(OTHER_VIP, [B1]);
        let mut later = StaleUdp::new();
        later.set(VIP, [B2]);
        first.merge(later);
        assert_eq!(first.len(), 2);
        assert!(
            !first.is_stale(VIP, B2),
            "the later set replaced the empty one"
        );
        assert!(first.is_stale(VIP, B1), "replaced, not united");
        assert!(first.is_stale(OTHER_VIP, B2), "kept from the first request");
        assert!(!first.is_stale(OTHER_VIP, B1));
    }

    #[test]
    fn set_replaces_and_collects() {
        let mut req = StaleUdp::new();
        req.set(VIP, [B1]).set(VIP, [B2]);
        let expected: StaleUdp = [(VIP, HashSet::from([B2]))].into_iter().collect();
        assert_eq!(req, expected);
        assert!(StaleUdp::new().is_empty());
    }
}
