//! The answer of a Service's `healthCheckNodePort`, byte for byte as
//! kube-proxy's (`pkg/proxy/healthcheck/service_health.go`, `hcHandler`):
//! cloud load balancers steer by its status, and some read its body or the
//! endpoint-weight header. Every path and method gets the same answer.

/// What one health-check request is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// 200 with local ready endpoints and a healthy agent, else 503.
    pub status: u16,
    pub headers: [(&'static str, String); 3],
    pub body: String,
}

/// The answer for Service `namespace/name` with `local_endpoints` (distinct
/// ready endpoint addresses on this node) while the agent is `healthy`.
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
