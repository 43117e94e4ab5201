//! The Kubernetes source: watchers with reflectors on Services,
//! EndpointSlices and this node's Node.

use std::{fmt::Debug, path::Path};

use futures::{Stream, StreamExt as _, stream::BoxStream};
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Config, Resource, ResourceExt as _,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{WatchStreamExt as _, watcher},
};
use serde::de::DeserializeOwned;
use tracing::warn;

use crate::{
    model::{HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL},
    source::Change,
    syncer::TRIGGER_TIME_ANNOTATION,
};

/// One kind of apiserver request the agent makes: API group, resource, verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiAccess {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

/// Every request this source makes. The ClusterRole in `manifests/` must
/// grant these (a test checks it), and the stand-in apiserver tests check
/// that the agent makes no other.
pub const API_ACCESS: &[ApiAccess] = &[
    ApiAccess {
        group: "",
        resource: "services",
        verbs: &["list", "watch"],
    },
    ApiAccess {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        verbs: &["list", "watch"],
    },
    ApiAccess {
        group: "",
        resource: "nodes",
        verbs: &["list", "watch"],
    },
];

/// The taint the cluster autoscaler puts on a node it is about to remove.
const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: std::path::PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("no in-cluster config and no usable kubeconfig: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("invalid --master {url:?}: {source}")]
    Master {
        url: String,
        source: http::uri::InvalidUri,
    },
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// What the watchers report.
#[derive(Debug)]
pub enum Event {
    Change(Change),
    /// This node's eligibility for traffic changed (it is being deleted or
    /// drained by the autoscaler); feeds `/healthz`.
    NodeEligible(bool),
}

/// A client as kube-proxy builds one: `--kubeconfig` if given, else the
/// in-cluster service account, else the default kubeconfig; `--master`
/// overrides the server address.
pub async fn client(kubeconfig: Option<&Path>, master: Option<&str>) -> Result<Client, KubeError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| KubeError::Kubeconfig {
                path: path.to_owned(),
                source,
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeError::Kubeconfig {
                    path: path.to_owned(),
                    source,
                })?
        }
        None => match (Config::incluster(), master) {
            (Ok(c), _) => c,
            // A bare --master (kube-proxy allows it) needs no kubeconfig.
            (Err(_), Some(url)) => Config::new(parse_url(url)?),
            (Err(_), None) => Config::infer().await?,
        },
    };
    if let Some(url) = master {
        config.cluster_url = parse_url(url)?;
    }
    Ok(Client::try_from(config)?)
}

fn parse_url(url: &str) -> Result<http::Uri, KubeError> {
    url.parse().map_err(|source| KubeError::Master {
        url: url.to_owned(),
        source,
    })
}

/// Watches Services and EndpointSlices cluster-wide and this node's Node,
/// with the default backoff. After every complete (re)list a kind's whole
/// list is reported, so objects deleted while the watch was down disappear
/// too.
pub fn watch(client: Client, node_name: &str) -> BoxStream<'static, Event> {
    // kube-proxy's filter, applied by the apiserver to both kinds: Services
    // handed to another proxy, and headless ones, are never sent.
    let selector = proxy_selector();
    let services = kind_stream(
        Api::<Service>::all(client.clone()),
        watcher::Config::default().labels(&selector),
        strip_service,
        |s| Change::Service(Box::new(s)),
        |s| Change::ServiceDeleted {
            namespace: s.namespace().unwrap_or_default(),
            name: s.name_any(),
        },
        Change::AllServices,
    );
    let slices = kind_stream(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default().labels(&selector),
        strip_slice,
        |s| Change::Slice(Box::new(s)),
        |s| Change::SliceDeleted {
            namespace: s.namespace().unwrap_or_default(),
            name: s.name_any(),
        },
        Change::AllSlices,
    );
    let node = watcher(
        Api::<Node>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={node_name}")),
    )
    .default_backoff()
    .filter_map(|ev| async move {
        match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                Some(Event::NodeEligible(node_eligible(&n)))
            }
            Ok(watcher::Event::Delete(_)) => Some(Event::NodeEligible(false)),
            Ok(_) => None,
            Err(e) => {
                warn!("watching Node: {e}; retrying with backoff");
                None
            }
        }
    });
    futures::stream::select_all([services.boxed(), slices.boxed(), node.boxed()]).boxed()
}

/// kube-proxy's label selector for Services and EndpointSlices.
pub fn proxy_selector() -> String {
    format!("!{SERVICE_PROXY_NAME_LABEL},!{HEADLESS_LABEL}")
}

/// Drops what the model never reads from every object's metadata, before
/// a (re)list is collected: managed fields, owner references, and every
/// annotation but the trigger time.
fn strip_meta(m: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    m.managed_fields = None;
    m.owner_references = None;
    m.finalizers = None;
    if let Some(a) = &mut m.annotations {
        a.retain(|k, _| k == TRIGGER_TIME_ANNOTATION);
        if a.is_empty() {
            m.annotations = None;
        }
    }
}

/// Keeps what the model reads of a Service: metadata, the spec but its
/// selector, and the load-balancer ingress.
pub fn strip_service(s: &mut Service) {
    strip_meta(&mut s.metadata);
    if let Some(spec) = &mut s.spec {
        spec.selector = None;
    }
    if let Some(status) = &mut s.status {
        status.conditions = None;
    }
}

/// Keeps what the model reads of an EndpointSlice: addresses, conditions,
/// node, zone and hints of each endpoint.
pub fn strip_slice(s: &mut EndpointSlice) {
    strip_meta(&mut s.metadata);
    for ep in s.endpoints.iter_mut().flatten() {
        ep.target_ref = None;
        ep.hostname = None;
        ep.deprecated_topology = None;
    }
}

/// One kind's watcher, with what the model never reads stripped from each
/// object as it arrives.
///
/// No reflector: the model keeps the few fields it uses of every object, so
/// a store of full objects would only double the memory (about 60 MB at
/// 10,000 Services). A (re)list is collected here and handed over whole
/// once complete, as a reflector would swap its store.
fn kind_stream<K>(
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    applied: impl Fn(K) -> Change + Send + 'static,
    deleted: impl Fn(&K) -> Change + Send + 'static,
    all: impl Fn(Vec<K>) -> Change + Send + 'static,
) -> impl Stream<Item = Event> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let kind = K::kind(&());
    let mut listing = Vec::new();
    watcher(api, config)
        .default_backoff()
        .modify(strip)
        .filter_map(move |ev| {
            let change = match ev {
                Ok(watcher::Event::Apply(o)) => Some(applied(o)),
                Ok(watcher::Event::Delete(o)) => Some(deleted(&o)),
                // A (re)list starts over, also after one that broke off.
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    None
                }
                Ok(watcher::Event::InitApply(o)) => {
                    listing.push(o);
                    None
                }
                Ok(watcher::Event::InitDone) => Some(all(std::mem::take(&mut listing))),
                Err(e) => {
                    warn!("watching {kind}: {e}; keeping the last state, retrying with backoff");
                    None
                }
            };
            futures::future::ready(change.map(Event::Change))
        })
}

fn node_eligible(node: &Node) -> bool {
    let deleting = node.metadata.deletion_timestamp.is_some();
    let draining = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT));
    !deleting && !draining
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripping_keeps_what_the_model_reads() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "1"}]},
            "spec": {"clusterIP": "10.96.0.1", "selector": {"app": "web"},
                "sessionAffinity": "ClientIP", "externalIPs": ["192.0.2.1"],
                "ports": [{"name": "http", "port": 80, "nodePort": 30080}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.1"}]}}
        }))
        .unwrap();
        let mut stripped = svc.clone();
        strip_service(&mut stripped);
        let m = &stripped.metadata;
        assert!(
            m.managed_fields.is_none() && m.owner_references.is_none() && m.annotations.is_none()
        );
        assert_eq!(m.labels, svc.metadata.labels);
        let (spec, orig) = (stripped.spec.as_ref().unwrap(), svc.spec.as_ref().unwrap());
        assert!(spec.selector.is_none());
        assert_eq!(
            (
                &spec.cluster_ip,
                &spec.ports,
                &spec.session_affinity,
                &spec.external_ips
            ),
            (
                &orig.cluster_ip,
                &orig.ports,
                &orig.session_affinity,
                &orig.external_ips
            )
        );
        assert_eq!(
            stripped.status.unwrap().load_balancer,
            svc.status.unwrap().load_balancer
        );

        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "web"},
                "annotations": {TRIGGER_TIME_ANNOTATION: "2026-01-01T00:00:00Z", "other": "x"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [{"addresses": ["10.0.0.1"], "hostname": "h", "nodeName": "n1", "zone": "z",
                "targetRef": {"kind": "Pod", "name": "p"},
                "conditions": {"ready": true}, "hints": {"forZones": [{"name": "z"}]}}]
        }))
        .unwrap();
        let mut s = slice.clone();
        strip_slice(&mut s);
        let ep = &s.endpoints.as_ref().unwrap()[0];
        let orig = &slice.endpoints.as_ref().unwrap()[0];
        assert!(ep.target_ref.is_none() && ep.hostname.is_none());
        assert_eq!(
            (
                &ep.addresses,
                &ep.node_name,
                &ep.zone,
                &ep.conditions,
                &ep.hints
            ),
            (
                &orig.addresses,
                &orig.node_name,
                &orig.zone,
                &orig.conditions,
                &orig.hints
            )
        );
        let annotations = s.metadata.annotations.unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            [TRIGGER_TIME_ANNOTATION]
        );
    }
}
