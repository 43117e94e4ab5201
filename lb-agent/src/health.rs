//! kube-proxy's health semantics for `/healthz` and `/livez`.
//!
//! `/healthz` is 200 once the first full sync is done and no change has
//! waited longer than [`HEALTH_TIMEOUT`] to be written, and the node is not
//! being deleted; else 503. An apiserver outage alone leaves it healthy: the
//! maps still hold the last state. So does a full map: a sync that could
//! not write some frontends still completes (they are retried, and counted
//! in `lbagent_frontends_waiting_for_room`), because everything programmed
//! keeps working, and a 503 would take the whole node out of service. `/livez` ignores the node's state, so a
//! draining node does not restart the agent.

use std::{
    sync::Mutex,
    time::{Duration, Instant, SystemTime},
};

/// kube-proxy's default: twice its 30 s sync period.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct Health {
    inner: Mutex<State>,
}

#[derive(Debug)]
struct State {
    last_updated: Option<SystemTime>,
    oldest_pending: Option<Instant>,
    node_eligible: bool,
}

impl Default for State {
    fn default() -> Self {
        Self {
            last_updated: None,
            oldest_pending: None,
            node_eligible: true,
        }
    }
}

/// A probe answer: status code and JSON body.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A change arrived that is not written yet.
    pub fn queued(&self) {
        self.state().oldest_pending.get_or_insert_with(Instant::now);
    }

    /// Every change so far is written.
    pub fn updated(&self) {
        let mut s = self.state();
        s.last_updated = Some(SystemTime::now());
        s.oldest_pending = None;
    }

    /// False while this node is being deleted or drained by the autoscaler.
    pub fn set_node_eligible(&self, eligible: bool) {
        self.state().node_eligible = eligible;
    }

    pub fn healthz(&self) -> Answer {
        self.answer(true)
    }

    pub fn livez(&self) -> Answer {
        self.answer(false)
    }

    /// kube-proxy's `Health().Healthy`: synced, and no change waiting too
    /// long. The node's state is not part of it, so Services' health checks
    /// keep answering 200 while the node drains.
    pub fn proxy_healthy(&self) -> bool {
        Self::synced(&self.state())
    }

    fn synced(s: &State) -> bool {
        s.last_updated.is_some()
            && s.oldest_pending
                .is_none_or(|t| t.elapsed() < HEALTH_TIMEOUT)
    }

    fn answer(&self, check_node: bool) -> Answer {
        let s = self.state();
        let ok = Self::synced(&s) && (!check_node || s.node_eligible);
        let last = s
            .last_updated
            .map(|t| {
                jiff::Timestamp::try_from(t)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let mut body = format!(
            "{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{}\"",
            jiff::Timestamp::now()
        );
        if check_node {
            body += &format!(",\"nodeEligible\": {}", s.node_eligible);
        }
        body += "}";
        Answer {
            status: if ok { 200 } else { 503 },
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhealthy_until_first_sync_then_healthy() {
        let h = Health::default();
        assert_eq!(h.healthz().status, 503);
        assert_eq!(h.livez().status, 503);
        assert!(!h.proxy_healthy());
        h.queued();
        h.updated();
        assert_eq!(h.healthz().status, 200);
        assert!(h.healthz().body.contains("\"nodeEligible\": true"));
    }

    #[test]
    fn a_change_pending_too_long_is_unhealthy() {
        let h = Health::default();
        h.updated();
        h.state().oldest_pending = Some(Instant::now() - HEALTH_TIMEOUT);
        assert_eq!(h.healthz().status, 503);
        h.updated();
        assert_eq!(h.healthz().status, 200);
    }

    #[test]
    fn node_being_deleted_fails_healthz_but_not_livez() {
        let h = Health::default();
        h.updated();
        h.set_node_eligible(false);
        assert_eq!(h.healthz().status, 503);
        assert_eq!(h.livez().status, 200);
        assert!(h.proxy_healthy());
    }
}
