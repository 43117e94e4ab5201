//! What the agent keeps between its passes over the pods that opted out
//! of socket load balancing (`agent/pods.rs` does the passes).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use lb_common::SockNetns;

use crate::{metrics::Gauge, model::sock_lb::OptOutView};

/// What the last pass did, to tell what changed.
#[derive(Default)]
pub(super) struct Pods {
    /// `--bpf-lb-sock-hostns-only`.
    pub(super) hostns_only: bool,
    /// `--bpf-lb-source-range-all-types`: every namespace's address is
    /// written, the pods' and the node's.
    pub(super) addresses: bool,
    /// The last view, and the node's addresses then.
    pub(super) view: Option<(OptOutView, Vec<IpAddr>)>,
    /// `LB_SOCK_NETNS`, as last written.
    pub(super) written: Option<BTreeMap<u64, SockNetns>>,
    /// What the last pass logged as unprogrammed, not found or invalid.
    pub(super) reported: BTreeSet<String>,
    /// Whether the last pass left something to retry: a pod not found, an
    /// interface without the programs, a failed write.
    pub(super) retry: bool,
    pub(super) programmed: Gauge,
    pub(super) unprogrammed: Gauge,
    pub(super) invalid: Gauge,
}

impl Pods {
    pub(super) fn new(
        hostns_only: bool,
        addresses: bool,
        metrics: &crate::metrics::Metrics,
    ) -> Self {
        Self {
            hostns_only,
            addresses,
            programmed: metrics.sock_lb_opted_out_pods.clone(),
            unprogrammed: metrics.sock_lb_unprogrammed_pods.clone(),
            invalid: metrics.sock_lb_invalid_settings.clone(),
            ..Self::default()
        }
    }
}
