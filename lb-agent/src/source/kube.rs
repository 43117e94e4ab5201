//! The Kubernetes source: watchers on Services, EndpointSlices, this
//! node's Node, every Node's addresses and pod CIDRs, and what socket load
//! balancing needs of this node's Pods and every Namespace.

use std::{fmt::Debug, path::Path};

use futures::{SinkExt as _, Stream, StreamExt as _, stream::BoxStream};
use std::collections::BTreeSet;

use k8s_openapi::api::{
    core::v1::{Namespace, Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Config, Resource, ResourceExt as _,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::watcher,
};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::apiserver::{ApiserverError, Inputs, Origin};
use super::backoff::with_backoff;
use super::strip::Kept;
use super::{Change, ListKind, NodeFacts, NodeNetworks, pod_facts, sock_lb_setting};
use crate::metrics::RestClientRequests;
use crate::model::sock_lb::{PodRef, SOCKET_LB_KEY, Setting, SockLb};

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
    // Whether pods opted out of socket load balancing
    // (`model::sock_lb`): this node's Pods, every Namespace.
    ApiAccess {
        group: "",
        resource: "pods",
        verbs: &["list", "watch"],
    },
    ApiAccess {
        group: "",
        resource: "namespaces",
        verbs: &["list", "watch"],
    },
];

/// kube-proxy's server-side filter, on both its Service and EndpointSlice
/// informers (`cmd/kube-proxy/app/server.go`): objects handed to another
/// proxy (`service-proxy-name`, which the slice controller copies onto the
/// slices) and slices of headless Services are never sent to us. The model
/// checks the same labels again for the file source.
pub const PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

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
    #[error(transparent)]
    Apiserver(#[from] ApiserverError),
}

/// What the watchers report.
#[derive(Debug)]
pub enum Event {
    Change(Change),
    /// This node's Node was listed or changed: whether it is eligible for
    /// traffic (not being deleted or drained by the autoscaler; feeds
    /// `/healthz`), and what the model reads of it (zone, addresses).
    Node {
        eligible: bool,
        facts: NodeFacts,
    },
    /// This node's Node was deleted.
    NodeDeleted,
    /// The apiserver refused to show this node's Node (why).
    NodeRefused(String),
    /// A change of the list of every Node ([`NodeNetworks`], its relists),
    /// pending only if the model finds that it changes anything (a Node
    /// changes at every heartbeat; its networks seldom).
    Networks(Change),
    /// The apiserver refused to list or watch every Node (why): the agent
    /// goes on without their networks.
    NodesRefused(String),
}

/// A client as kube-proxy builds one: `--kubeconfig` if given, else the
/// in-cluster service account, else the default kubeconfig; `--master`
/// overrides the server address. In a pod without either flag, an empty or
/// unset `KUBERNETES_SERVICE_HOST` is an error ([`ApiserverError`]).
///
/// Every request it makes is counted in `requests`
/// (`rest_client_requests_total`, [`super::requests`]).
pub async fn client(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
    requests: RestClientRequests,
) -> Result<Client, KubeError> {
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
        None => {
            let in_cluster = match Inputs::decide_here(None, master)? {
                Origin::InCluster => Config::incluster().ok(),
                Origin::Kubeconfig | Origin::Master | Origin::Infer => None,
            };
            match (in_cluster, master) {
                (Some(c), _) => c,
                // A bare --master (kube-proxy allows it) needs no kubeconfig.
                (None, Some(url)) => Config::new(parse_url(url)?),
                (None, None) => Config::infer().await?,
            }
        }
    };
    if let Some(url) = master {
        config.cluster_url = parse_url(url)?;
    }
    Ok(super::requests::client(config, requests)?)
}

fn parse_url(url: &str) -> Result<http::Uri, KubeError> {
    url.parse().map_err(|source| KubeError::Master {
        url: url.to_owned(),
        source,
    })
}

/// Watches Services and EndpointSlices cluster-wide, this node's Node,
/// and every Node (their networks: [`node_networks`]), with
/// kube-runtime's default backoff, except that a watch the apiserver
/// expires relists at once (`backoff.rs`). After every complete (re)list a kind's whole
/// list is reported, so objects deleted while the watch was down disappear
/// too.
pub fn watch(client: Client, node_name: &str, all_pods: bool) -> BoxStream<'static, Event> {
    let filtered = || watcher::Config::default().labels(PROXY_LABEL_SELECTOR);
    let services = kind_stream(
        Api::<Kept<Service>>::all(client.clone()),
        filtered(),
        |s| Change::Service(Box::new(s)),
        |s| Change::ServiceDeleted {
            namespace: s.namespace().unwrap_or_default(),
            name: s.name_any(),
        },
        ListKind::Services,
    );
    let slices = kind_stream(
        Api::<Kept<EndpointSlice>>::all(client.clone()),
        filtered(),
        |s| Change::Slice(Box::new(s)),
        |s| Change::SliceDeleted {
            namespace: s.namespace().unwrap_or_default(),
            name: s.name_any(),
        },
        ListKind::Slices,
    );
    let networks = node_networks(Api::<Kept<Node>>::all(client.clone()));
    let (opted_out, opted_out_namespaces) = tokio::sync::watch::channel(false);
    let namespaces = namespaces(Api::<Namespace>::all(client.clone()), opted_out);
    let pods = node_pods(
        Api::<Pod>::all(client.clone()),
        node_name.to_owned(),
        all_pods,
        opted_out_namespaces,
    );
    let node = with_backoff(watcher(
        Api::<Node>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={node_name}")),
    ))
    .filter_map(|ev| async move {
        match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => Some(Event::Node {
                eligible: node_eligible(&n),
                facts: NodeFacts::of(&n),
            }),
            Ok(watcher::Event::Delete(_)) => Some(Event::NodeDeleted),
            Ok(_) => None,
            Err(e) => {
                warn!("watching Node: {e}; retrying with backoff");
                refused(&e).map(|code| Event::NodeRefused(format!("HTTP {code}: {e}")))
            }
        }
    });
    futures::stream::select_all([
        services.boxed(),
        slices.boxed(),
        node.boxed(),
        networks.boxed(),
        namespaces.boxed(),
        pods.boxed(),
    ])
    .boxed()
}

/// Every Namespace's socket load balancing word, streamed as the other
/// kinds are; `opted_out` says whether one opts its pods out (then every
/// Pod of this node is watched, not only the labelled ones). A deletion
/// missed while the watch was down leaves it set: more Pods are watched
/// than needed, none fewer.
fn namespaces(
    api: Api<Namespace>,
    opted_out: tokio::sync::watch::Sender<bool>,
) -> impl Stream<Item = Event> + Send {
    let mut out = BTreeSet::new();
    with_backoff(watcher(api, watcher::Config::default())).filter_map(move |ev| {
        let change = match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                let name = n.name_any();
                let setting = sock_lb_setting(&n.metadata);
                if setting == Setting::Set(SockLb::Disabled) {
                    out.insert(name.clone());
                } else {
                    out.remove(&name);
                }
                Some(Change::Namespace { name, setting })
            }
            Ok(watcher::Event::Delete(n)) => {
                out.remove(&n.name_any());
                Some(Change::NamespaceDeleted(n.name_any()))
            }
            Ok(watcher::Event::Init) => Some(Change::Relist(ListKind::Namespaces)),
            Ok(watcher::Event::InitDone) => Some(Change::Listed(ListKind::Namespaces)),
            Err(e) => {
                warn!("watching Namespaces: {e}; keeping the last state, retrying with backoff");
                None
            }
        };
        opted_out.send_if_modified(|was| {
            let now = !out.is_empty();
            std::mem::replace(was, now) != now
        });
        futures::future::ready(change.map(Event::Change))
    })
}

/// This node's Pods (field selector on `spec.nodeName`): only those
/// labelled [`SOCKET_LB_KEY`] while no Namespace opts out (`all`) and
/// `all_pods` is off (`--bpf-lb-sock-hostns-only`,
/// `--bpf-lb-source-range-all-types`), else all of them. When that
/// changes the watch starts again with the other selector, and its relist
/// replaces what the model held.
fn node_pods(
    api: Api<Pod>,
    node_name: String,
    all_pods: bool,
    mut all: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Event> + Send {
    let (mut tx, rx) = futures::channel::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let every = all_pods || *all.borrow_and_update();
            let mut config =
                watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
            if !every {
                config = config.labels(SOCKET_LB_KEY);
            }
            let mut pods = with_backoff(watcher(api.clone(), config)).boxed();
            loop {
                tokio::select! {
                    ev = pods.next() => {
                        let Some(ev) = ev else { break };
                        let change = match ev {
                            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                                Change::Pod(pod_facts(&p))
                            }
                            Ok(watcher::Event::Delete(p)) => Change::PodDeleted(PodRef {
                                namespace: p.namespace().unwrap_or_default(),
                                name: p.name_any(),
                            }),
                            Ok(watcher::Event::Init) => Change::Relist(ListKind::Pods),
                            Ok(watcher::Event::InitDone) => Change::Listed(ListKind::Pods),
                            Err(e) => {
                                warn!("watching this node's Pods: {e}; keeping the last state, \
                                       retrying with backoff");
                                continue;
                            }
                        };
                        if tx.send(Event::Change(change)).await.is_err() {
                            return;
                        }
                    }
                    changed = all.changed(), if !all_pods => {
                        if changed.is_err() {
                            return;
                        }
                        if *all.borrow() != every {
                            info!(all = !every, "a Namespace's opt-out changed which Pods are watched");
                            break;
                        }
                    }
                }
            }
        }
    });
    rx
}

/// Every Node's networks, parsed with only their names, addresses and pod
/// CIDRs ([`Kept`]), streamed as the other kinds are. A watch beside the
/// one on this node's Node, whose full object (labels, taints, deletion)
/// only this node's needs. Refused (401, 403: a ClusterRole without it),
/// it reports so and retries with backoff; nothing waits for it.
fn node_networks(api: Api<Kept<Node>>) -> impl Stream<Item = Event> + Send {
    with_backoff(watcher(api, watcher::Config::default())).filter_map(|ev| {
        let event = match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => Some(Event::Networks(
                Change::NodeNetworks(NodeNetworks::of(&n.0)),
            )),
            Ok(watcher::Event::Delete(n)) => {
                Some(Event::Networks(Change::NodeNetworksDeleted(n.name_any())))
            }
            Ok(watcher::Event::Init) => Some(Event::Networks(Change::Relist(ListKind::Nodes))),
            Ok(watcher::Event::InitDone) => Some(Event::Networks(Change::Listed(ListKind::Nodes))),
            Err(e) => match refused(&e) {
                Some(code) => Some(Event::NodesRefused(format!("HTTP {code}: {e}"))),
                None => {
                    warn!(
                        "watching every Node: {e}; keeping the last state, retrying with backoff"
                    );
                    None
                }
            },
        };
        futures::future::ready(event)
    })
}

/// One kind's watcher, of objects parsed with only the fields the model
/// reads ([`Kept`]).
///
/// No reflector: the model keeps the few fields it uses of every object, so
/// a store of full objects would only double the memory (about 60 MB at
/// 10,000 Services). A (re)list is streamed: each item goes to the model as
/// it is read, between `Relist` and `Listed`, so that the list is never
/// held whole (that doubled the agent's peak memory at 100,000 Services).
fn kind_stream<K>(
    api: Api<Kept<K>>,
    config: watcher::Config,
    applied: impl Fn(K) -> Change + Send + 'static,
    deleted: impl Fn(&Kept<K>) -> Change + Send + 'static,
    list: ListKind,
) -> impl Stream<Item = Event> + Send
where
    Kept<K>: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K: Send + 'static,
{
    let kind = Kept::<K>::kind(&());
    with_backoff(watcher(api, config)).filter_map(move |ev| {
        let change = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => Some(applied(o.0)),
            Ok(watcher::Event::Delete(o)) => Some(deleted(&o)),
            Ok(watcher::Event::Init) => Some(Change::Relist(list)),
            Ok(watcher::Event::InitDone) => Some(Change::Listed(list)),
            Err(e) => {
                warn!("watching {kind}: {e}; keeping the last state, retrying with backoff");
                None
            }
        };
        futures::future::ready(change.map(Event::Change))
    })
}

fn refused(e: &watcher::Error) -> Option<u16> {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s))
        | watcher::Error::WatchError(s) => s,
        _ => return None,
    };
    matches!(status.code, 401 | 403).then_some(status.code)
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
    use kube::core::Status;

    use super::{PROXY_LABEL_SELECTOR, refused, watcher};
    use crate::model::{HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL};

    #[test]
    fn only_401_and_403_say_the_node_cannot_be_read() {
        let api =
            |code| kube::Error::Api(Status::failure("no", "Forbidden").with_code(code).boxed());
        let list = |code| watcher::Error::InitialListFailed(api(code));
        assert_eq!(refused(&list(403)), Some(403));
        assert_eq!(refused(&list(401)), Some(401));
        assert_eq!(
            refused(&watcher::Error::WatchStartFailed(api(403))),
            Some(403)
        );
        assert_eq!(refused(&list(500)), None, "may pass");
        assert_eq!(refused(&list(404)), None);
        assert_eq!(
            refused(&watcher::Error::WatchError(
                Status::failure("gone", "Expired").with_code(410).boxed()
            )),
            None
        );
        assert_eq!(refused(&watcher::Error::NoResourceVersion), None);
    }

    #[test]
    fn the_selector_excludes_the_labels_the_model_refuses() {
        assert_eq!(
            PROXY_LABEL_SELECTOR,
            format!("!{SERVICE_PROXY_NAME_LABEL},!{HEADLESS_LABEL}")
        );
    }
}
