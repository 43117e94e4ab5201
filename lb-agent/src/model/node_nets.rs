//! Which node each address belongs to (`LB4_NODE_NETS`, `LB6_NODE_NETS`),
//! for DSR: a new flow whose client and backend are on the same node is
//! SNATed, since the backend's answer would reach that client without
//! crossing a device of ours and never get the frontend's address back.
//!
//! The table holds every Node's `InternalIP` and `ExternalIP` addresses
//! (/32, /128) and pod CIDRs, and each endpoint of an external DSR frontend
//! (/32, /128) that names its node, unless its node's networks already
//! cover it (its pod CIDR, its node's address), so that a backend on a node
//! without a pod CIDR (or outside it) is placed too. Each node has a
//! number of its own, never 0, kept for as long as a Node or an endpoint
//! names it. A prefix two nodes claim goes to the Node's address or CIDR
//! over an endpoint, then to the first node name; the conflict is reported
//! once, when it begins. No I/O: the syncer writes and logs.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Arc,
};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;

use super::{Frontend, topologies::EndpointTopology};

/// Where a Node is on the network, as every node's agent reads every
/// Node (for DSR: a client on its backend's node is SNATed instead).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeNetworks {
    pub name: String,
    /// Its `InternalIP` and `ExternalIP` addresses, both families, in the
    /// Node's order, each once.
    pub addresses: Vec<IpAddr>,
    /// `spec.podCIDRs` (else `spec.podCIDR`), host bits cleared, each once.
    pub pod_cidrs: Vec<IpNet>,
}

impl NodeNetworks {
    /// What is read of `node`; an address or CIDR that does not parse is
    /// left out.
    pub fn of(node: &Node) -> Self {
        let mut addresses: Vec<IpAddr> = Vec::new();
        let listed = node.status.as_ref().and_then(|s| s.addresses.as_deref());
        for a in listed.unwrap_or_default() {
            if !matches!(a.type_.as_str(), "InternalIP" | "ExternalIP") {
                continue;
            }
            if let Ok(ip) = a.address.trim().parse::<IpAddr>()
                && !addresses.contains(&ip)
            {
                addresses.push(ip);
            }
        }
        let spec = node.spec.as_ref();
        let cidrs = spec
            .and_then(|s| s.pod_cidrs.clone())
            .filter(|c| !c.is_empty())
            .or_else(|| spec.and_then(|s| s.pod_cidr.clone()).map(|c| vec![c]))
            .unwrap_or_default();
        let mut pod_cidrs: Vec<IpNet> = Vec::new();
        for cidr in cidrs {
            if let Ok(net) = cidr.trim().parse::<IpNet>()
                && !pod_cidrs.contains(&net.trunc())
            {
                pod_cidrs.push(net.trunc());
            }
        }
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            addresses,
            pod_cidrs,
        }
    }
}

/// A Node's networks as kept (its name is the key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Networks {
    addresses: Vec<IpAddr>,
    pod_cidrs: Vec<IpNet>,
}

/// An endpoint of a DSR frontend and where it runs: its address, and its
/// topology (shared with the model's slices), which names its node.
pub type EndpointNode = (IpAddr, Arc<EndpointTopology>);

/// Every Node's networks and the DSR frontends' endpoints, incrementally;
/// [`NodeNets::table`] makes the map's entries of them.
#[derive(Debug, Default)]
pub struct NodeNets {
    nodes: BTreeMap<String, Networks>,
    /// The Nodes a (re)list named so far, while one runs.
    relisting: Option<BTreeSet<String>>,
    /// Each external DSR frontend's endpoints that name their node.
    endpoints: BTreeMap<Frontend, Vec<EndpointNode>>,
    /// Each node name's number, as of the last table.
    numbers: BTreeMap<String, u32>,
    /// The prefixes claimed for two nodes at the last table.
    conflicts: BTreeSet<IpNet>,
}

/// A prefix claimed for two nodes: `kept`'s, and `other` lost it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub net: IpNet,
    pub kept: String,
    pub other: String,
}

/// What [`NodeNets::table`] makes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// Each prefix (host bits clear) with its node's number.
    pub entries: BTreeMap<IpNet, u32>,
    /// The conflicts that began since the last table.
    pub new_conflicts: Vec<Conflict>,
}

impl NodeNets {
    /// A Node was listed or changed; says whether its networks changed (a
    /// Node changes at every heartbeat, its networks seldom).
    pub fn apply(&mut self, node: NodeNetworks) -> bool {
        if node.name.is_empty() {
            return false;
        }
        if let Some(seen) = &mut self.relisting {
            seen.insert(node.name.clone());
        }
        let networks = Networks {
            addresses: node.addresses,
            pod_cidrs: node.pod_cidrs,
        };
        self.nodes.insert(node.name, networks.clone()) != Some(networks)
    }

    /// A Node was deleted; says whether it was known.
    pub fn delete(&mut self, name: &str) -> bool {
        self.nodes.remove(name).is_some()
    }

    /// A (re)list of every Node begins.
    pub fn relist(&mut self) {
        self.relisting = Some(BTreeSet::new());
    }

    /// The (re)list is complete: the Nodes it did not name are gone. Says
    /// whether any was.
    pub fn listed(&mut self) -> bool {
        let Some(seen) = self.relisting.take() else {
            return false;
        };
        let before = self.nodes.len();
        self.nodes.retain(|name, _| seen.contains(name));
        self.nodes.len() != before
    }

    /// The endpoints of external DSR frontend `fe` are now `endpoints`
    /// (empty: it is none, or has none that names its node); says whether
    /// that changes where they are.
    pub fn set_endpoints(&mut self, fe: Frontend, endpoints: Vec<EndpointNode>) -> bool {
        if endpoints.is_empty() {
            return self.endpoints.remove(&fe).is_some();
        }
        let same = self.endpoints.get(&fe).is_some_and(|old| {
            old.len() == endpoints.len()
                && old
                    .iter()
                    .zip(&endpoints)
                    .all(|((a, at), (b, bt))| a == b && at.node_name == bt.node_name)
        });
        self.endpoints.insert(fe, endpoints);
        !same
    }

    /// The DSR frontends whose endpoints are held.
    pub fn frontends(&self) -> impl Iterator<Item = &Frontend> + '_ {
        self.endpoints.keys()
    }

    /// How many Nodes are known.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The map's entries. `written` is what the map holds (an earlier
    /// agent's, after a restart): a node new to this table takes its
    /// number from there when it is free, so that a restart renumbers
    /// nothing.
    pub fn table(&mut self, written: &BTreeMap<IpNet, u32>) -> Table {
        self.number(written);
        let mut claims = Claims::default();
        for (name, nets) in &self.nodes {
            let number = self.numbers[name];
            for ip in &nets.addresses {
                claims.claim(IpNet::from(*ip), number, name);
            }
            for net in &nets.pod_cidrs {
                claims.claim(*net, number, name);
            }
        }
        // Only what the nodes' networks do not already place right.
        let lengths: BTreeSet<u8> = claims.by_net.keys().map(IpNet::prefix_len).collect();
        for (ip, name) in endpoint_nodes(&self.endpoints) {
            let number = self.numbers[name];
            if claims.longest_match(ip, &lengths) != Some(number) {
                claims.claim(IpNet::from(ip), number, name);
            }
        }
        let conflicts: BTreeSet<IpNet> = claims.conflicts.iter().map(|c| c.net).collect();
        let new_conflicts = claims
            .conflicts
            .into_iter()
            .filter(|c| !self.conflicts.contains(&c.net))
            .collect();
        self.conflicts = conflicts;
        Table {
            entries: claims
                .by_net
                .into_iter()
                .map(|(net, (number, _))| (net, number))
                .collect(),
            new_conflicts,
        }
    }

    /// Gives every node name in use a number, and frees the numbers of
    /// those no longer in use. A new name takes the number `written` gives
    /// one of its networks if no other name has it, else the lowest free.
    fn number(&mut self, written: &BTreeMap<IpNet, u32>) {
        let in_use: BTreeSet<&str> = self
            .nodes
            .keys()
            .map(String::as_str)
            .chain(
                endpoint_nodes(&self.endpoints)
                    .into_iter()
                    .map(|(_, name)| name),
            )
            .collect();
        self.numbers
            .retain(|name, _| in_use.contains(name.as_str()));
        let mut taken: BTreeSet<u32> = self.numbers.values().copied().collect();
        let mut fresh = Vec::new();
        for name in in_use {
            if self.numbers.contains_key(name) {
                continue;
            }
            let nets = self.nodes.get(name);
            let own = nets
                .into_iter()
                .flat_map(|n| n.addresses.iter().map(|ip| IpNet::from(*ip)))
                .chain(nets.into_iter().flat_map(|n| n.pod_cidrs.iter().copied()))
                .find_map(|net| written.get(&net).copied())
                .filter(|n| *n != 0 && !taken.contains(n));
            match own {
                Some(number) => {
                    taken.insert(number);
                    self.numbers.insert(name.to_owned(), number);
                }
                None => fresh.push(name.to_owned()),
            }
        }
        let mut next = 1;
        for name in fresh {
            while taken.contains(&next) {
                next += 1;
            }
            taken.insert(next);
            self.numbers.insert(name, next);
        }
    }
}

/// Every endpoint of `endpoints` with its node's name, each once, in
/// order.
fn endpoint_nodes(endpoints: &BTreeMap<Frontend, Vec<EndpointNode>>) -> BTreeSet<(IpAddr, &str)> {
    endpoints
        .values()
        .flatten()
        .filter_map(|(ip, t)| Some((*ip, t.node_name.as_deref()?)))
        .collect()
}

/// The prefixes claimed so far while a table is made.
#[derive(Default)]
struct Claims<'a> {
    by_net: BTreeMap<IpNet, (u32, &'a str)>,
    conflicts: Vec<Conflict>,
}

impl<'a> Claims<'a> {
    /// `net` for node `name` (`number`), unless another node has it.
    fn claim(&mut self, net: IpNet, number: u32, name: &'a str) {
        let (kept, kept_name) = *self.by_net.entry(net).or_insert((number, name));
        if kept != number && !self.conflicts.iter().any(|c| c.net == net) {
            self.conflicts.push(Conflict {
                net,
                kept: kept_name.to_owned(),
                other: name.to_owned(),
            });
        }
    }

    /// The number the longest prefix claimed so far that holds `ip` gives,
    /// among the prefix `lengths` claimed.
    fn longest_match(&self, ip: IpAddr, lengths: &BTreeSet<u8>) -> Option<u32> {
        lengths.iter().rev().find_map(|&len| {
            // An IPv6 length past 32 does not make an IPv4 net.
            let net = IpNet::new(ip, len).ok()?.trunc();
            self.by_net.get(&net).map(|(n, _)| *n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_networks_are_its_ip_addresses_and_pod_cidrs() {
        let node = lb_fixtures::Node::new("node-a")
            .address("Hostname", "node-a")
            .address("InternalIP", "192.0.2.10")
            .address("ExternalIP", "203.0.113.5")
            .address("InternalIP", "fd00::10")
            .address("InternalDNS", "node-a.example")
            .address("ExternalIP", "192.0.2.10")
            .address("InternalIP", "not-an-ip")
            .pod_cidr("10.42.1.0/24")
            .pod_cidr("fd42:1::1/64")
            .pod_cidr("bogus")
            .build();
        let nets = NodeNetworks::of(&node);
        assert_eq!(nets.name, "node-a");
        let ips: Vec<IpAddr> = ["192.0.2.10", "203.0.113.5", "fd00::10"]
            .map(|a| a.parse().unwrap())
            .into();
        assert_eq!(nets.addresses, ips);
        let cidrs: Vec<IpNet> = ["10.42.1.0/24", "fd42:1::/64"]
            .map(|c| c.parse().unwrap())
            .into();
        assert_eq!(nets.pod_cidrs, cidrs);

        // An older Node with `podCIDR` alone.
        let mut old = lb_fixtures::Node::new("node-b").build();
        old.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidr: Some("10.42.2.0/24".into()),
            ..Default::default()
        });
        assert_eq!(
            NodeNetworks::of(&old).pod_cidrs,
            ["10.42.2.0/24".parse::<IpNet>().unwrap()]
        );
        assert_eq!(
            NodeNetworks::of(&lb_fixtures::Node::new("bare").build()),
            NodeNetworks {
                name: "bare".into(),
                ..NodeNetworks::default()
            }
        );
    }
    use crate::model::{Proto, Scope};

    fn node(name: &str, addresses: &[&str], pod_cidrs: &[&str]) -> NodeNetworks {
        NodeNetworks {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
            pod_cidrs: pod_cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        }
    }

    fn fe(port: u16) -> Frontend {
        Frontend {
            vip: "192.168.57.1".parse().unwrap(),
            port,
            proto: Proto::Tcp,
            scope: Scope::External,
        }
    }

    fn on(node: &str) -> Arc<EndpointTopology> {
        Arc::new(EndpointTopology {
            node_name: Some(node.into()),
            ..EndpointTopology::default()
        })
    }

    fn ep(ip: &str, node: &str) -> EndpointNode {
        (ip.parse().unwrap(), on(node))
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn entries(list: &[(&str, u32)]) -> BTreeMap<IpNet, u32> {
        list.iter().map(|(n, v)| (net(n), *v)).collect()
    }

    #[test]
    fn each_node_places_its_addresses_and_pod_cidrs_under_a_number_of_its_own() {
        let mut t = NodeNets::default();
        assert!(t.apply(node(
            "node-2",
            &["192.168.57.2", "fd00:57::2"],
            &["10.42.2.0/24", "fd42:2::/64"]
        )));
        assert!(t.apply(node("node-1", &["192.168.57.1"], &["10.42.1.0/24"])));
        let table = t.table(&BTreeMap::new());
        // Numbered in name order, from 1.
        assert_eq!(
            table.entries,
            entries(&[
                ("10.42.1.0/24", 1),
                ("10.42.2.0/24", 2),
                ("192.168.57.1/32", 1),
                ("192.168.57.2/32", 2),
                ("fd00:57::2/128", 2),
                ("fd42:2::/64", 2),
            ])
        );
        assert!(table.new_conflicts.is_empty());
    }

    #[test]
    fn a_nodes_number_stays_while_it_exists_and_a_freed_one_is_reused() {
        let mut t = NodeNets::default();
        t.apply(node("b", &["192.0.2.2"], &[]));
        t.apply(node("c", &["192.0.2.3"], &[]));
        let first = t.table(&BTreeMap::new()).entries;
        assert_eq!(first, entries(&[("192.0.2.2/32", 1), ("192.0.2.3/32", 2)]));
        // `a` sorts first but comes later: the others keep theirs.
        t.apply(node("a", &["192.0.2.1"], &[]));
        let second = t.table(&first).entries;
        assert_eq!(
            second,
            entries(&[
                ("192.0.2.1/32", 3),
                ("192.0.2.2/32", 1),
                ("192.0.2.3/32", 2)
            ])
        );
        assert!(t.delete("b"));
        assert!(!t.delete("b"));
        t.table(&second);
        t.apply(node("d", &["192.0.2.4"], &[]));
        assert_eq!(
            t.table(&second).entries,
            entries(&[
                ("192.0.2.1/32", 3),
                ("192.0.2.3/32", 2),
                ("192.0.2.4/32", 1)
            ])
        );
    }

    #[test]
    fn after_a_restart_the_numbers_in_the_map_are_kept() {
        let written = entries(&[("192.0.2.1/32", 7), ("192.0.2.2/32", 3), ("10.0.0.0/8", 3)]);
        let mut t = NodeNets::default();
        t.apply(node("a", &["192.0.2.1"], &[]));
        t.apply(node("b", &["192.0.2.2"], &["10.0.0.0/8"]));
        // A new node whose address the map gives a number already taken.
        t.apply(node("c", &["192.0.2.3", "192.0.2.2"], &[]));
        let table = t.table(&written);
        assert_eq!(table.entries[&net("192.0.2.1/32")], 7);
        assert_eq!(table.entries[&net("10.0.0.0/8")], 3);
        assert_eq!(table.entries[&net("192.0.2.3/32")], 1, "3 was taken");
        assert_eq!(table.entries[&net("192.0.2.2/32")], 3, "b's, named first");
    }

    #[test]
    fn a_heartbeat_is_no_change_and_a_relist_drops_what_it_did_not_name() {
        let mut t = NodeNets::default();
        assert!(t.apply(node("a", &["192.0.2.1"], &[])));
        assert!(t.apply(node("b", &["192.0.2.2"], &[])));
        assert!(!t.apply(node("a", &["192.0.2.1"], &[])));
        assert!(t.apply(node("a", &["192.0.2.1"], &["10.1.0.0/16"])));
        assert!(!t.apply(node("", &["192.0.2.9"], &[])), "no name");
        t.relist();
        assert!(!t.apply(node("a", &["192.0.2.1"], &["10.1.0.0/16"])));
        assert_eq!(t.nodes(), 2, "nothing goes before the list's end");
        assert!(t.listed());
        assert_eq!(t.nodes(), 1);
        t.relist();
        t.apply(node("a", &["192.0.2.1"], &["10.1.0.0/16"]));
        assert!(!t.listed(), "the same list: no change");
        assert!(!t.listed(), "no relist running");
    }

    #[test]
    fn endpoints_are_placed_by_their_node_name_where_the_nodes_networks_do_not() {
        let mut t = NodeNets::default();
        t.apply(node("node-1", &["192.168.57.1"], &["10.42.1.0/24"]));
        t.apply(node("node-2", &["192.168.57.2"], &[]));
        let endpoints = || {
            vec![
                // In its node's pod CIDR: placed already.
                ep("10.42.1.5", "node-1"),
                // Its node has no pod CIDR.
                ep("10.99.0.7", "node-2"),
                // A host-network pod: its node's address.
                ep("192.168.57.2", "node-2"),
                // In node-1's CIDR but on node-2 (the endpoint says so).
                ep("10.42.1.9", "node-2"),
                // A node no Node object names (the list is refused, say).
                ep("10.77.0.1", "node-9"),
            ]
        };
        assert!(t.set_endpoints(fe(30090), endpoints()));
        assert!(!t.set_endpoints(fe(30090), endpoints()), "the same places");
        // Another frontend of an endpoint adds no entry.
        t.set_endpoints(fe(30091), vec![ep("10.99.0.7", "node-2")]);
        let table = t.table(&BTreeMap::new());
        assert_eq!(
            table.entries,
            entries(&[
                ("10.42.1.0/24", 1),
                ("10.42.1.9/32", 2),
                ("10.77.0.1/32", 3),
                ("10.99.0.7/32", 2),
                ("192.168.57.1/32", 1),
                ("192.168.57.2/32", 2),
            ])
        );
        assert!(table.new_conflicts.is_empty());
        // The frontends go: their endpoints' entries, and node-9's number.
        assert!(t.set_endpoints(fe(30090), Vec::new()));
        assert!(!t.set_endpoints(fe(30090), Vec::new()));
        assert_eq!(t.frontends().collect::<Vec<_>>(), [&fe(30091)]);
        t.set_endpoints(fe(30091), Vec::new());
        assert_eq!(t.table(&BTreeMap::new()).entries.len(), 3);
        assert_eq!(t.numbers.len(), 2);
    }

    #[test]
    fn a_prefix_two_nodes_claim_goes_to_the_node_then_the_first_name_reported_once() {
        let mut t = NodeNets::default();
        t.apply(node("b", &["192.0.2.2"], &["10.0.0.0/24"]));
        t.apply(node("a", &["192.0.2.1"], &["10.0.0.0/24"]));
        // An endpoint claiming b's address for c.
        t.set_endpoints(fe(1), vec![ep("192.0.2.2", "c")]);
        let table = t.table(&BTreeMap::new());
        assert_eq!(table.entries[&net("10.0.0.0/24")], 1, "a's");
        assert_eq!(table.entries[&net("192.0.2.2/32")], 2, "the Node's");
        assert_eq!(
            table.new_conflicts,
            [
                Conflict {
                    net: net("10.0.0.0/24"),
                    kept: "a".into(),
                    other: "b".into(),
                },
                Conflict {
                    net: net("192.0.2.2/32"),
                    kept: "b".into(),
                    other: "c".into(),
                },
            ]
        );
        // Reported when it begins only; again if it begins again.
        assert!(t.table(&table.entries).new_conflicts.is_empty());
        t.set_endpoints(fe(1), Vec::new());
        assert_eq!(t.table(&table.entries).new_conflicts.len(), 0);
        t.set_endpoints(fe(1), vec![ep("192.0.2.2", "c")]);
        assert_eq!(t.table(&table.entries).new_conflicts.len(), 1);
    }
}
