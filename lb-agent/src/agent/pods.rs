//! Pods that opted out of socket load balancing (`model::sock_lb`): found
//! (their interface, their network namespace), given the pods' tc
//! programs, and only then named in `LB_SOCK_NETNS`, so that a pod keeps
//! socket load balancing until its packets are translated at its
//! interface. When a pod opts in again its namespace leaves the map first;
//! its interface keeps the programs, for the flows it started per packet,
//! until the pod and its interface go.

use std::collections::BTreeSet;

use tracing::{error, info, warn};

use super::start::Agent;
use crate::{
    metrics::Gauge,
    model::sock_lb::OptOutView,
    sockets::{
        NetnsSources,
        pods::{Found, locate},
    },
};

/// What the last pass did, to tell what changed.
#[derive(Default)]
pub(super) struct Pods {
    /// `--bpf-lb-sock-hostns-only`.
    hostns_only: bool,
    /// The last view.
    view: Option<OptOutView>,
    /// The namespaces `LB_SOCK_NETNS` names, as last written.
    written: Option<BTreeSet<u64>>,
    /// What the last pass logged as unprogrammed, not found or invalid.
    reported: BTreeSet<String>,
    /// Whether the last pass left something to retry: a pod not found, an
    /// interface without the programs, a failed write.
    pub(super) retry: bool,
    programmed: Gauge,
    unprogrammed: Gauge,
    invalid: Gauge,
}

impl Pods {
    pub(super) fn new(hostns_only: bool, metrics: &crate::metrics::Metrics) -> Self {
        Self {
            hostns_only,
            programmed: metrics.sock_lb_opted_out_pods.clone(),
            unprogrammed: metrics.sock_lb_unprogrammed_pods.clone(),
            invalid: metrics.sock_lb_invalid_settings.clone(),
            ..Self::default()
        }
    }
}

impl Agent {
    /// Finds the pods of this node that opted out, puts the pods' tc
    /// programs on their interfaces, and names their namespaces in
    /// `LB_SOCK_NETNS`; what cannot be done is logged (once) and counted.
    /// Finds them again only when the opt-outs changed or the last pass
    /// left something to retry. Nothing is done before the Pods and
    /// Namespaces were listed: an earlier agent's opt-outs stand until
    /// then.
    pub(super) fn sync_pods(&mut self) {
        if !self.syncer.opt_outs().listed() {
            return;
        }
        let view = self
            .syncer
            .opt_outs()
            .view(self.syncer.node_name(), self.pods.hostns_only);
        let changed = self.pods.view.as_ref() != Some(&view);
        if !changed && !self.pods.retry {
            return;
        }
        let found = match locate(&view.pods, &NetnsSources::default()) {
            Ok(found) => found,
            Err(e) => {
                error!(
                    error = &e as &dyn std::error::Error,
                    "finding the pods that opted out of socket load balancing; they keep it, \
                     retrying"
                );
                self.pods.retry = true;
                return;
            }
        };
        let wanted: BTreeSet<String> = found.pods.values().map(|l| l.device.clone()).collect();
        let ready = self.datapath.set_pod_devices(&wanted, self.attached());
        let cookies: BTreeSet<u64> = found
            .pods
            .values()
            .filter(|l| ready.contains(&l.device))
            .map(|l| l.netns_cookie)
            .collect();
        let mut retry = ready.len() < wanted.len() || !found.missing.is_empty();
        if self.pods.written.as_ref() != Some(&cookies) {
            match self.datapath.write_sock_netns(&cookies) {
                Ok(_) => self.pods.written = Some(cookies.clone()),
                Err(e) => {
                    error!(
                        error = &e as &dyn std::error::Error,
                        "writing LB_SOCK_NETNS failed; retrying"
                    );
                    retry = true;
                }
            }
        }
        self.report(&view, &found);
        let programmed = cookies.len();
        let unprogrammed = view.pods.len() - programmed + view.unprogrammable.len();
        if changed {
            info!(
                pods = programmed,
                unprogrammed, "pods whose Service traffic goes per packet at their interface"
            );
        }
        self.pods.programmed.set(programmed as f64);
        self.pods.unprogrammed.set(unprogrammed as f64);
        self.pods.invalid.set(view.invalid.len() as f64);
        self.pods.retry = retry;
        self.pods.view = Some(view);
    }

    /// Logs the opted-out pods that cannot be served per packet, those not
    /// found, and the settings that mean nothing: each once, while it
    /// lasts.
    fn report(&mut self, view: &OptOutView, found: &Found) {
        let mut now = BTreeSet::new();
        let mut new = |line: String| now.insert(line.clone()) && !self.pods.reported.contains(&line);
        for (pod, why) in &view.unprogrammable {
            if new(format!("{pod}: {why}")) {
                warn!(%pod, "opted out of socket load balancing, but cannot be served per packet ({why}); it keeps socket load balancing");
            }
        }
        for (pod, why) in &found.missing {
            if new(format!("{pod}: {why}")) {
                warn!(%pod, "opted out of socket load balancing, but not found ({why}); it keeps socket load balancing, retrying");
            }
        }
        for (kind, name, value) in &view.invalid {
            if new(format!("{kind} {name}={value}")) {
                warn!(
                    object = format!("{kind} {name}"),
                    value, "lb-agent.io/socket-lb is neither enabled nor disabled; read as unset"
                );
            }
        }
        self.pods.reported = now;
    }
}
