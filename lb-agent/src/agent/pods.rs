//! Pods that opted out of socket load balancing (`model::sock_lb`): found
//! (their interface, their network namespace), given the pods' tc
//! programs, and only then named in `LB_SOCK_NETNS`, so that a pod keeps
//! socket load balancing until its packets are translated at its
//! interface. When a pod opts in again its namespace leaves the map first;
//! its interface keeps the programs, for the flows it started per packet,
//! until the pod and its interface go.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use lb_common::{SOCK_NETNS_ADDR4, SOCK_NETNS_ADDR6, SOCK_NETNS_OPT_OUT, SockNetns};

use tracing::{error, info, warn};

use super::start::Agent;
use crate::{
    model::sock_lb::OptOutView,
    sockets::{
        NetnsSources,
        pods::{Found, locate, own_netns_cookie},
    },
};

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
        let view = self.syncer.opt_outs().view(
            self.syncer.node_name(),
            self.pods.hostns_only,
            self.pods.addresses,
        );
        let node_ips = if self.pods.addresses {
            self.syncer.primary_ips().to_vec()
        } else {
            Vec::new()
        };
        let now = (view, node_ips);
        let changed = self.pods.view.as_ref() != Some(&now);
        if !changed && !self.pods.retry {
            return;
        }
        let (view, node_ips) = now;
        let wanted_pods: Vec<_> = view.pods.iter().chain(&view.addressed).cloned().collect();
        let found = match locate(&wanted_pods, &NetnsSources::default()) {
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
        let wanted: BTreeSet<String> = found
            .pods
            .iter()
            .filter(|(pod, _)| view.opted_out(pod))
            .map(|(_, l)| l.device.clone())
            .collect();
        let ready = self.datapath.set_pod_devices(&wanted, self.attached());
        let mut retry = ready.len() < wanted.len() || !found.missing.is_empty();
        let mut entries = BTreeMap::new();
        let mut programmed = 0;
        for (pod, at) in &found.pods {
            let ips = wanted_pods
                .iter()
                .find(|p| &p.pod == pod)
                .map_or(&[][..], |p| &p.ips[..]);
            let mut entry = if self.pods.addresses {
                addressed(ips)
            } else {
                SockNetns::default()
            };
            if view.opted_out(pod) && ready.contains(&at.device) {
                entry.flags |= SOCK_NETNS_OPT_OUT;
                programmed += 1;
            }
            if entry.flags != 0 {
                entries.insert(at.netns_cookie, entry);
            }
        }
        if self.pods.addresses {
            match own_netns_cookie() {
                Ok(cookie) => {
                    entries.insert(cookie, addressed(&node_ips));
                }
                Err(e) => {
                    error!(
                        error = &e as &dyn std::error::Error,
                        "reading the node's network namespace cookie; retrying"
                    );
                    retry = true;
                }
            }
        }
        if self.pods.written.as_ref() != Some(&entries) {
            match self.datapath.write_sock_netns(&entries) {
                Ok(_) => self.pods.written = Some(entries),
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
        self.pods.view = Some((view, node_ips));
    }

    /// Logs the opted-out pods that cannot be served per packet, those not
    /// found, and the settings that mean nothing: each once, while it
    /// lasts.
    fn report(&mut self, view: &OptOutView, found: &Found) {
        let mut now = BTreeSet::new();
        let mut new =
            |line: String| now.insert(line.clone()) && !self.pods.reported.contains(&line);
        for (pod, why) in &view.unprogrammable {
            if new(format!("{pod}: {why}")) {
                warn!(%pod, "opted out of socket load balancing, but cannot be served per packet ({why}); it keeps socket load balancing");
            }
        }
        for (pod, why) in found.missing.iter().filter(|(pod, _)| view.opted_out(pod)) {
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

/// The entry of a namespace whose sockets send from `ips` (the first of
/// each family).
fn addressed(ips: &[IpAddr]) -> SockNetns {
    let mut entry = SockNetns::default();
    for ip in ips {
        match ip {
            IpAddr::V4(v4) if entry.flags & SOCK_NETNS_ADDR4 == 0 => {
                entry.flags |= SOCK_NETNS_ADDR4;
                entry.addr4_be = v4.octets();
            }
            IpAddr::V6(v6) if entry.flags & SOCK_NETNS_ADDR6 == 0 => {
                entry.flags |= SOCK_NETNS_ADDR6;
                entry.addr6_be = v6.octets();
            }
            _ => {}
        }
    }
    entry
}
