//! The bench's manifests, written as block YAML by hand: at 10,000
//! Services the agent's file reader takes its fast path on them (one
//! `kind:` line per document), so a cold start measures what a user's
//! `kubectl get -o yaml` output would cost. Tests use the typed builders
//! of `lb-fixtures` instead.

/// A v1 Service manifest. `ports`: (name, port, protocol).
pub fn service(ns: &str, name: &str, cluster_ip: &str, ports: &[(&str, u32, &str)]) -> String {
    let ports: Vec<String> = ports
        .iter()
        .map(|(n, p, proto)| format!("{{name: \"{n}\", port: {p}, protocol: {proto}}}"))
        .collect();
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  type: ClusterIP\n  clusterIP: \"{cluster_ip}\"\n  ports: [{}]\n",
        ports.join(", ")
    )
}

/// An EndpointSlice manifest. `ports`: (name, port, protocol);
/// `endpoints`: (ip, ready).
pub fn slice(
    ns: &str,
    name: &str,
    service: &str,
    ports: &[(&str, u16, &str)],
    endpoints: &[(&str, bool)],
) -> String {
    let ports: Vec<String> = ports
        .iter()
        .map(|(n, p, proto)| format!("{{name: \"{n}\", port: {p}, protocol: {proto}}}"))
        .collect();
    let eps: Vec<String> = endpoints
        .iter()
        .map(|(ip, ready)| format!("{{addresses: [\"{ip}\"], conditions: {{ready: {ready}}}}}"))
        .collect();
    format!(
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}, namespace: {ns}, labels: {{kubernetes.io/service-name: {service}}}}}\n\
         addressType: IPv4\nports: [{}]\nendpoints: [{}]\n",
        ports.join(", "),
        eps.join(", ")
    )
}
