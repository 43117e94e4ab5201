//! What a pass destroys: sockets sent through the UDP frontends it names to
//! a backend those frontends no longer serve.

use std::{
    collections::HashSet,
    net::{IpAddr, SocketAddr},
};

use super::UdpServing;

/// UDP frontends (VIP:port) whose backends changed. A connected socket the
/// load balancer sent through one of them is stale if [`UdpServing`] says
/// the frontend does not serve its backend when the pass gets to it.
/// Frontends not named are left alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleUdp {
    frontends: HashSet<SocketAddr>,
}

impl StaleUdp {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.frontends.is_empty()
    }

    /// Takes in a later request's frontends.
    pub fn merge(&mut self, later: StaleUdp) {
        self.frontends.extend(later.frontends);
    }

    /// Whether a socket sent through `frontend` to `backend` must go.
    pub fn is_stale(&self, serving: &UdpServing, frontend: SocketAddr, backend: IpAddr) -> bool {
        self.frontends.contains(&frontend) && !serving.serves(&frontend, backend)
    }
}

impl FromIterator<SocketAddr> for StaleUdp {
    fn from_iter<I: IntoIterator<Item = SocketAddr>>(iter: I) -> Self {
        Self {
            frontends: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIP: &str = "192.0.2.10:53";
    const OTHER_VIP: &str = "192.0.2.11:53";

    fn fe(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_backend_is_stale_only_through_a_named_frontend_that_no_longer_serves_it() {
        let serving = UdpServing::default();
        serving.narrow([(fe(VIP), &[ip("10.0.0.1")][..])]);
        let req: StaleUdp = [fe(VIP)].into_iter().collect();
        assert!(
            !req.is_stale(&serving, fe(VIP), ip("10.0.0.1")),
            "still serving"
        );
        assert!(req.is_stale(&serving, fe(VIP), ip("10.0.0.2")));
        assert!(
            !req.is_stale(&serving, fe(OTHER_VIP), ip("10.0.0.2")),
            "frontend not in the request"
        );
        // The same VIP on another port is another frontend.
        assert!(!req.is_stale(&serving, fe("192.0.2.10:54"), ip("10.0.0.2")));
    }

    #[test]
    fn a_frontend_that_serves_nothing_makes_every_backend_stale() {
        let req: StaleUdp = [fe(VIP)].into_iter().collect();
        let serving = UdpServing::default();
        assert!(req.is_stale(&serving, fe(VIP), ip("10.0.0.1")));
        assert!(req.is_stale(&serving, fe(VIP), ip("10.0.0.2")));
    }

    #[test]
    fn merge_unites_the_frontends() {
        let mut first: StaleUdp = [fe(VIP)].into_iter().collect();
        first.merge([fe(OTHER_VIP)].into_iter().collect());
        let both: StaleUdp = [fe(VIP), fe(OTHER_VIP)].into_iter().collect();
        assert_eq!(first, both);
        assert!(StaleUdp::new().is_empty());
    }
}
