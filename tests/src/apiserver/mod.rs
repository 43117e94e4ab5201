//! A stand-in Kubernetes apiserver for tests: plain HTTP/1.1 on
//! `127.0.0.1`, std threads, JSON in memory. kube-rs (`watcher`,
//! `reflector`, `Api::list/get/watch`) works against it unmodified.
//!
//! Reproduced:
//! * GET of collections and single objects for `v1` Services, Endpoints,
//!   Pods, Nodes and Namespaces and `discovery.k8s.io/v1` EndpointSlices,
//!   cluster-wide and namespaced (`/api/v1/namespaces/{ns}/services`, ...).
//! * One global, increasing `resourceVersion` counter (like etcd's revision);
//!   `uid` and `creationTimestamp` set on create and kept on replace.
//! * LIST: a `{Kind}List` whose items omit `apiVersion`/`kind` (as the real
//!   apiserver does), `metadata.resourceVersion` of the list, `limit` +
//!   `continue` pagination (later pages report the first page's
//!   resourceVersion; a token older than the compaction point gets HTTP 410).
//! * WATCH (`watch=true|1`): replays the history after `resourceVersion`
//!   (`""`/`"0"`: synthetic ADDED for the current state first), streams
//!   `ADDED`/`MODIFIED`/`DELETED` as chunked JSON lines flushed per event,
//!   `BOOKMARK`s every [`ApiServer::set_bookmark_interval`] when
//!   `allowWatchBookmarks=true`, `sendInitialEvents=true` (streaming lists,
//!   ending with the `k8s.io/initial-events-end` bookmark) and
//!   `timeoutSeconds` (ends the response cleanly).
//! * 410 Gone: a watch from a resourceVersion older than the last
//!   [`ApiServer::compact`] gets HTTP **200** and then one `ERROR` event whose
//!   object is a `Status` (`code: 410`, `reason: "Expired"`), then the
//!   stream ends. That is what the real apiserver's watch cache does, and it
//!   matters: kube-runtime's watcher relists only on a 410 *event*; an HTTP
//!   410 on the watch request would make it retry the same watch forever.
//! * Selectors: `fieldSelector` on `metadata.name` / `metadata.namespace`
//!   and a Pod's `spec.nodeName` (`=`, `==`, `!=`), and `labelSelector` (`k`, `!k`, `k=v`, `k==v`,
//!   `k!=v`, `k in (..)`, `k notin (..)`). A filtered watch turns an update
//!   that leaves the selection into `DELETED` and one that enters it into
//!   `ADDED`, like the watch cache does.
//! * `404 NotFound` / `400 BadRequest` / `405 MethodNotAllowed` as `Status`
//!   objects; `/version`, `/healthz`, `/readyz`, `/livez`.
//! * Keep-alive: several requests per connection, `Content-Length` on plain
//!   responses, the terminating chunk when a watch ends cleanly.
//! * A record of every object any response carried ([`ApiServer::sent`]),
//!   so tests can show what a client's selectors kept away from it.
//!
//! * 403 `Forbidden` for every request of a resource type a test
//!   [`ApiServer::forbid`]s, as RBAC refuses what a role does not grant.
//!
//! Not reproduced: TLS, authentication, authorization (but for
//! [`ApiServer::forbid`]), admission,
//! validation or defaulting of objects, writes over HTTP (objects change only
//! through [`ApiServer::apply`] / [`ApiServer::delete`]), server-side apply,
//! `generation`/`managedFields`, subresources, discovery (`/api`, `/apis`),
//! protobuf, compression, field selectors other than
//! `metadata.name`/`metadata.namespace`, `resourceVersionMatch=Exact` (every
//! list is served from the current state), LIST at an old resourceVersion,
//! and the "too large resource version" error.

mod conn;
mod http;
mod list;
mod router;
mod selector;
mod store;
mod watch;

use std::{
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    path::Path,
    sync::{Arc, Mutex, PoisonError},
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context, bail};
use serde_json::Value;

use conn::spawn_acceptor;
use store::{Shared, key, type_by_plural};

/// Request kinds counted by [`ApiServer::request_count`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// A LIST without a `continue` token: one per (re)list, however many pages.
    List,
    /// A WATCH request.
    Watch,
    /// A GET of one object.
    Get,
}

/// The running (or stopped) stand-in. Dropping it stops it.
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Mutex<Option<JoinHandle<()>>>,
    /// The network namespace (under /run/netns) it listens in; `None`: ours.
    netns: Option<String>,
}

impl ApiServer {
    /// Binds `127.0.0.1:0` and starts serving.
    pub fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind stand-in apiserver")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new());
        let acceptor = spawn_acceptor(&shared, listener, 0);
        Ok(Self {
            shared,
            addr,
            acceptor: Mutex::new(Some(acceptor)),
            netns: None,
        })
    }

    /// Binds `127.0.0.1:0` inside network namespace `netns` (a node's, for
    /// an agent that runs there) and starts serving.
    pub fn start_in(netns: &str) -> anyhow::Result<Self> {
        let mut api = crate::netns::within(netns, Self::start)?;
        api.netns = Some(netns.to_owned());
        Ok(api)
    }

    /// Runs `f` in the namespace the listener is in.
    fn at_listener<T: Send>(
        &self,
        f: impl FnOnce() -> anyhow::Result<T> + Send,
    ) -> anyhow::Result<T> {
        match &self.netns {
            Some(ns) => crate::netns::within(ns, f),
            None => f(),
        }
    }

    /// `http://127.0.0.1:PORT`; the port survives `stop`/`restart`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig with one cluster (`server: url`), no credentials,
    /// and `current-context` set.
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    \
             server: {}\ncontexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    \
             user: stand-in\n    namespace: default\ncurrent-context: stand-in\nusers:\n\
             - name: stand-in\n  user: {{}}\n",
            self.url()
        );
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
    }

    /// Creates or replaces an object given as JSON with `kind`,
    /// `metadata.name` and, for namespaced kinds, `metadata.namespace`
    /// (default `"default"`). `apiVersion` is filled in if missing.
    /// Assigns a new `metadata.resourceVersion`, a `uid` and
    /// `creationTimestamp` on create (kept on replace), and emits ADDED or
    /// MODIFIED. Returns the new resourceVersion.
    pub fn apply(&self, obj: Value) -> anyhow::Result<String> {
        let rv = self.shared.state().apply(obj)?;
        self.shared.changed.notify_all();
        Ok(rv.to_string())
    }

    /// Deletes an object and emits DELETED carrying the final object with a
    /// new resourceVersion. `namespace` is ignored for cluster-scoped kinds.
    pub fn delete(&self, kind: &str, namespace: Option<&str>, name: &str) -> anyhow::Result<()> {
        self.shared.state().delete(kind, namespace, name)?;
        self.shared.changed.notify_all();
        Ok(())
    }

    /// The stored object, as a watch would send it.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = key(kind, namespace, name)?;
        self.shared.state().objects.get(&key).cloned()
    }

    /// The current (latest assigned) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state().rv
    }

    /// Forgets the history up to now. A watch, new or already open, whose
    /// position is older than the current resourceVersion then gets one
    /// `ERROR` event with a 410 `Expired` Status (over HTTP 200) and ends.
    /// A continue token from before gets HTTP 410 on the LIST.
    pub fn compact(&self) {
        let mut st = self.shared.state();
        st.compacted = st.rv;
        st.history.clear();
        drop(st);
        self.shared.changed.notify_all();
    }

    /// Simulates an outage: closes the listener and every open connection
    /// (watch streams end without the terminating chunk). State is kept;
    /// `apply`/`delete` keep working. A no-op when already stopped.
    pub fn stop(&self) {
        let Some(acceptor) = self
            .acceptor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        self.shared.state().serve_epoch += 1;
        self.shared.changed.notify_all();
        // accept() does not notice the flag by itself; a connection wakes it.
        // Without one the join below would hang, so this must not be skipped.
        let addr = self.addr;
        let _ = self.at_listener(|| Ok(TcpStream::connect_timeout(&addr, Duration::from_secs(1))?));
        let _ = acceptor.join();
        // The acceptor registered every connection it accepted before it
        // exited, so none escapes this.
        for conn in self.shared.conns().values() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }

    /// Comes back on the same port with the same state.
    pub fn restart(&self) -> anyhow::Result<()> {
        let mut acceptor = self.acceptor.lock().unwrap_or_else(PoisonError::into_inner);
        if acceptor.is_some() {
            bail!("stand-in apiserver is already running");
        }
        // std sets SO_REUSEADDR, so the TIME_WAIT left by `stop` is no obstacle.
        let addr = self.addr;
        let listener = self
            .at_listener(|| Ok(TcpListener::bind(addr)?))
            .with_context(|| format!("rebind stand-in apiserver on {addr}"))?;
        let epoch = self.shared.state().serve_epoch;
        *acceptor = Some(spawn_acceptor(&self.shared, listener, epoch));
        Ok(())
    }

    /// Ends every open watch stream cleanly, as the apiserver does when
    /// `timeoutSeconds` runs out, so clients re-watch from their position.
    pub fn close_watches(&self) {
        self.shared.state().watch_epoch += 1;
        self.shared.changed.notify_all();
    }

    /// Holds back every watch stream's events and bookmarks (new watches
    /// included) until [`Self::resume_watches`], like a stalled watch cache.
    /// Lets a test make changes, and `compact`, that a client has certainly
    /// not seen yet. LIST is not affected.
    pub fn pause_watches(&self) {
        self.shared.state().paused = true;
    }

    /// Releases the streams held by [`Self::pause_watches`].
    pub fn resume_watches(&self) {
        self.shared.state().paused = false;
        self.shared.changed.notify_all();
    }

    /// Sets how often an idle watch with `allowWatchBookmarks=true` gets a
    /// BOOKMARK (default 1 s). Open streams switch after their next bookmark.
    pub fn set_bookmark_interval(&self, interval: Duration) {
        self.shared.state().bookmark_interval = interval;
        self.shared.changed.notify_all();
    }

    /// Refuses every request for a resource (`plural`, e.g. `"nodes"`)
    /// from now on with 403 Forbidden, as RBAC refuses a resource the
    /// client's role does not grant. Open watches go on.
    pub fn forbid(&self, plural: &str) -> anyhow::Result<()> {
        let ty = type_by_plural(plural).with_context(|| format!("{plural} is not served"))?;
        self.shared.state().forbidden.insert(ty);
        Ok(())
    }

    /// How many requests of `verb` were served for a resource (`plural`,
    /// e.g. `"services"`), including ones answered with an error.
    pub fn request_count(&self, plural: &str, verb: Verb) -> u64 {
        let Some(ty) = type_by_plural(plural) else {
            return 0;
        };
        self.shared
            .state()
            .counts
            .get(&(ty, verb))
            .copied()
            .unwrap_or(0)
    }

    /// Whether any response so far (a GET, a list, a watch event) carried
    /// this object, in any version. `namespace` is ignored for
    /// cluster-scoped kinds.
    pub fn sent(&self, kind: &str, namespace: Option<&str>, name: &str) -> bool {
        key(kind, namespace, name).is_some_and(|key| self.shared.state().sent.contains(&key))
    }

    /// How many watch streams on a resource (`plural`) are open now.
    pub fn open_watches(&self, plural: &str) -> usize {
        let Some(ty) = type_by_plural(plural) else {
            return 0;
        };
        self.shared
            .state()
            .open_watches
            .get(&ty)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}
