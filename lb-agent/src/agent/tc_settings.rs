//! What the agent tells the tc programs (`LB_CONFIG`) before the
//! datapath adds its part: SNAT addresses and ports, timeouts, seeds and
//! the SYN budget, from the flags and the node's addresses.

use std::net::IpAddr;

use lb_common::{CFG_F_MIDFLOW, DatapathConfig, Timeouts};

use super::gc;
use crate::{
    config::Conntrack,
    datapath::{layout::Capacities, snat_ports},
    model::maglev::HashSeed,
};

/// What the agent tells the tc programs, before the datapath adds its part
/// ([`crate::datapath::Datapath::settings`]).
pub(super) struct TcSettings {
    /// Conntrack timeouts and SNAT ports.
    pub(super) conntrack: Conntrack,
    /// See [`snat_ports::seed`].
    pub(super) nat_seed: u32,
    /// Seeds the flow hash of Maglev tables.
    pub(super) maglev_seed: u32,
    /// Each CPU's budget of unconfirmed TCP flows and its refill a second
    /// ([`syn_budget`]).
    pub(super) syn_budget: (u32, u32),
    /// The settings as last written, before the datapath's part: written
    /// again only when the node's addresses change them.
    pub(super) written: Option<DatapathConfig>,
    /// Whether the kernel's flows were left to it ([`Agent::take_over`]),
    /// once, around the tc programs' first attachment.
    pub(super) taken_over: bool,
    /// Whether the programs may take flows over mid-flow (`CFG_F_MIDFLOW`):
    /// once the kernel's flows are left to it, or from the start when an
    /// earlier agent's maps were found (it took over from kube-proxy then;
    /// clearing the flag meanwhile would fail a flow moving to this node).
    pub(super) midflow: bool,
    /// Whether the first attachment of the XDP fast path was checked
    /// (`--bpf-lb-acceleration=native` refuses to run without it).
    pub(super) xdp_checked: bool,
}

impl TcSettings {
    /// Refuses a SNAT range that overlaps the node's ephemeral ports.
    /// The budget of unconfirmed flows is shared out among the CPUs of
    /// maps of `capacities`.
    pub(super) fn new(
        conntrack: Conntrack,
        maglev: HashSeed,
        capacities: &Capacities,
    ) -> anyhow::Result<Self> {
        snat_ports::check(conntrack.snat_ports, snat_ports::ephemeral_range()?)?;
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| anyhow::anyhow!("{what}: {e}"))?;
        Ok(Self {
            syn_budget: syn_budget(capacities, &conntrack.timeouts, cpus as u32),
            conntrack,
            nat_seed: snat_ports::seed(),
            maglev_seed: maglev.flow[0],
            written: None,
            taken_over: false,
            midflow: false,
            xdp_checked: false,
        })
    }

    /// The settings for a node with these primary and NodePort addresses:
    /// flows of each family are SNATed to the node's primary address of
    /// that family, else its first NodePort address of it (none: such flows
    /// are dropped).
    pub(super) fn config(
        &self,
        primary_ips: &[IpAddr],
        node_port_ips: &[IpAddr],
    ) -> DatapathConfig {
        let mut ips = primary_ips.iter().chain(node_port_ips);
        let snat4_be = ips
            .clone()
            .find_map(|ip| match ip {
                IpAddr::V4(v4) => Some(v4.octets()),
                IpAddr::V6(_) => None,
            })
            .unwrap_or_default();
        let snat6_be = ips
            .find_map(|ip| match ip {
                IpAddr::V6(v6) if !v6.is_unicast_link_local() => Some(v6.octets()),
                _ => None,
            })
            .unwrap_or_default();
        let (ct, t) = (&self.conntrack, &self.conntrack.timeouts);
        DatapathConfig {
            snat4_be,
            nat_port_min: ct.snat_ports.0,
            nat_port_max: ct.snat_ports.1,
            nat_seed: self.nat_seed,
            flags: if self.midflow { CFG_F_MIDFLOW } else { 0 },
            timeout_tcp: t.tcp,
            timeout_tcp_syn: t.tcp_syn,
            timeout_tcp_fin: t.tcp_fin,
            timeout_any: t.any,
            // The datapath widens it to the ports earlier flows hold.
            nat_reply_min: 0,
            nat_reply_max: 0,
            snat6_be,
            maglev_seed: self.maglev_seed,
            syn_budget: self.syn_budget.0,
            syn_refill: self.syn_budget.1,
        }
    }
}

/// Each CPU's budget of unconfirmed TCP flows (`lb_common::syn_budget`),
/// and the tokens it gets back a second: a quarter of the flows the
/// conntrack and SNAT maps hold, shared by the `cpus`, coming back as fast
/// as unconfirmed entries expire (`tcp_syn`) and are collected.
fn syn_budget(capacities: &Capacities, t: &Timeouts, cpus: u32) -> (u32, u32) {
    let flows = (capacities.ct / 2).min(capacities.nat) / 4;
    let window = t.tcp_syn + gc::CONNTRACK_GC.as_secs() as u32;
    let cpus = cpus.max(1);
    ((flows / cpus).max(1), (flows / window / cpus).max(1))
}

#[cfg(test)]
mod tests {
    use lb_common::Timeouts;

    use super::*;

    fn settings() -> TcSettings {
        TcSettings {
            conntrack: Conntrack {
                timeouts: Timeouts::DEFAULT,
                snat_ports: (1024, 29999),
            },
            nat_seed: 7,
            maglev_seed: 9,
            syn_budget: (11, 13),
            written: None,
            taken_over: false,
            midflow: false,
            xdp_checked: false,
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn flows_are_snated_to_the_primary_ipv4_address_else_the_first_ipv4_node_port_address() {
        let s = settings();
        let primary = ips(&["fd00::1", "192.168.0.1"]);
        let node_ports = ips(&["10.0.0.1"]);
        assert_eq!(s.config(&primary, &node_ports).snat4_be, [192, 168, 0, 1]);
        assert_eq!(
            s.config(&ips(&["fd00::1"]), &node_ports).snat4_be,
            [10, 0, 0, 1]
        );
        // Nowhere to SNAT to: such flows are dropped.
        assert_eq!(s.config(&ips(&["fd00::1"]), &[]).snat4_be, [0; 4]);
    }

    #[test]
    fn the_settings_carry_the_flags_ports_timeouts_and_seed() {
        let c = settings().config(&[], &[]);
        assert_eq!((c.nat_port_min, c.nat_port_max), (1024, 29999));
        assert_eq!(c.nat_seed, 7);
        assert_eq!(c.maglev_seed, 9);
        let t = Timeouts::DEFAULT;
        assert_eq!(
            (
                c.timeout_tcp,
                c.timeout_tcp_syn,
                c.timeout_tcp_fin,
                c.timeout_any
            ),
            (t.tcp, t.tcp_syn, t.tcp_fin, t.any)
        );
        // The datapath's part is not the agent's to set.
        assert_eq!((c.flags, c.nat_reply_min, c.nat_reply_max), (0, 0, 0));
        // Mid-flow failover, once the kernel's flows are left to it.
        let s = TcSettings {
            midflow: true,
            ..settings()
        };
        assert_eq!(s.config(&[], &[]).flags, CFG_F_MIDFLOW);
    }

    #[test]
    fn the_syn_budget_is_a_quarter_of_the_flows_the_maps_hold_shared_by_the_cpus() {
        let t = Timeouts::DEFAULT;
        let caps = |ct, nat| Capacities {
            ct,
            nat,
            ..Capacities::default()
        };
        // 262,144 entries: 131,072 flows; a quarter, over 2 CPUs; back
        // over 60 s of SYN timeout and 30 s of collection.
        assert_eq!(
            syn_budget(&caps(262_144, 131_072), &t, 2),
            (16_384, 32_768 / 90 / 2)
        );
        // The smaller map bounds it.
        assert_eq!(syn_budget(&caps(262_144, 8_192), &t, 1), (2_048, 22));
        // Never nothing.
        assert_eq!(syn_budget(&caps(2, 2), &t, 4), (1, 1));
        let c = settings().config(&[], &[]);
        assert_eq!((c.syn_budget, c.syn_refill), (11, 13));
    }
}
