//! Which pods of this node opted out of socket load balancing: their
//! Service traffic goes per packet at their host-side interface, so that
//! they see the Service address (a sidecar reading `SO_ORIGINAL_DST`, a
//! sandbox or VM behind the pod's interface).
//!
//! A Pod or its Namespace says so with [`SOCKET_LB_KEY`], as a label or an
//! annotation: `disabled` opts out, `enabled` opts in again; a Pod's word
//! wins over its Namespace's, and on one object an annotation's over a
//! label's. `--bpf-lb-sock-hostns-only` (Cilium's flag) opts every pod out.
//! A pod on the host's network cannot: its sockets are the node's.
//!
//! Pure: the sources hand in what they read of Pods and Namespaces.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    net::IpAddr,
};

/// The label or annotation, on a Pod or a Namespace, that opts it out of
/// socket load balancing (`disabled`) or in again (`enabled`).
pub const SOCKET_LB_KEY: &str = "lb-agent.io/socket-lb";

/// What an object says of socket load balancing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockLb {
    Enabled,
    Disabled,
}

/// What an object's [`SOCKET_LB_KEY`] says: nothing, a choice, or a value
/// that is neither (reported, and read as nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Setting {
    #[default]
    Unset,
    Set(SockLb),
    Invalid(String),
}

impl Setting {
    /// The setting of an object with this `label` and `annotation` value of
    /// [`SOCKET_LB_KEY`]: the annotation's if it has one.
    pub fn of(label: Option<&str>, annotation: Option<&str>) -> Self {
        match annotation.or(label).map(str::trim) {
            None => Self::Unset,
            Some("disabled") => Self::Set(SockLb::Disabled),
            Some("enabled") => Self::Set(SockLb::Enabled),
            Some(other) => Self::Invalid(other.to_owned()),
        }
    }

    fn choice(&self) -> Option<SockLb> {
        match self {
            Self::Set(c) => Some(*c),
            Self::Unset | Self::Invalid(_) => None,
        }
    }
}

/// A pod, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What the agent reads of a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFacts {
    pub pod: PodRef,
    /// `spec.nodeName` (empty: not scheduled yet).
    pub node_name: String,
    pub host_network: bool,
    /// `status.podIPs`, as far as they parse.
    pub ips: Vec<IpAddr>,
    pub setting: Setting,
}

/// A pod of this node whose Service traffic goes per packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptedOut {
    pub pod: PodRef,
    pub ips: Vec<IpAddr>,
}

/// What the opt-outs come to on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptOutView {
    /// The opted-out pods with addresses, to find and translate.
    pub pods: Vec<OptedOut>,
    /// The other pods with addresses, when their addresses are wanted
    /// (`--bpf-lb-source-range-all-types`: a connect to a guarded cluster
    /// IP is checked against the address its pod sends from).
    pub addressed: Vec<OptedOut>,
    /// Opted-out pods that cannot be: on the host's network (their
    /// sockets are the node's), or without an address yet.
    pub unprogrammable: Vec<(PodRef, &'static str)>,
    /// Objects whose setting is neither `enabled` nor `disabled`: kind,
    /// name, value.
    pub invalid: Vec<(&'static str, String, String)>,
}

impl OptOutView {
    /// Whether `pod` is one of the opted-out pods.
    pub fn opted_out(&self, pod: &PodRef) -> bool {
        self.pods.iter().any(|p| &p.pod == pod)
    }
}

/// Every Pod and Namespace setting the sources reported.
#[derive(Clone, Debug, Default)]
pub struct OptOuts {
    pods: BTreeMap<PodRef, PodFacts>,
    namespaces: BTreeMap<String, Setting>,
    /// Names seen since a relist began, per kind: at its end, the others
    /// are gone.
    relisting_pods: Option<BTreeSet<PodRef>>,
    relisting_namespaces: Option<BTreeSet<String>>,
    /// Whether each kind was listed whole once: before that, what is held
    /// is not what the cluster says (an agent's restart keeps the earlier
    /// one's opt-outs until then).
    listed: (bool, bool),
}

impl OptOuts {
    /// A Pod listed or changed; whether that changes anything.
    pub fn apply_pod(&mut self, facts: PodFacts) -> bool {
        if let Some(seen) = &mut self.relisting_pods {
            seen.insert(facts.pod.clone());
        }
        self.pods.insert(facts.pod.clone(), facts.clone()) != Some(facts)
    }

    pub fn delete_pod(&mut self, pod: &PodRef) -> bool {
        self.pods.remove(pod).is_some()
    }

    /// A Namespace listed or changed.
    pub fn apply_namespace(&mut self, name: String, setting: Setting) -> bool {
        if let Some(seen) = &mut self.relisting_namespaces {
            seen.insert(name.clone());
        }
        self.namespaces.insert(name, setting.clone()) != Some(setting)
    }

    pub fn delete_namespace(&mut self, name: &str) -> bool {
        self.namespaces.remove(name).is_some()
    }

    pub fn relist_pods(&mut self) {
        self.relisting_pods = Some(BTreeSet::new());
    }

    /// The relist of Pods is complete: those it did not name are gone.
    pub fn pods_listed(&mut self) -> bool {
        self.listed.0 = true;
        let seen = self.relisting_pods.take().unwrap_or_default();
        let before = self.pods.len();
        self.pods.retain(|p, _| seen.contains(p));
        before != self.pods.len()
    }

    pub fn relist_namespaces(&mut self) {
        self.relisting_namespaces = Some(BTreeSet::new());
    }

    pub fn namespaces_listed(&mut self) -> bool {
        self.listed.1 = true;
        let seen = self.relisting_namespaces.take().unwrap_or_default();
        let before = self.namespaces.len();
        self.namespaces.retain(|n, _| seen.contains(n));
        before != self.namespaces.len()
    }

    /// Whether Pods and Namespaces were both listed whole.
    pub fn listed(&self) -> bool {
        self.listed == (true, true)
    }

    /// Whether a Namespace opts its pods out: then every Pod of the node
    /// is wanted, not only those labelled.
    pub fn any_namespace_opted_out(&self) -> bool {
        self.namespaces
            .values()
            .any(|s| s.choice() == Some(SockLb::Disabled))
    }

    /// The pods of `node` that opted out (all of them with `hostns_only`),
    /// and what cannot be done; with `addresses`, the others' addresses
    /// too.
    pub fn view(&self, node: &str, hostns_only: bool, addresses: bool) -> OptOutView {
        let mut view = OptOutView::default();
        for (name, setting) in &self.namespaces {
            if let Setting::Invalid(v) = setting {
                view.invalid.push(("Namespace", name.clone(), v.clone()));
            }
        }
        for facts in self.pods.values().filter(|p| p.node_name == node) {
            if let Setting::Invalid(v) = &facts.setting {
                view.invalid.push(("Pod", facts.pod.to_string(), v.clone()));
            }
            let namespace = self
                .namespaces
                .get(&facts.pod.namespace)
                .and_then(Setting::choice);
            let choice = facts.setting.choice().or(namespace);
            let out = hostns_only || choice == Some(SockLb::Disabled);
            if !out {
                if addresses && !facts.host_network && !facts.ips.is_empty() {
                    view.addressed.push(OptedOut {
                        pod: facts.pod.clone(),
                        ips: facts.ips.clone(),
                    });
                }
                continue;
            }
            if facts.host_network {
                // Every pod is, with hostns-only: only those that asked
                // are reported.
                if !hostns_only {
                    view.unprogrammable
                        .push((facts.pod.clone(), "on the host's network"));
                }
            } else if facts.ips.is_empty() {
                view.unprogrammable
                    .push((facts.pod.clone(), "no address yet"));
            } else {
                view.pods.push(OptedOut {
                    pod: facts.pod.clone(),
                    ips: facts.ips.clone(),
                });
            }
        }
        view
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, node: &str, ip: &str, setting: Setting) -> PodFacts {
        PodFacts {
            pod: PodRef {
                namespace: ns.into(),
                name: name.into(),
            },
            node_name: node.into(),
            host_network: false,
            ips: if ip.is_empty() {
                Vec::new()
            } else {
                vec![ip.parse().unwrap()]
            },
            setting,
        }
    }

    fn names(view: &OptOutView) -> Vec<String> {
        view.pods.iter().map(|p| p.pod.to_string()).collect()
    }

    const OFF: Setting = Setting::Set(SockLb::Disabled);
    const ON: Setting = Setting::Set(SockLb::Enabled);

    #[test]
    fn an_annotation_wins_over_a_label_and_anything_else_is_invalid() {
        assert_eq!(Setting::of(None, None), Setting::Unset);
        assert_eq!(Setting::of(Some("disabled"), None), OFF);
        assert_eq!(Setting::of(Some("disabled"), Some("enabled")), ON);
        assert_eq!(Setting::of(None, Some(" disabled ")), OFF);
        assert_eq!(
            Setting::of(Some("off"), None),
            Setting::Invalid("off".into())
        );
    }

    #[test]
    fn a_pods_word_wins_over_its_namespaces_and_only_this_nodes_pods_count() {
        let mut o = OptOuts::default();
        o.apply_namespace("mesh".into(), OFF);
        o.apply_namespace("plain".into(), Setting::Unset);
        o.apply_pod(pod("mesh", "a", "n1", "10.0.0.1", Setting::Unset));
        o.apply_pod(pod("mesh", "b", "n1", "10.0.0.2", ON));
        o.apply_pod(pod("plain", "c", "n1", "10.0.0.3", OFF));
        o.apply_pod(pod("plain", "d", "n1", "10.0.0.4", Setting::Unset));
        o.apply_pod(pod("mesh", "e", "n2", "10.0.1.1", Setting::Unset));
        assert!(o.any_namespace_opted_out());
        assert_eq!(names(&o.view("n1", false, false)), ["mesh/a", "plain/c"]);
        assert_eq!(
            names(&o.view("n1", true, false)),
            ["mesh/a", "mesh/b", "plain/c", "plain/d"],
            "hostns-only: every pod"
        );
        assert_eq!(names(&o.view("n2", false, false)), ["mesh/e"]);
        // Addresses wanted: the pods that keep socket load balancing too.
        let view = o.view("n1", false, true);
        let addressed: Vec<String> = view.addressed.iter().map(|p| p.pod.to_string()).collect();
        assert_eq!(addressed, ["mesh/b", "plain/d"]);
        assert!(o.view("n1", false, false).addressed.is_empty());
    }

    #[test]
    fn host_network_pods_and_pods_without_addresses_are_reported_not_programmed() {
        let mut o = OptOuts::default();
        let mut host = pod("a", "host", "n1", "192.0.2.1", OFF);
        host.host_network = true;
        o.apply_pod(host);
        o.apply_pod(pod("a", "pending", "n1", "", OFF));
        o.apply_pod(pod(
            "a",
            "odd",
            "n1",
            "10.0.0.9",
            Setting::Invalid("no".into()),
        ));
        let view = o.view("n1", false, false);
        assert!(view.pods.is_empty());
        assert_eq!(
            view.unprogrammable,
            [
                (
                    PodRef {
                        namespace: "a".into(),
                        name: "host".into()
                    },
                    "on the host's network"
                ),
                (
                    PodRef {
                        namespace: "a".into(),
                        name: "pending".into()
                    },
                    "no address yet"
                )
            ]
        );
        assert_eq!(view.invalid, [("Pod", "a/odd".into(), "no".into())]);
        // With hostns-only a host-network pod is simply the node's.
        assert_eq!(o.view("n1", true, false).unprogrammable.len(), 1);
    }

    #[test]
    fn a_relist_forgets_what_it_did_not_name_and_changes_are_told() {
        let mut o = OptOuts::default();
        assert!(!o.listed());
        assert!(o.apply_pod(pod("a", "x", "n1", "10.0.0.1", OFF)));
        assert!(!o.apply_pod(pod("a", "x", "n1", "10.0.0.1", OFF)), "same");
        assert!(o.apply_pod(pod("a", "y", "n1", "10.0.0.2", OFF)));
        o.relist_pods();
        o.apply_pod(pod("a", "y", "n1", "10.0.0.2", OFF));
        assert!(o.pods_listed());
        assert_eq!(names(&o.view("n1", false, false)), ["a/y"]);
        o.apply_namespace("mesh".into(), OFF);
        assert!(!o.listed(), "no Namespace list yet");
        o.relist_namespaces();
        assert!(o.namespaces_listed());
        assert!(o.listed());
        assert!(!o.any_namespace_opted_out());
        assert!(o.delete_pod(&PodRef {
            namespace: "a".into(),
            name: "y".into()
        }));
        assert!(o.view("n1", false, false).pods.is_empty());
    }
}
