//! The bench's Services and EndpointSlices as YAML: v1 Service and
//! EndpointSlice manifests, written by hand, that every measuring module
//! hands our agent (the realistic objects, which `--realistic-objects`
//! measures, are [`super::realistic`]'s).

use lb_tests::kubeproxy::{Proto, SvcSpec};

/// Services as v1 Service + EndpointSlice manifests, written as block YAML
/// by hand: at 10,000 Services the agent's file reader takes its fast
/// path on them (one `kind:` line per document), as it would on `kubectl
/// get -o yaml` output. The tests build theirs with `lb-fixtures`.
/// `families`: the Services in each family, the same Services in the same
/// order; with two, each Service is dual-stack (the first family's cluster
/// IP primary) and has a slice of each family.
pub(super) fn manifests(families: &[&[SvcSpec]]) -> String {
    let specs = families[0];
    assert!(families.iter().all(|f| f.len() == specs.len()));
    let mut out = String::with_capacity(specs.len() * 600 * families.len());
    for (i, s) in specs.iter().enumerate() {
        let proto = match s.proto {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        };
        // Each port its own Service keeps the mapping one to one.
        let name = format!("{}-{}", s.name, s.port_name);
        let ips: Vec<String> = families.iter().map(|f| f[i].vip.to_string()).collect();
        out += &service(
            &s.namespace,
            &name,
            &ips,
            &[(
                &s.port_name,
                u32::from(s.port),
                proto,
                s.node_port.as_ref().map(|np| np.port),
            )],
        );
        for (f, family) in families.iter().enumerate() {
            let s = &family[i];
            let ips: Vec<String> = s.endpoints.iter().map(|(ip, _)| ip.to_string()).collect();
            let eps: Vec<(&str, bool)> = ips.iter().map(|ip| (ip.as_str(), true)).collect();
            let target = s.endpoints.first().map_or(1, |(_, p)| *p);
            out += &slice(
                &s.namespace,
                &format!("{name}-{}", f + 1),
                &name,
                &[(&s.port_name, target, proto)],
                &eps,
            );
        }
    }
    out
}

/// A v1 Service manifest. `ports`: (name, port, protocol, NodePort); with
/// NodePorts it is of type NodePort. With two `cluster_ips` it is
/// dual-stack, the first primary.
pub(super) fn service(
    ns: &str,
    name: &str,
    cluster_ips: &[String],
    ports: &[(&str, u32, &str, Option<u16>)],
) -> String {
    let ports: Vec<String> = ports
        .iter()
        .map(|(n, p, proto, node_port)| {
            let node_port = node_port.map_or(String::new(), |np| format!(", nodePort: {np}"));
            format!("{{name: \"{n}\", port: {p}, protocol: {proto}{node_port}}}")
        })
        .collect();
    let ty = if ports.iter().any(|p| p.contains("nodePort")) {
        "NodePort"
    } else {
        "ClusterIP"
    };
    let dual_stack = match cluster_ips {
        [_] => String::new(),
        ips => {
            let families: Vec<&str> = ips.iter().map(|ip| family(ip)).collect();
            format!(
                "  clusterIPs: [\"{}\"]\n  ipFamilies: [{}]\n  ipFamilyPolicy: RequireDualStack\n",
                ips.join("\", \""),
                families.join(", ")
            )
        }
    };
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec:\n  type: {ty}\n  clusterIP: \"{}\"\n{dual_stack}  ports: [{}]\n",
        cluster_ips[0],
        ports.join(", ")
    )
}

/// An EndpointSlice manifest. `ports`: (name, port, protocol);
/// `endpoints`: (ip, ready), of one family (IPv4 without any).
pub(super) fn slice(
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
         addressType: {}\nports: [{}]\nendpoints: [{}]\n",
        endpoints.first().map_or("IPv4", |(ip, _)| family(ip)),
        ports.join(", "),
        eps.join(", ")
    )
}

/// The API's name of `ip`'s family.
fn family(ip: &str) -> &'static str {
    if ip.contains(':') { "IPv6" } else { "IPv4" }
}
