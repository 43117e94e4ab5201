//! kube-proxy's `sync_proxy_rules_no_local_endpoints_total`: the Service
//! ports whose traffic policy is `Local` and that have usable endpoints,
//! none of them on this node, so that this node drops (or refuses) what
//! the policy keeps local (`pkg/proxy/iptables/proxier.go` and
//! `nftables/proxier.go`, where `hasInternalEndpoints` /
//! `hasExternalEndpoints` are false while `hasEndpoints` is true).
//!
//! kube-proxy runs one proxier per family, each counting its own Service
//! ports: here a port counts once in each family the Service has a cluster
//! IP of, the sum of theirs.

use super::service::{ServiceSpec, ServiceType};

/// Service ports without a local endpoint under a `Local` policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoLocalEndpoints {
    /// `internalTrafficPolicy: Local`: this node refuses their cluster
    /// IPs (EHOSTUNREACH).
    pub internal: usize,
    /// `externalTrafficPolicy: Local` on a Service reachable from outside
    /// (NodePort, LoadBalancer, external IPs): this node drops their
    /// traffic from outside.
    pub external: usize,
}

impl NoLocalEndpoints {
    /// Counts one Service port in one family: whether the claims found its
    /// cluster IP (`internal`) and its frontends seen from outside
    /// (`outside`) without a local endpoint under a `Local` policy.
    pub(super) fn count(&mut self, spec: &ServiceSpec, internal: bool, outside: bool) {
        self.internal += usize::from(internal);
        self.external += usize::from(reachable_from_outside(spec) && outside);
    }

    pub(super) fn add(&mut self, other: Self) {
        self.internal += other.internal;
        self.external += other.external;
    }

    pub(super) fn remove(&mut self, other: Self) {
        self.internal -= other.internal;
        self.external -= other.external;
    }

    pub(super) fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// kube-proxy's `ExternallyAccessible`: only such a Service has an
/// external policy (`ExternalPolicyLocal`).
fn reachable_from_outside(spec: &ServiceSpec) -> bool {
    spec.type_ != ServiceType::ClusterIp || !spec.external_ips.is_empty()
}
