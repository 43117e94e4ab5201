//! The stand-in apiserver against the real kube-rs client and runtime:
//! list+watch, relist after compaction, recovery from an outage, field
//! selectors, pagination and error statuses. No root needed.

use std::{
    fmt::Debug,
    hash::Hash,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Config, Resource, ResourceExt,
    api::{ListParams, WatchEvent, WatchParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{
        WatchStreamExt,
        reflector::{self, Store},
        watcher,
    },
};
use lb_fixtures::{Slice, Svc, SvcPort, json};
use lb_tests::apiserver::{ApiServer, Verb};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::time::{Instant, sleep, timeout};

/// A Service on 10.96.0.10, with an `app` label if `app` is not empty.
fn service(ns: &str, name: &str, port: i32, app: &str) -> Value {
    let svc = Svc::new(ns, name)
        .type_("ClusterIP")
        .cluster_ip("10.96.0.10")
        .with_port(SvcPort::new("http", port, "TCP").target_port(8080));
    json(if app.is_empty() {
        svc
    } else {
        svc.label("app", app)
    })
}

fn slice(ns: &str, name: &str, svc: &str, ip: &str) -> Value {
    json(
        Slice::new(ns, name)
            .service(svc)
            .port("http", 8080, "TCP")
            .ready(&[ip]),
    )
}

fn node(name: &str, zone: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
    })
}

/// A kube client built the way the agent builds one: from a kubeconfig.
async fn client(server: &ApiServer) -> Client {
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", lb_tests::unique("api")));
    server.write_kubeconfig(&path).expect("write kubeconfig");
    let kubeconfig = Kubeconfig::read_from(&path).expect("read kubeconfig");
    let _ = std::fs::remove_file(&path);
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    assert_eq!(config.cluster_url.to_string(), format!("{}/", server.url()));
    Client::try_from(config).expect("kube client")
}

/// What a watcher stream yielded, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String),
    Delete(String),
    /// The `code` and `reason` of the Status the apiserver answered with,
    /// if the error carried one.
    Error(Option<(u16, String)>),
}

/// What a watcher error says, as data: the apiserver's Status, if any.
fn status_of(e: &watcher::Error) -> Option<(u16, String)> {
    let status = match e {
        watcher::Error::WatchError(s) => s.as_ref(),
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.as_ref(),
        _ => return None,
    };
    Some((status.code, status.reason.clone()))
}

/// A running `reflector(watcher(..)).default_backoff()`, as the agent runs
/// it, with everything it yielded recorded.
struct Watch<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K: Resource + 'static> Drop for Watch<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    fn start(api: Api<K>, config: watcher::Config) -> Self {
        let (store, writer) = reflector::store();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let mut events = reflector::reflector(writer, watcher(api, config))
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let entry = match event {
                    Ok(watcher::Event::Init) => Seen::Init,
                    Ok(watcher::Event::InitApply(o)) => Seen::InitApply(o.name_any()),
                    Ok(watcher::Event::InitDone) => Seen::InitDone,
                    Ok(watcher::Event::Apply(o)) => Seen::Apply(o.name_any()),
                    Ok(watcher::Event::Delete(o)) => Seen::Delete(o.name_any()),
                    Err(e) => Seen::Error(status_of(&e)),
                };
                log.lock().expect("log").push(entry);
            }
        });
        Self { store, seen, task }
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.store.state().iter().map(|o| o.name_any()).collect();
        names.sort();
        names
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }
}

/// Polls `ok` every 20 ms until it holds, failing the test after `limit`.
async fn eventually(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

const WAIT: Duration = Duration::from_secs(10);

fn rv_of(obj: &Value) -> Option<&str> {
    obj["metadata"]["resourceVersion"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_sees_creates_updates_and_deletes() {
    let server = ApiServer::start().expect("start");
    server
        .apply(service("default", "a", 80, ""))
        .expect("apply a");
    let client = client(&server).await;

    let services = Watch::start(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
    );
    let slices = Watch::start(
        Api::<EndpointSlice>::all(client),
        watcher::Config::default(),
    );
    eventually("initial list of a", WAIT, || services.names() == ["a"]).await;

    server
        .apply(service("default", "b", 80, ""))
        .expect("apply b");
    server
        .apply(service("other", "a", 81, ""))
        .expect("apply other/a");
    server
        .apply(service("default", "a", 90, ""))
        .expect("update a");
    server
        .apply(slice("default", "a-1", "a", "10.0.1.1"))
        .expect("apply slice");
    let port_of_a = || {
        services
            .store
            .state()
            .iter()
            .find(|s| s.namespace().as_deref() == Some("default") && s.name_any() == "a")
            .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port))
    };
    eventually("update of a", WAIT, || port_of_a() == Some(90)).await;
    assert_eq!(services.names(), ["a", "a", "b"]);

    server
        .delete("Service", Some("default"), "b")
        .expect("delete b");
    eventually("delete of b", WAIT, || services.names() == ["a", "a"]).await;
    eventually("slice a-1", WAIT, || slices.names() == ["a-1"]).await;

    // Everything arrived over the one watch, in order, after one list.
    assert_eq!(
        services.seen(),
        [
            Seen::Init,
            Seen::InitApply("a".into()),
            Seen::InitDone,
            Seen::Apply("b".into()),
            Seen::Apply("a".into()),
            Seen::Apply("a".into()),
            Seen::Delete("b".into()),
        ]
    );
    assert_eq!(server.request_count("services", Verb::List), 1);
    assert_eq!(server.request_count("services", Verb::Watch), 1);
    assert_eq!(server.request_count("endpointslices", Verb::List), 1);

    // Every cached object carries the server's resourceVersion and uid.
    for svc in services.store.state() {
        let stored = server.get("Service", svc.namespace().as_deref(), &svc.name_any());
        let stored = stored.expect("stored service");
        assert_eq!(svc.resource_version().as_deref(), rv_of(&stored));
        assert!(
            svc.uid().is_some_and(|u| !u.is_empty()),
            "uid on {}",
            svc.name_any()
        );
        assert!(svc.creation_timestamp().is_some());
    }
    let cached = &slices.store.state()[0];
    let endpoints = cached.endpoints.as_deref().unwrap_or_default();
    assert_eq!(endpoints[0].addresses, ["10.0.1.1"]);
    let stored = server
        .get("EndpointSlice", Some("default"), "a-1")
        .expect("stored slice");
    assert_eq!(cached.resource_version().as_deref(), rv_of(&stored));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_forces_a_relist_that_drops_unseen_deletes() {
    let server = ApiServer::start().expect("start");
    server
        .apply(service("default", "a", 80, ""))
        .expect("apply a");
    server
        .apply(service("default", "b", 80, ""))
        .expect("apply b");
    let old_rv = server.resource_version();
    let client = client(&server).await;
    let services = Watch::start(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
    );
    eventually("initial list", WAIT, || services.names() == ["a", "b"]).await;
    eventually("watch open", WAIT, || server.open_watches("services") == 1).await;

    // Changes the watcher cannot have seen, then the history is gone.
    server.pause_watches();
    server
        .delete("Service", Some("default"), "a")
        .expect("delete a");
    server
        .apply(service("default", "c", 80, ""))
        .expect("apply c");
    server.compact();
    server.close_watches();
    server.resume_watches();

    eventually("relisted store", WAIT, || services.names() == ["b", "c"]).await;
    let seen = services.seen();
    let inits = seen.iter().filter(|s| **s == Seen::Init).count();
    assert_eq!(inits, 2, "one relist expected: {seen:?}");
    assert!(
        seen.iter()
            .any(|s| *s == Seen::Error(Some((410, "Expired".to_owned())))),
        "no 410 Expired seen: {seen:?}"
    );
    assert!(
        !seen.contains(&Seen::Delete("a".into())),
        "a's delete was hidden: {seen:?}"
    );
    assert_eq!(server.request_count("services", Verb::List), 2);

    // A plain watch from before the compaction: HTTP 200, then an ERROR event.
    let api = Api::<Service>::all(client);
    let mut stream = api
        .watch(&WatchParams::default(), &old_rv.to_string())
        .await
        .expect("watch starts")
        .boxed();
    let first = timeout(WAIT, stream.next()).await.expect("event in time");
    match first {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(
        timeout(WAIT, stream.next())
            .await
            .expect("end in time")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_recovers_from_an_outage_on_the_same_port() {
    let server = ApiServer::start().expect("start");
    let url = server.url();
    server
        .apply(service("default", "a", 80, ""))
        .expect("apply a");
    let client = client(&server).await;
    let services = Watch::start(Api::<Service>::all(client), watcher::Config::default());
    eventually("initial list", WAIT, || services.names() == ["a"]).await;
    eventually("watch open", WAIT, || server.open_watches("services") == 1).await;
    // Leaves an idle keep-alive connection in the pool of a client of its own
    // (the watcher would take one from a shared pool to re-watch).
    let api = Api::<Service>::namespaced(self::client(&server).await, "default");
    api.get("a").await.expect("get before the outage");

    server.stop();
    let addr = url.trim_start_matches("http://");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "listener still open after stop"
    );
    assert!(
        api.get("a").await.is_err(),
        "a pooled connection still answers after stop"
    );
    eventually("watch cut", WAIT, || server.open_watches("services") == 0).await;
    server
        .delete("Service", Some("default"), "a")
        .expect("delete while down");
    server
        .apply(service("default", "b", 80, ""))
        .expect("apply while down");
    // Long enough for the watcher to fail at least once against the closed port.
    sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        services.names(),
        ["a"],
        "store changed while the server was down"
    );

    server.restart().expect("restart");
    assert_eq!(server.url(), url);
    eventually("store after restart", Duration::from_secs(15), || {
        services.names() == ["b"]
    })
    .await;
    // The history was kept, so the watcher resumed without relisting.
    assert_eq!(server.request_count("services", Verb::List), 1);
    let seen = services.seen();
    assert!(
        seen.ends_with(&[Seen::Delete("a".into()), Seen::Apply("b".into())]),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_watch_with_field_selector_sees_only_its_node() {
    let server = ApiServer::start().expect("start");
    server.apply(node("node-1", "z1")).expect("node-1");
    server.apply(node("node-2", "z1")).expect("node-2");
    let client = client(&server).await;
    let config = watcher::Config::default().fields("metadata.name=node-1");
    let nodes = Watch::start(Api::<Node>::all(client.clone()), config);
    eventually("node-1", WAIT, || nodes.names() == ["node-1"]).await;

    // node-2's changes come first in rv order, so a leak would show first.
    server.apply(node("node-2", "z2")).expect("update node-2");
    server.apply(node("node-3", "z2")).expect("node-3");
    server
        .delete("Node", None, "node-2")
        .expect("delete node-2");
    server.apply(node("node-1", "z2")).expect("update node-1");
    let zone = || {
        nodes
            .store
            .state()
            .first()
            .and_then(|n| n.labels().get("topology.kubernetes.io/zone").cloned())
    };
    eventually("node-1 update", WAIT, || zone().as_deref() == Some("z2")).await;
    assert_eq!(nodes.names(), ["node-1"]);
    assert_eq!(
        nodes.seen(),
        [
            Seen::Init,
            Seen::InitApply("node-1".into()),
            Seen::InitDone,
            Seen::Apply("node-1".into()),
        ]
    );

    let listed = Api::<Node>::all(client)
        .list(&ListParams::default().fields("metadata.name=node-3"))
        .await
        .expect("list");
    let names: Vec<String> = listed.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["node-3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_paginate_filter_and_report_errors() {
    let server = ApiServer::start().expect("start");
    for (ns, name, app) in [
        ("x", "s1", "web"),
        ("x", "s2", "db"),
        ("x", "s3", "web"),
        ("y", "s4", "web"),
    ] {
        server.apply(service(ns, name, 80, app)).expect("apply");
    }
    let client = client(&server).await;
    let in_x = Api::<Service>::namespaced(client.clone(), "x");

    // Pages of one, all at the first page's resourceVersion.
    let mut names = Vec::new();
    let mut params = ListParams::default().limit(1);
    let mut rvs = Vec::new();
    let mut first_token = None;
    loop {
        let page = in_x.list(&params).await.expect("page");
        assert_eq!(page.items.len(), 1);
        names.extend(page.items.iter().map(ResourceExt::name_any));
        rvs.push(page.metadata.resource_version.clone().expect("list rv"));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => {
                first_token.get_or_insert(token.clone());
                params = params.continue_token(&token);
            }
            _ => break,
        }
    }
    assert_eq!(names, ["s1", "s2", "s3"]);
    assert!(
        rvs.iter()
            .all(|rv| *rv == server.resource_version().to_string()),
        "{rvs:?}"
    );

    let web = Api::<Service>::all(client.clone())
        .list(&ListParams::default().labels("app=web,app notin (db)"))
        .await
        .expect("label list");
    let mut web: Vec<String> = web.items.iter().map(ResourceExt::name_any).collect();
    web.sort();
    assert_eq!(web, ["s1", "s3", "s4"]);

    match in_x.get("missing").await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.reason, "NotFound");
        }
        other => panic!("expected 404, got {other:?}"),
    }
    let got = in_x.get("s2").await.expect("get s2");
    assert_eq!(got.labels().get("app").map(String::as_str), Some("db"));

    // An expired continue token is HTTP 410 on the list.
    server.apply(service("x", "s5", 80, "")).expect("apply s5");
    server.compact();
    let token = first_token.expect("paginated");
    match in_x
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }

    // Bookmarks at the current rv, and timeoutSeconds ends the stream cleanly.
    server.set_bookmark_interval(Duration::from_millis(100));
    let rv = server.resource_version().to_string();
    let started = Instant::now();
    let events: Vec<_> = timeout(
        WAIT,
        in_x.watch(&WatchParams::default().timeout(1), &rv)
            .await
            .expect("watch")
            .collect(),
    )
    .await
    .expect("watch ends by timeoutSeconds");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let bookmarks: Vec<String> = events
        .iter()
        .map(|e| match e {
            Ok(WatchEvent::Bookmark(b)) => b.metadata.resource_version.clone(),
            other => panic!("expected only bookmarks, got {other:?}"),
        })
        .collect();
    assert!(bookmarks.len() >= 3, "{bookmarks:?}");
    assert!(bookmarks.iter().all(|b| *b == rv), "{bookmarks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_resource_is_refused_with_403_as_rbac_refuses_it() {
    let server = ApiServer::start().expect("start");
    server.apply(node("node-1", "z1")).expect("node-1");
    server.apply(service("x", "s1", 80, "")).expect("s1");
    server.forbid("nodes").expect("nodes are served");
    let client = client(&server).await;
    let nodes = Api::<Node>::all(client.clone());
    let forbidden = |r: Result<_, kube::Error>| match r {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
            assert!(status.message.contains("cannot"), "{status:?}");
        }
        other => panic!("expected 403, got {other:?}"),
    };
    forbidden(nodes.get("node-1").await.map(|_| ()));
    forbidden(nodes.list(&ListParams::default()).await.map(|_| ()));
    forbidden(nodes.watch(&WatchParams::default(), "0").await.map(|_| ()));
    assert_eq!(server.request_count("nodes", Verb::Get), 1);
    assert_eq!(server.request_count("nodes", Verb::List), 1);
    assert_eq!(server.request_count("nodes", Verb::Watch), 1);
    assert!(!server.sent("Node", None, "node-1"));
    // Other resources are served as before.
    let services = Api::<Service>::namespaced(client, "x");
    assert_eq!(services.get("s1").await.expect("s1").name_any(), "s1");
}
