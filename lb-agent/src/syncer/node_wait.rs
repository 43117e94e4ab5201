//! The first sync's wait for this node's Node.
//!
//! What the model reads of the Node is part of the desired state: its zone
//! label picks the endpoints of Services with topology hints, its primary
//! addresses the NodePort addresses. A first sync without it programs
//! every endpoint and narrows down once the Node arrives, so it waits for
//! the Node, bounded as kube-proxy bounds its own wait; past the bound, or
//! when the apiserver refuses to show the Node, it goes on without it.

use std::time::{Duration, Instant};

/// How much longer than for the Service and EndpointSlice lists the first
/// sync waits for this node's Node: kube-proxy's `NewNodeManager`
/// (`pkg/proxy/node.go`) waits this long (its `nodeIPsTimeout`, polling
/// every second) for the Node to exist, and then starts without it. It
/// also waits for the Node's addresses; here the Node is enough: its zone
/// label comes with it, and addresses filled in later apply as they come.
pub const NODE_WAIT: Duration = Duration::from_secs(30);

/// Where the wait stands.
#[derive(Debug)]
pub struct NodeWait {
    state: State,
    bound: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Not seen. The bound runs from the moment both lists are in.
    Waiting {
        lists_in: Option<Instant>,
        /// The apiserver refused to show the Node: why.
        refused: Option<String>,
    },
    /// Seen, or nothing to wait for.
    Over,
    /// The first sync went without it, and it has not been seen since.
    Missing,
}

/// Whether the first sync may run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// Open, without the Node: the wait ends here (reported once).
    GaveUp(GaveUp),
    /// Not before `until`; `began`: the wait starts now (the lists just
    /// came in).
    Wait {
        until: Instant,
        began: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GaveUp {
    TimedOut(Duration),
    Refused(String),
}

impl NodeWait {
    /// Waits at most `bound` after the lists.
    pub fn new(bound: Duration) -> Self {
        Self {
            state: State::Waiting {
                lists_in: None,
                refused: None,
            },
            bound,
        }
    }

    /// Nothing to wait for: the file source reads the Node (or its
    /// absence) with the objects.
    pub fn none() -> Self {
        Self {
            state: State::Over,
            bound: Duration::ZERO,
        }
    }

    /// This node's Node arrived. True when the first sync went without it.
    pub fn seen(&mut self) -> bool {
        std::mem::replace(&mut self.state, State::Over) == State::Missing
    }

    /// The apiserver refuses to show the Node (401, 403): the first sync
    /// need not wait for it. Nothing changes once the wait is over.
    pub fn refused(&mut self, why: String) {
        if let State::Waiting { refused, .. } = &mut self.state {
            *refused = Some(why);
        }
    }

    /// Asked with both lists in, before a sync.
    pub fn gate(&mut self, now: Instant) -> Gate {
        let State::Waiting { lists_in, refused } = &mut self.state else {
            return Gate::Open;
        };
        let began = lists_in.is_none();
        let until = *lists_in.get_or_insert(now) + self.bound;
        let gave_up = match refused.take() {
            Some(why) => GaveUp::Refused(why),
            None if now >= until => GaveUp::TimedOut(self.bound),
            None => return Gate::Wait { until, began },
        };
        self.state = State::Missing;
        Gate::GaveUp(gave_up)
    }

    /// When the wait ends at the latest, once it has begun.
    pub fn until(&self) -> Option<Instant> {
        match self.state {
            State::Waiting {
                lists_in: Some(t), ..
            } => Some(t + self.bound),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn waits_from_the_lists_until_the_node_arrives() {
        let t0 = Instant::now();
        let mut w = NodeWait::new(NODE_WAIT);
        assert_eq!(w.until(), None, "the bound runs from the lists");
        assert_eq!(
            w.gate(t0 + 5 * S),
            Gate::Wait {
                until: t0 + 5 * S + NODE_WAIT,
                began: true
            }
        );
        assert_eq!(
            w.gate(t0 + 6 * S),
            Gate::Wait {
                until: t0 + 5 * S + NODE_WAIT,
                began: false
            }
        );
        assert_eq!(w.until(), Some(t0 + 5 * S + NODE_WAIT));
        assert!(!w.seen(), "in time: nothing to report");
        assert_eq!(w.gate(t0 + 7 * S), Gate::Open);
        assert_eq!(w.until(), None);
    }

    #[test]
    fn the_node_seen_before_the_lists_opens_the_gate_at_once() {
        let mut w = NodeWait::new(NODE_WAIT);
        w.seen();
        assert_eq!(w.gate(Instant::now()), Gate::Open);
    }

    #[test]
    fn past_the_bound_it_gives_up_once_and_a_late_node_is_reported() {
        let t0 = Instant::now();
        let mut w = NodeWait::new(NODE_WAIT);
        assert!(matches!(w.gate(t0), Gate::Wait { .. }));
        assert!(matches!(
            w.gate(t0 + NODE_WAIT - S),
            Gate::Wait { began: false, .. }
        ));
        assert_eq!(
            w.gate(t0 + NODE_WAIT),
            Gate::GaveUp(GaveUp::TimedOut(NODE_WAIT))
        );
        assert_eq!(w.gate(t0 + NODE_WAIT), Gate::Open, "reported once");
        assert_eq!(w.until(), None);
        assert!(w.seen(), "it arrived after the first sync");
        assert!(!w.seen());
    }

    #[test]
    fn a_refusal_ends_the_wait_when_the_lists_are_in() {
        let t0 = Instant::now();
        let mut w = NodeWait::new(NODE_WAIT);
        w.refused("403 Forbidden".into());
        assert_eq!(
            w.gate(t0),
            Gate::GaveUp(GaveUp::Refused("403 Forbidden".into()))
        );
        // Refused again after the first sync: nothing to do.
        w.refused("403 Forbidden".into());
        assert_eq!(w.gate(t0), Gate::Open);

        // Refused, then allowed and seen before the lists: no wait, no report.
        let mut w = NodeWait::new(NODE_WAIT);
        w.refused("403 Forbidden".into());
        assert!(!w.seen());
        assert_eq!(w.gate(t0), Gate::Open);
    }

    #[test]
    fn the_file_source_never_waits() {
        let mut w = NodeWait::none();
        assert_eq!(w.gate(Instant::now()), Gate::Open);
        assert!(!w.seen());
        assert_eq!(w.until(), None);
    }
}
