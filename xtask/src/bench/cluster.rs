//! The cluster the one-node beds (datapath, connect loop, control plane,
//! scale) stand for: its pod network as kube-proxy's layouts are told it,
//! and our agent's map capacities for N Services. The NodePort bed has a
//! network and capacities of its own.

/// The pod network of kube-proxy's layouts: the clients (10.0.0.x) are
/// pods, so neither layout masquerades, as for pod-to-Service traffic in a cluster.
pub(super) const CLUSTER_CIDR: &str = "10.0.0.0/16";

/// Capacities for `n` Services of one port and `endpoints` endpoints each:
/// two frontends each (the port and the ClusterIP's wildcard), a slot and a
/// distinct backend per endpoint, and room for revisions in flight; never
/// below the defaults.
pub(super) fn capacity_flags(n: usize, endpoints: usize) -> Vec<String> {
    let fe = (2 * n + 1024).max(65_536);
    let be = (n * endpoints + 1024).max(131_072);
    let slots = (2 * n * endpoints).max(262_144);
    vec![
        format!("--bpf-lb-service-map-max={fe}"),
        format!("--bpf-lb-service-backend-map-max={be}"),
        format!("--bpf-lb-slot-map-max={slots}"),
    ]
}
