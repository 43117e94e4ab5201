//! The tc programs: the devices they are on, writing their settings
//! ([`super::tc_settings`]), and the kernel's flows left to it when they
//! first attach.

use std::{
    collections::{BTreeSet, HashSet},
    net::{IpAddr, SocketAddr},
};

use tracing::{error, info, warn};

use super::start::Agent;
use crate::{
    datapath::{self, conntrack, kernel_conntrack, xdp},
    metrics::XdpLabel,
};

impl Agent {
    /// Points the tc programs at the devices wanted now (`--devices`, else
    /// those holding the Node's primary addresses), writes their settings,
    /// the guarded frontends' source ranges, the node networks and the DSR
    /// frontends' endpoints if they changed; a failure is logged and
    /// retried at the next sync.
    pub(super) fn sync_tc(&mut self) {
        if let Err(e) = self.write_tc_config() {
            error!(
                error = &e as &dyn std::error::Error,
                "writing the tc programs' settings failed; retrying at the next sync"
            );
        }
        // Not the NodePort addresses: without a Node they fall back to
        // every address of the host, and the programs would land on
        // devices nobody chose.
        let devices: BTreeSet<String> = if self.devices.is_empty() {
            devices_holding(self.syncer.primary_ips())
        } else {
            self.devices.iter().cloned().collect()
        };
        let first = !self.tc.taken_over;
        if first {
            self.take_over();
        }
        match self.datapath.set_devices(devices.clone(), self.attached()) {
            Ok(true) if self.attached() => {
                info!(?devices, "tc programs attached to these devices");
            }
            Ok(_) => {}
            Err(e) => error!(
                error = &e as &dyn std::error::Error,
                ?devices,
                "attaching the tc programs failed; retrying at the next sync"
            ),
        }
        if first {
            // Flows the kernel made while the programs were attaching.
            self.take_over();
            self.tc.taken_over = true;
            if !self.tc.midflow {
                self.tc.midflow = true;
                if let Err(e) = self.write_tc_config() {
                    error!(
                        error = &e as &dyn std::error::Error,
                        "writing the tc programs' settings failed; retrying at the next sync"
                    );
                }
            }
        }
        self.tc_unattached
            .set(self.datapath.unattached_devices() as f64);
        self.check_xdp();
        if let Err(e) = self.syncer.write_source_ranges() {
            error!(
                error = &e as &dyn std::error::Error,
                "writing loadBalancerSourceRanges failed (their frontends admit nobody \
                 meanwhile); retrying at the next sync"
            );
        }
        if let Err(e) = self.syncer.write_node_nets() {
            error!(
                error = &e as &dyn std::error::Error,
                "writing which node each address is on failed (a DSR flow from a node to a \
                 backend on that same node may fail meanwhile); retrying at the next sync"
            );
        }
        if let Err(e) = self.syncer.write_dsr_endpoints() {
            error!(
                error = &e as &dyn std::error::Error,
                "writing the endpoints of DSR frontends failed (new DSR flows to them are \
                 refused meanwhile); retrying at the next sync"
            );
        }
        self.sync_pods();
    }

    /// Publishes where the XDP fast path is (`lbagent_xdp_attached`,
    /// `lbagent_xdp_veth_devices`, `lbagent_xdp_attach_failures`); at
    /// its first attachment with `--bpf-lb-acceleration=native`, a device
    /// without native XDP makes the agent refuse to run
    /// ([`Agent::refused`]). Later ones are logged and counted unattached.
    fn check_xdp(&mut self) {
        self.xdp_attached.clear();
        let mut veths = 0;
        for (device, how) in self.datapath.xdp_devices() {
            let mode = match how {
                xdp::Attached::Native { veth } => {
                    veths += usize::from(veth);
                    "native"
                }
                xdp::Attached::TcOnly => "tc-only",
            };
            let label = XdpLabel {
                device: device.to_owned(),
                mode: mode.to_owned(),
            };
            self.xdp_attached.get_or_create(&label).set(1.0);
        }
        self.xdp_veth.set(veths as f64);
        let Some(failed) = self.datapath.xdp_failed() else {
            return;
        };
        self.xdp_failures.set(failed.len() as f64);
        if self.tc.xdp_checked {
            return;
        }
        self.tc.xdp_checked = true;
        if self.datapath.acceleration() == xdp::Acceleration::Native && !failed.is_empty() {
            self.refused = Some(anyhow::anyhow!(
                "--bpf-lb-acceleration=native: no native XDP on {failed:?} (use best-effort to \
                 leave such devices on tc)"
            ));
        }
    }

    /// Writes the tc programs' settings if the node's addresses changed
    /// them since they were last written.
    fn write_tc_config(&mut self) -> Result<(), datapath::Error> {
        let config = self
            .tc
            .config(self.syncer.primary_ips(), self.syncer.node_port_ips());
        if self.tc.written == Some(config) {
            return Ok(());
        }
        self.datapath.write_settings(config)?;
        self.tc.written = Some(config);
        Ok(())
    }

    /// Writes the settings last written again, with what the datapath adds
    /// now (around [`crate::datapath::Datapath::attach`]); nothing before
    /// the first sync wrote them: what an earlier agent left serves until
    /// then.
    pub(super) fn rewrite_tc_config(&mut self) -> Result<(), datapath::Error> {
        match self.tc.written {
            Some(config) => self.datapath.write_settings(config),
            None => Ok(()),
        }
    }

    /// Leaves the flows kube-proxy's rules made to our external frontends,
    /// and the SNAT ports of its flows, to the kernel, whose conntrack
    /// keeps translating them (`datapath/takeover.rs`): replacing
    /// kube-proxy on a live node keeps its connections.
    fn take_over(&mut self) {
        let frontends: HashSet<(SocketAddr, u8)> = self
            .syncer
            .external_frontends()
            .map(|fe| (SocketAddr::new(fe.vip, fe.port), fe.proto.number()))
            .collect();
        let flows = match kernel_conntrack::dump() {
            Ok(flows) => flows,
            Err(e) => {
                warn!(
                    error = &e as &dyn std::error::Error,
                    "reading the kernel's conntrack: UDP flows another proxy made (and TCP ones \
                     to Maglev DSR frontends) are balanced anew by the tc programs"
                );
                return;
            }
        };
        let is_frontend = |addr, proto| frontends.contains(&(addr, proto));
        // What is to be written, even if writing it failed: its SNAT ports.
        let config = self
            .tc
            .config(self.syncer.primary_ips(), self.syncer.node_port_ips());
        match self
            .datapath
            .seed_kernel_flows(&flows, is_frontend, &config, conntrack::now())
        {
            Ok(s) if s.flows + s.ports > 0 => info!(
                flows = s.flows,
                snat_ports = s.ports,
                "left flows the kernel's conntrack translates (kube-proxy's) to it"
            ),
            Ok(_) => {}
            Err(e) => warn!(
                error = &e as &dyn std::error::Error,
                "leaving the kernel's flows to it"
            ),
        }
    }
}

/// The devices that hold one of `ips`.
fn devices_holding(ips: &[IpAddr]) -> BTreeSet<String> {
    match if_addrs::get_if_addrs() {
        Ok(addrs) => addrs
            .into_iter()
            .filter(|a| ips.contains(&a.ip()))
            .map(|a| a.name)
            .collect(),
        Err(e) => {
            warn!(
                error = &e as &dyn std::error::Error,
                "listing the interfaces"
            );
            BTreeSet::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn the_devices_holding_an_address_are_found() {
        assert_eq!(
            devices_holding(&ips(&["127.0.0.1"])),
            BTreeSet::from(["lo".to_owned()])
        );
        assert!(devices_holding(&ips(&["192.0.2.255"])).is_empty());
    }
}
