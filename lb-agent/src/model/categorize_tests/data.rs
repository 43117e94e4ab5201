//! The cases of [`super::Case`] tables as data: one txtar archive per
//! table, one file per case, named by the case. Each file is YAML:
//!
//! ```yaml
//! zone: zone-a                 # this node's zone label, if any
//! service: node-port itp=Local # cluster-ip | node-port | load-balancer, then
//!                              # itp= etp= affinity= timeout= (spec fields)
//! slices:                      # one list of endpoints per slice
//! - - ready 10.70.1.3 on=node-here zones=zone-a
//!   - serving-terminating 10.70.1.4+10.70.1.9 nodes=node-far
//! want: local 10.70.1.3        # cluster IP... | local IP... | no-local
//!                              # | refused [local]
//! affinity: 10800              # the expected ClientIP timeout, if any
//! outside: cluster 10.70.1.3   # what the LB VIP gets from outside, if not
//!                              # what it gets inside
//! ```
//!
//! An endpoint is its conditions (`ready`, `unready`, `serving` (not ready,
//! not terminating), `serving-terminating`, `terminating`), its addresses
//! (`+`-joined), then `on=NODE`, `zones=A,B` and `nodes=X,Y` hints.

use lb_fixtures::{Ep, Svc, txtar};
use serde::Deserialize;

use super::{
    Case, Want, ready, serving_terminating, svc, svc_lb, svc_node_port, terminating, unready,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseData {
    zone: Option<String>,
    service: String,
    #[serde(default)]
    slices: Vec<Vec<String>>,
    want: String,
    affinity: Option<u32>,
    outside: Option<String>,
}

/// Every case of an archive, in order.
pub(super) fn cases(archive: &str) -> Vec<Case> {
    txtar::parse(archive)
        .files
        .into_iter()
        .map(|f| {
            let data: CaseData =
                yaml_serde::from_str(&f.data).unwrap_or_else(|e| panic!("case {:?}: {e}", f.name));
            Case {
                zone: data.zone,
                svc: service(&data.service),
                slices: data
                    .slices
                    .iter()
                    .map(|s| s.iter().map(|e| endpoint(e)).collect())
                    .collect(),
                want: want(&data.want),
                affinity: data.affinity,
                outside: data.outside.as_deref().map(want),
                name: f.name,
            }
        })
        .collect()
}

/// `key=value` words, after the first.
fn fields(words: std::str::SplitWhitespace<'_>) -> impl Iterator<Item = (&str, &str)> {
    words.map(|w| {
        w.split_once('=')
            .unwrap_or_else(|| panic!("{w:?} is not key=value"))
    })
}

pub(super) fn service(text: &str) -> Svc {
    let mut words = text.split_whitespace();
    let mut s = match words.next() {
        Some("cluster-ip") => svc(),
        Some("node-port") => svc_node_port(),
        Some("load-balancer") => svc_lb(),
        other => panic!("no service kind {other:?}"),
    };
    for (key, value) in fields(words) {
        s = match key {
            "itp" => s.internal_traffic_policy(value),
            "etp" => s.external_traffic_policy(value),
            "affinity" => s.session_affinity(value),
            "timeout" => s.client_ip_affinity(Some(value.parse().expect("a timeout"))),
            _ => panic!("no service field {key:?}"),
        };
    }
    s
}

pub(super) fn endpoint(text: &str) -> Ep {
    let mut words = text.split_whitespace();
    let kind = words.next().expect("conditions");
    let addresses = words.next().expect("addresses");
    let mut addresses = addresses.split('+');
    let first = addresses.next().expect("an address");
    let mut ep = match kind {
        "ready" => ready(first),
        "unready" => unready(first),
        "serving" => Ep::new(first).ready(false).serving(true).terminating(false),
        "serving-terminating" => serving_terminating(first),
        "terminating" => terminating(first),
        _ => panic!("no conditions {kind:?}"),
    };
    ep = addresses.fold(ep, Ep::address);
    for (key, value) in fields(words) {
        let list = value.split(',');
        ep = match key {
            "on" => ep.node(value),
            "zones" => list.fold(ep, Ep::hint_zone),
            "nodes" => list.fold(ep, Ep::hint_node),
            _ => panic!("no endpoint field {key:?}"),
        };
    }
    ep
}

pub(super) fn want(text: &str) -> Want {
    let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
    match words.split_first().map(|(k, rest)| (k.as_str(), rest)) {
        Some(("cluster", ips)) => Want::Cluster(ips.to_vec()),
        Some(("local", ips)) => Want::Local(ips.to_vec()),
        Some(("no-local", [])) => Want::NoLocal,
        Some(("refused", [])) => Want::Refused { local: false },
        Some(("refused", [l])) if l == "local" => Want::Refused { local: true },
        _ => panic!("no want {text:?}"),
    }
}
