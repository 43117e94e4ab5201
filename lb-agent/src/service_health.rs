//! Each Service's `healthCheckNodePort` server, as kube-proxy's
//! (`pkg/proxy/healthcheck/service_health.go`): cloud load balancers of
//! `externalTrafficPolicy: Local` Services steer by its status, and some
//! read its body or the endpoint-weight header.
//!
//! The syncer [publishes](ServiceHealth::publish) what each Service
//! reports after every sync; the HTTP layer (`http/health_listeners.rs`)
//! opens and closes the listeners to match and answers from the table
//! here.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use tokio::sync::Notify;

use crate::model::{HealthCheck, IpFamily, ObjectRef};

/// The Service a listener answers for, and its local ready endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub service: ObjectRef,
    pub local_endpoints: usize,
}

/// Every health check to serve, by port and family, as last published.
#[derive(Debug, Default)]
pub struct ServiceHealth {
    table: Mutex<Arc<BTreeMap<(u16, IpFamily), Entry>>>,
    changed: Notify,
}

impl ServiceHealth {
    /// Replaces the table with `checks`. Two Services on one port (which
    /// the apiserver's allocator prevents) go to the first by name.
    pub fn publish<'a>(&self, checks: impl IntoIterator<Item = (&'a ObjectRef, &'a HealthCheck)>) {
        let mut checks: Vec<_> = checks.into_iter().collect();
        checks.sort_by(|a, b| a.0.cmp(b.0));
        let mut table = BTreeMap::new();
        for (service, hc) in checks {
            for family in [IpFamily::V4, IpFamily::V6] {
                if let Some(n) = hc.local_endpoints(family) {
                    table.entry((hc.port, family)).or_insert_with(|| Entry {
                        service: service.clone(),
                        local_endpoints: n,
                    });
                }
            }
        }
        let mut current = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if **current != table {
            *current = Arc::new(table);
            drop(current);
            self.changed.notify_one();
        }
    }

    /// What the listener on `port` of `family` answers for.
    pub fn lookup(&self, port: u16, family: IpFamily) -> Option<Entry> {
        self.table().get(&(port, family)).cloned()
    }

    /// Every port and family to listen on.
    pub fn wanted(&self) -> Vec<(u16, IpFamily)> {
        self.table().keys().copied().collect()
    }

    /// Returns once the table changed since the last call returned (at
    /// once if it did meanwhile).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    fn table(&self) -> Arc<BTreeMap<(u16, IpFamily), Entry>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What one health-check request is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// 200 with local ready endpoints and a healthy agent, else 503.
    pub status: u16,
    pub headers: [(&'static str, String); 3],
    pub body: String,
}

/// The answer for Service `namespace/name` with `local_endpoints` (distinct
/// ready endpoint addresses on this node) while the agent is `healthy`:
/// kube-proxy's `hcHandler`'s, byte for byte, whatever the path and method.
pub fn answer(namespace: &str, name: &str, local_endpoints: usize, healthy: bool) -> Answer {
    let status = if local_endpoints != 0 && healthy {
        200
    } else {
        503
    };
    Answer {
        status,
        headers: [
            ("Content-Type", "application/json".to_owned()),
            ("X-Content-Type-Options", "nosniff".to_owned()),
            (
                "X-Load-Balancing-Endpoint-Weight",
                local_endpoints.to_string(),
            ),
        ],
        // Object names are DNS labels and subdomains: nothing to escape.
        body: format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": \"{namespace}\",\n\t\t\"name\": \"{name}\"\n\t}},\n\t\"localEndpoints\": {local_endpoints},\n\t\"serviceProxyHealthy\": {healthy}\n}}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_serves_each_family_the_service_has_and_the_first_service_wins_a_port() {
        let h = ServiceHealth::default();
        let (a, b) = (
            ObjectRef::service("default", "a"),
            ObjectRef::service("default", "b"),
        );
        let dual = HealthCheck {
            port: 32000,
            v4: Some(2),
            v6: Some(0),
        };
        let v4_only = HealthCheck {
            port: 32000,
            v4: Some(5),
            v6: None,
        };
        h.publish([(&b, &v4_only), (&a, &dual)]);
        let v4 = h.lookup(32000, IpFamily::V4).expect("v4 served");
        assert_eq!((v4.service, v4.local_endpoints), (a, 2));
        assert_eq!(
            h.lookup(32000, IpFamily::V6).map(|e| e.local_endpoints),
            Some(0)
        );
        h.publish([(&b, &v4_only)]);
        assert_eq!(
            h.lookup(32000, IpFamily::V4).map(|e| e.local_endpoints),
            Some(5)
        );
        assert_eq!(h.lookup(32000, IpFamily::V6), None);
    }

    #[test]
    fn ready_local_endpoints_and_a_healthy_agent_answer_200() {
        let a = answer("default", "web", 2, true);
        assert_eq!(a.status, 200);
        assert_eq!(
            a.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        let weight = a
            .headers
            .iter()
            .find(|(h, _)| *h == "X-Load-Balancing-Endpoint-Weight");
        assert_eq!(weight.map(|(_, v)| v.as_str()), Some("2"));
        // The body is JSON, whatever its whitespace.
        let v: serde_json::Value = serde_json::from_str(&a.body).expect("JSON");
        assert_eq!(v["service"]["name"], "web");
        assert_eq!(v["localEndpoints"], 2);
    }

    #[test]
    fn no_local_endpoint_or_an_unhealthy_agent_answers_503() {
        assert_eq!(answer("default", "web", 0, true).status, 503);
        let stale = answer("default", "web", 3, false);
        assert_eq!(stale.status, 503);
        assert!(stale.body.ends_with("\"serviceProxyHealthy\": false\n}"));
    }
}
