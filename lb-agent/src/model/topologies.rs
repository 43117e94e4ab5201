//! Endpoint topologies (where an endpoint runs, and its hints), interned:
//! in a cluster every endpoint names its node and zone, but few distinct
//! (node, zone, hints) combinations exist, so the slices share one copy of
//! each instead of holding a million boxes of strings (most of the model's
//! memory at 100,000 Services x 10).

use std::sync::Arc;

use foldhash::HashSet;

/// Where an endpoint runs, and the topology hints for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EndpointTopology {
    pub node_name: Option<String>,
    pub zone: Option<String>,
    /// `hints.forZones[].name`.
    pub for_zones: Vec<String>,
    /// `hints.forNodes[].name`.
    pub for_nodes: Vec<String>,
}

/// The shared copies; one no endpoint uses any more is dropped at the next
/// sweep.
#[derive(Debug, Default)]
pub(super) struct Topologies {
    shared: HashSet<Arc<EndpointTopology>>,
    /// How many were in use after the last sweep.
    live: usize,
}

/// Sweeps wait until at least this many copies are held.
const SWEEP_FROM: usize = 1024;

impl Topologies {
    /// The shared copy of `topology` (added if new).
    pub(super) fn intern(&mut self, topology: EndpointTopology) -> Arc<EndpointTopology> {
        if let Some(shared) = self.shared.get(&topology) {
            return shared.clone();
        }
        // Amortised: a sweep at most once per doubling of the set.
        if self.shared.len() >= SWEEP_FROM.max(2 * self.live) {
            self.shared.retain(|t| Arc::strong_count(t) > 1);
            self.live = self.shared.len();
        }
        let shared = Arc::new(topology);
        self.shared.insert(shared.clone());
        shared
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.shared.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(node: &str) -> EndpointTopology {
        EndpointTopology {
            node_name: Some(node.into()),
            zone: Some("zone-a".into()),
            ..EndpointTopology::default()
        }
    }

    #[test]
    fn equal_topologies_share_one_copy_and_unused_ones_are_swept() {
        let mut t = Topologies::default();
        let a = t.intern(on("node-a"));
        let again = t.intern(on("node-a"));
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(*a, on("node-a"));
        // Copies nobody holds any more go once the set has grown enough.
        for i in 1..SWEEP_FROM {
            drop(t.intern(on(&format!("gone-{i}"))));
        }
        assert_eq!(t.len(), SWEEP_FROM);
        let b = t.intern(on("node-b"));
        assert_eq!(t.len(), 2, "node-a (still held) and node-b");
        assert!(Arc::ptr_eq(&a, &t.intern(on("node-a"))));
        drop(b);
    }
}
