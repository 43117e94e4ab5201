//! Which Services get a `healthCheckNodePort` server, and what it reports:
//! kube-proxy's `NeedsHealthCheck` and `LocalReadyEndpoints`.

use std::{collections::BTreeSet, net::IpAddr};

use super::{
    IpFamily, NodeContext,
    service::{ServiceSpec, ServiceType, TrafficPolicy},
    slice::SliceSpec,
};

/// One Service's health check: its port, and for each family the Service
/// has a cluster IP of, the number of distinct ready endpoint addresses on
/// this node. A family the Service lacks is `None`: kube-proxy's proxier of
/// that family does not know the Service, so nothing listens for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    pub port: u16,
    pub v4: Option<usize>,
    pub v6: Option<usize>,
}

impl HealthCheck {
    pub fn local_endpoints(&self, family: IpFamily) -> Option<usize> {
        match family {
            IpFamily::V4 => self.v4,
            IpFamily::V6 => self.v6,
        }
    }
}

/// The health check of `spec`, whose slices are `slices`: only a
/// LoadBalancer with `externalTrafficPolicy: Local` and a node port for it
/// has one. An endpoint counts when it is on this node and *ready*: a
/// terminating one does not, even while it still serves, so that load
/// balancers drain the node. A slice without ports contributes nothing,
/// as in kube-proxy's endpoints map.
pub(super) fn health_check(
    spec: &ServiceSpec,
    slices: &[&SliceSpec],
    node: &NodeContext,
) -> Option<HealthCheck> {
    if spec.type_ != ServiceType::LoadBalancer || spec.external_policy != TrafficPolicy::Local {
        return None;
    }
    let port = spec.health_check_node_port?;
    let mut ready: BTreeSet<IpAddr> = BTreeSet::new();
    for s in slices.iter().filter(|s| !s.ports.is_empty()) {
        let local = s
            .endpoints
            .iter()
            .filter(|ep| ep.is_ready() && node.is_local(ep));
        ready.extend(local.filter_map(|ep| ep.ip));
    }
    let count = |family| {
        let has = spec
            .cluster_ips
            .iter()
            .any(|ip| IpFamily::of(*ip) == family);
        has.then(|| {
            ready
                .iter()
                .filter(|ip| IpFamily::of(**ip) == family)
                .count()
        })
    };
    Some(HealthCheck {
        port,
        v4: count(IpFamily::V4),
        v6: count(IpFamily::V6),
    })
}
