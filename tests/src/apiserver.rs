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
//!   (`=`, `==`, `!=`), and `labelSelector` (`k`, `!k`, `k=v`, `k==v`,
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
//! Not reproduced: TLS, authentication, authorization, admission,
//! validation or defaulting of objects, writes over HTTP (objects change only
//! through [`ApiServer::apply`] / [`ApiServer::delete`]), server-side apply,
//! `generation`/`managedFields`, subresources, discovery (`/api`, `/apis`),
//! protobuf, compression, field selectors other than
//! `metadata.name`/`metadata.namespace`, `resourceVersionMatch=Exact` (every
//! list is served from the current state), LIST at an old resourceVersion,
//! and the "too large resource version" error.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    fmt::Write as _,
    io::{self, BufRead, BufReader, Read, Write},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    path::Path,
    sync::{
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// A resource type the stand-in serves.
struct ResourceType {
    kind: &'static str,
    plural: &'static str,
    api_version: &'static str,
    namespaced: bool,
}

const fn rt(kind: &'static str, plural: &'static str, gv: &'static str, ns: bool) -> ResourceType {
    ResourceType {
        kind,
        plural,
        api_version: gv,
        namespaced: ns,
    }
}

const TYPES: &[ResourceType] = &[
    rt("Service", "services", "v1", true),
    rt("Endpoints", "endpoints", "v1", true),
    rt("Pod", "pods", "v1", true),
    rt("Node", "nodes", "v1", false),
    rt("Namespace", "namespaces", "v1", false),
    rt(
        "EndpointSlice",
        "endpointslices",
        "discovery.k8s.io/v1",
        true,
    ),
];

/// Index into [`TYPES`].
type TypeId = usize;

fn type_by_kind(kind: &str) -> Option<TypeId> {
    TYPES.iter().position(|t| t.kind == kind)
}

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history that watches replay.
struct Event {
    rv: u64,
    ty: TypeId,
    kind: EventType,
    /// The new object, or for a delete the final object.
    obj: Value,
    /// The object before an update or delete; filtered watches need it.
    prev: Option<Value>,
}

/// (type, namespace or "", name); BTreeMap order is etcd's key order.
type Key = (TypeId, String, String);

struct State {
    rv: u64,
    /// Watches from a resourceVersion below this get 410.
    compacted: u64,
    objects: BTreeMap<Key, Value>,
    /// Every change after `compacted`, in rv order; each rv is one event.
    history: VecDeque<Event>,
    /// Bumped by `stop`: streams of an older epoch end abruptly.
    serve_epoch: u64,
    /// Bumped by `close_watches`: streams of an older epoch end cleanly.
    watch_epoch: u64,
    paused: bool,
    bookmark_interval: Duration,
    counts: HashMap<(TypeId, Verb), u64>,
    open_watches: HashMap<TypeId, usize>,
    uids: u64,
    /// Every object any response carried (a GET, a list item, a watch
    /// event), in any version.
    sent: BTreeSet<Key>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled on every change of `state` that a watch may care about.
    changed: Condvar,
    /// Open connections, so that `stop` can cut them.
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not take the server down.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn conns(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The running (or stopped) stand-in. Dropping it stops it.
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl ApiServer {
    /// Binds `127.0.0.1:0` and starts serving.
    pub fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind stand-in apiserver")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                rv: 0,
                compacted: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                serve_epoch: 0,
                watch_epoch: 0,
                paused: false,
                bookmark_interval: Duration::from_secs(1),
                counts: HashMap::new(),
                open_watches: HashMap::new(),
                uids: 0,
                sent: BTreeSet::new(),
            }),
            changed: Condvar::new(),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        });
        let acceptor = spawn_acceptor(&shared, listener, 0);
        Ok(Self {
            shared,
            addr,
            acceptor: Mutex::new(Some(acceptor)),
        })
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
    pub fn apply(&self, mut obj: Value) -> anyhow::Result<String> {
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .context("object has no kind")?;
        let ty = type_by_kind(kind).with_context(|| format!("kind {kind} is not served"))?;
        let t = &TYPES[ty];
        match obj.get("apiVersion").and_then(Value::as_str) {
            None => obj["apiVersion"] = json!(t.api_version),
            Some(v) if v == t.api_version => {}
            Some(v) => bail!("{kind} has apiVersion {v}, expected {}", t.api_version),
        }
        let meta = obj
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .context("object has no metadata")?;
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .context("no metadata.name")?;
        let name = name.to_owned();
        let ns = if t.namespaced {
            let ns = meta
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or("default");
            let ns = ns.to_owned();
            meta.insert("namespace".into(), json!(ns));
            ns
        } else {
            // The real apiserver clears namespace on cluster-scoped objects.
            meta.remove("namespace");
            String::new()
        };

        let mut st = self.shared.state();
        st.rv += 1;
        let rv = st.rv;
        let key = (ty, ns, name);
        let prev = st.objects.get(&key).cloned();
        let meta = obj["metadata"].as_object_mut().context("metadata")?;
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        match &prev {
            Some(old) => {
                for field in ["uid", "creationTimestamp"] {
                    if let Some(v) = old["metadata"].get(field) {
                        meta.insert(field.into(), v.clone());
                    }
                }
            }
            None => {
                st.uids += 1;
                meta.insert("uid".into(), json!(uid(st.uids)));
                meta.insert(
                    "creationTimestamp".into(),
                    json!(rfc3339(SystemTime::now())),
                );
            }
        }
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        st.objects.insert(key, obj.clone());
        st.history.push_back(Event {
            rv,
            ty,
            kind,
            obj,
            prev,
        });
        drop(st);
        self.shared.changed.notify_all();
        Ok(rv.to_string())
    }

    /// Deletes an object and emits DELETED carrying the final object with a
    /// new resourceVersion. `namespace` is ignored for cluster-scoped kinds.
    pub fn delete(&self, kind: &str, namespace: Option<&str>, name: &str) -> anyhow::Result<()> {
        let ty = type_by_kind(kind).with_context(|| format!("kind {kind} is not served"))?;
        let ns = if TYPES[ty].namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        let key = (ty, ns.to_owned(), name.to_owned());
        let mut st = self.shared.state();
        let Some(prev) = st.objects.remove(&key) else {
            bail!("{kind} {ns}/{name} not found");
        };
        st.rv += 1;
        let rv = st.rv;
        let mut obj = prev.clone();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        st.history.push_back(Event {
            rv,
            ty,
            kind: EventType::Deleted,
            obj,
            prev: Some(prev),
        });
        drop(st);
        self.shared.changed.notify_all();
        Ok(())
    }

    /// The stored object, as a watch would send it.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let ty = type_by_kind(kind)?;
        let ns = if TYPES[ty].namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        self.shared
            .state()
            .objects
            .get(&(ty, ns.to_owned(), name.to_owned()))
            .cloned()
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
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
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
        let listener = TcpListener::bind(self.addr)
            .with_context(|| format!("rebind stand-in apiserver on {}", self.addr))?;
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

    /// How many requests of `verb` were served for a resource (`plural`,
    /// e.g. `"services"`), including ones answered with an error.
    pub fn request_count(&self, plural: &str, verb: Verb) -> u64 {
        let Some(ty) = TYPES.iter().position(|t| t.plural == plural) else {
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
        let Some(ty) = type_by_kind(kind) else {
            return false;
        };
        let ns = if TYPES[ty].namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        self.shared
            .state()
            .sent
            .contains(&(ty, ns.to_owned(), name.to_owned()))
    }

    /// How many watch streams on a resource (`plural`) are open now.
    pub fn open_watches(&self, plural: &str) -> usize {
        let Some(ty) = TYPES.iter().position(|t| t.plural == plural) else {
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

fn spawn_acceptor(shared: &Arc<Shared>, listener: TcpListener, epoch: u64) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    thread::spawn(move || {
        for conn in listener.incoming() {
            if shared.state().serve_epoch != epoch {
                break;
            }
            let Ok(conn) = conn else { continue };
            let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
            let Ok(clone) = conn.try_clone() else {
                continue;
            };
            shared.conns().insert(id, clone);
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                serve_connection(&shared, conn, epoch);
                shared.conns().remove(&id);
            });
        }
    })
}

/// One parsed request; the body, if any, is read and ignored.
struct Request {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    close: bool,
}

impl Request {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Largest request head or body accepted; kube sends a few hundred bytes.
const MAX_REQUEST: usize = 1 << 20;

fn serve_connection(shared: &Shared, conn: TcpStream, epoch: u64) {
    // Watch events are small writes that must not wait for the peer's
    // delayed ACK (Nagle would add ~40 ms to event latency).
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut out = conn;
    loop {
        let req = match read_request(&mut reader) {
            Ok(Some(req)) => req,
            Ok(None) => return,
            Err(e) => {
                let body = status(400, "BadRequest", format!("malformed request: {e}"));
                let _ = write_json(&mut out, 400, &body, true);
                return;
            }
        };
        let keep_alive = match handle(shared, &req, &mut out, epoch) {
            Ok(keep_alive) => keep_alive,
            Err(_) => return,
        };
        if !keep_alive || req.close {
            let _ = out.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// Reads one request head (and skips its body). `Ok(None)` on a clean EOF
/// between requests.
fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<Request>> {
    let bad = |msg: &str| io::Error::new(io::ErrorKind::InvalidData, msg.to_owned());
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("bad request line"));
    };
    let (method, target) = (method.to_owned(), target.to_owned());
    let mut close = version == "HTTP/1.0";
    let mut body_len = 0usize;
    let mut head_len = line.len();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("eof in headers"));
        }
        head_len += line.len();
        if head_len > MAX_REQUEST {
            return Err(bad("request head too large"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(bad("bad header"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            body_len = value.parse().map_err(|_| bad("bad content-length"))?;
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("chunked request bodies are not supported"));
        }
    }
    if body_len > MAX_REQUEST {
        return Err(bad("request body too large"));
    }
    io::copy(&mut reader.by_ref().take(body_len as u64), &mut io::sink())?;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    Ok(Some(Request {
        method,
        path: percent_decode(path),
        query,
        close,
    }))
}

/// `application/x-www-form-urlencoded` decoding, as kube's query encoder
/// produces it (`+` for space).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
            {
                let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(bytes[i + 1]) << 4 | hex(bytes[i + 2]));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a path names.
enum Target {
    Collection {
        ty: TypeId,
        ns: Option<String>,
    },
    Object {
        ty: TypeId,
        ns: Option<String>,
        name: String,
    },
}

fn route(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group_version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("v1".to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let find = |plural: &str| {
        TYPES
            .iter()
            .position(|t| t.plural == plural && t.api_version == group_version)
    };
    match rest {
        [plural] => Some(Target::Collection {
            ty: find(plural)?,
            ns: None,
        }),
        ["namespaces", ns, plural] => {
            let ty = find(plural).filter(|&ty| TYPES[ty].namespaced)?;
            Some(Target::Collection {
                ty,
                ns: Some((*ns).to_owned()),
            })
        }
        ["namespaces", ns, plural, name] => {
            let ty = find(plural).filter(|&ty| TYPES[ty].namespaced)?;
            Some(Target::Object {
                ty,
                ns: Some((*ns).to_owned()),
                name: (*name).to_owned(),
            })
        }
        // Also `/api/v1/namespaces/{name}`: Namespace is cluster-scoped.
        [plural, name] => {
            let ty = find(plural).filter(|&ty| !TYPES[ty].namespaced)?;
            Some(Target::Object {
                ty,
                ns: None,
                name: (*name).to_owned(),
            })
        }
        _ => None,
    }
}

/// Serves one request. `Ok(false)` closes the connection; `Err` is a write
/// failure (the peer is gone).
fn handle(shared: &Shared, req: &Request, out: &mut TcpStream, epoch: u64) -> io::Result<bool> {
    if req.method != "GET" {
        let body = status(
            405,
            "MethodNotAllowed",
            format!("{} is not supported", req.method),
        );
        write_json(out, 405, &body, false)?;
        return Ok(true);
    }
    match req.path.as_str() {
        "/healthz" | "/readyz" | "/livez" => {
            write_response(out, 200, "text/plain", b"ok", false)?;
            return Ok(true);
        }
        "/version" => {
            let body = json!({
                "major": "1", "minor": "35", "gitVersion": "v1.35.0-stand-in",
                "platform": "linux/amd64",
            });
            write_json(out, 200, &body, false)?;
            return Ok(true);
        }
        _ => {}
    }
    let Some(target) = route(&req.path) else {
        let body = status(
            404,
            "NotFound",
            format!("the server could not find {}", req.path),
        );
        write_json(out, 404, &body, false)?;
        return Ok(true);
    };
    let selector = match Selector::parse(req.param("labelSelector"), req.param("fieldSelector")) {
        Ok(s) => s,
        Err(msg) => {
            write_json(out, 400, &status(400, "BadRequest", msg), false)?;
            return Ok(true);
        }
    };
    match target {
        Target::Object { ty, ns, name } => {
            let mut st = shared.state();
            *st.counts.entry((ty, Verb::Get)).or_default() += 1;
            let key = (ty, ns.unwrap_or_default(), name.clone());
            let found = st.objects.get(&key).cloned();
            if found.is_some() {
                st.sent.insert(key);
            }
            drop(st);
            match found {
                Some(obj) => write_json(out, 200, &obj, false)?,
                None => {
                    let t = &TYPES[ty];
                    let mut body = status(
                        404,
                        "NotFound",
                        format!("{} \"{name}\" not found", t.plural),
                    );
                    body["details"] = json!({"name": name, "kind": t.plural});
                    write_json(out, 404, &body, false)?;
                }
            }
            Ok(true)
        }
        Target::Collection { ty, ns } => {
            if matches!(req.param("watch"), Some("true" | "1")) {
                watch(shared, req, out, epoch, ty, ns.as_deref(), &selector)
            } else {
                list(shared, req, out, ty, ns.as_deref(), &selector)?;
                Ok(true)
            }
        }
    }
}

fn list(
    shared: &Shared,
    req: &Request,
    out: &mut TcpStream,
    ty: TypeId,
    ns: Option<&str>,
    selector: &Selector,
) -> io::Result<()> {
    let limit: usize = req.param("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let token = req.param("continue").filter(|c| !c.is_empty());
    let mut st = shared.state();
    if token.is_none() {
        *st.counts.entry((ty, Verb::List)).or_default() += 1;
    }
    // Token: "{list rv}/{namespace}/{name}" of the last item served.
    let (list_rv, after) = match token {
        None => (st.rv, None),
        Some(token) => {
            let parsed = token.split_once('/').and_then(|(rv, key)| {
                let (kns, kname) = key.split_once('/')?;
                Some((rv.parse::<u64>().ok()?, kns.to_owned(), kname.to_owned()))
            });
            let Some((rv, kns, kname)) = parsed else {
                drop(st);
                let body = status(400, "BadRequest", "invalid continue token".into());
                return write_json(out, 400, &body, false);
            };
            if rv < st.compacted {
                drop(st);
                let msg = "The provided continue parameter is too old to display a consistent \
                           list result. You can start a new list without the continue parameter.";
                return write_json(out, 410, &status(410, "Expired", msg.into()), false);
            }
            (rv, Some((ty, kns, kname)))
        }
    };
    let start = match after {
        Some(key) => std::ops::Bound::Excluded(key),
        None => std::ops::Bound::Included((ty, String::new(), String::new())),
    };
    let mut items = Vec::new();
    let mut last = None;
    let mut more = false;
    let state = &mut *st;
    for ((kty, kns, kname), obj) in state.objects.range((start, std::ops::Bound::Unbounded)) {
        if *kty != ty {
            break;
        }
        if ns.is_some_and(|ns| ns != kns) || !selector.matches(obj) {
            continue;
        }
        if limit > 0 && items.len() == limit {
            more = true;
            break;
        }
        let mut item = obj.clone();
        // The real apiserver leaves type information off list items.
        if let Some(map) = item.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        items.push(item);
        state.sent.insert((ty, kns.clone(), kname.clone()));
        last = Some((kns.clone(), kname.clone()));
    }
    drop(st);
    let t = &TYPES[ty];
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let (true, Some((kns, kname))) = (more, last) {
        metadata["continue"] = json!(format!("{list_rv}/{kns}/{kname}"));
    }
    let body = json!({
        "apiVersion": t.api_version,
        "kind": format!("{}List", t.kind),
        "metadata": metadata,
        "items": items,
    });
    write_json(out, 200, &body, false)
}

/// Counts an open watch for [`ApiServer::open_watches`] while it lives.
struct OpenWatch<'a> {
    shared: &'a Shared,
    ty: TypeId,
}

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.shared.state().open_watches.get_mut(&self.ty) {
            *n = n.saturating_sub(1);
        }
    }
}

/// How a watch stream ends.
enum End {
    /// Terminating chunk; the connection stays usable.
    Clean,
    /// `stop`: drop the connection mid-stream.
    Abrupt,
}

fn watch(
    shared: &Shared,
    req: &Request,
    out: &mut TcpStream,
    epoch: u64,
    ty: TypeId,
    ns: Option<&str>,
    selector: &Selector,
) -> io::Result<bool> {
    let t = &TYPES[ty];
    let from = req.param("resourceVersion").unwrap_or("");
    let from = match from {
        "" | "0" => None,
        rv => match rv.parse::<u64>() {
            Ok(rv) => Some(rv),
            Err(_) => {
                let body = status(400, "BadRequest", format!("invalid resourceVersion {rv:?}"));
                write_json(out, 400, &body, false)?;
                return Ok(true);
            }
        },
    };
    let bookmarks = req.param("allowWatchBookmarks") == Some("true");
    let initial_events = req.param("sendInitialEvents") == Some("true");
    let timeout = req
        .param("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok());
    let start = Instant::now();
    let deadline = timeout.map(|s| start + Duration::from_secs(s));
    let in_scope = |obj: &Value| {
        ns.is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns))
            && selector.matches(obj)
    };

    let mut st = shared.state();
    *st.counts.entry((ty, Verb::Watch)).or_default() += 1;
    *st.open_watches.entry(ty).or_default() += 1;
    let _open = OpenWatch { shared, ty };
    let watch_epoch = st.watch_epoch;
    let mut batch = String::new();
    // rv "" / "0" means "from now, starting with the current state"; so does
    // a streaming list (sendInitialEvents), which ends with a marked bookmark.
    let mut cursor = match from {
        Some(rv) if !initial_events => rv,
        _ => {
            let st = &mut *st;
            for (key, obj) in &st.objects {
                if key.0 == ty && in_scope(obj) {
                    push_event(&mut batch, "ADDED", obj);
                    st.sent.insert(key.clone());
                }
            }
            if initial_events && bookmarks {
                let mut bm = bookmark(t, st.rv);
                bm["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                push_event(&mut batch, "BOOKMARK", &bm);
            }
            st.rv
        }
    };
    let mut next_bookmark = start + st.bookmark_interval;
    drop(st);

    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
          Transfer-Encoding: chunked\r\nCache-Control: no-cache, private\r\n\r\n",
    )?;
    let end = loop {
        if !batch.is_empty() {
            write!(out, "{:x}\r\n{batch}\r\n", batch.len())?;
            batch.clear();
        }
        let mut st = shared.state();
        let end = loop {
            let now = Instant::now();
            if st.serve_epoch != epoch {
                break Some(End::Abrupt);
            }
            if st.watch_epoch != watch_epoch || deadline.is_some_and(|d| now >= d) {
                break Some(End::Clean);
            }
            if !st.paused {
                if cursor < st.compacted {
                    let msg = format!("too old resource version: {cursor} ({})", st.compacted);
                    push_event(&mut batch, "ERROR", &status(410, "Expired", msg));
                    break Some(End::Clean);
                }
                let first = st.history.partition_point(|e| e.rv <= cursor);
                let st = &mut *st;
                for e in st.history.range(first..) {
                    if e.ty == ty && filter_event(e, &in_scope, &mut batch) {
                        st.sent.insert(key_of(ty, &e.obj));
                    }
                }
                cursor = cursor.max(st.rv);
                if bookmarks && now >= next_bookmark {
                    push_event(&mut batch, "BOOKMARK", &bookmark(t, cursor));
                    next_bookmark = now + st.bookmark_interval;
                }
                if !batch.is_empty() {
                    break None;
                }
            }
            let mut wake = deadline.unwrap_or(now + Duration::from_secs(3600));
            if bookmarks && !st.paused {
                wake = wake.min(next_bookmark);
            }
            let wait = wake.saturating_duration_since(now);
            st = shared
                .changed
                .wait_timeout(st, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        if let Some(end) = end {
            break end;
        }
    };
    match end {
        End::Abrupt => Ok(false),
        End::Clean => {
            if !batch.is_empty() {
                write!(out, "{:x}\r\n{batch}\r\n", batch.len())?;
            }
            out.write_all(b"0\r\n\r\n")?;
            Ok(true)
        }
    }
}

/// Appends the watch event (if any) that a stream with this scope sees for
/// `e`: entering the scope is ADDED, leaving it DELETED (with the old
/// object at the new resourceVersion), as the watch cache does. Returns
/// whether it appended one.
fn filter_event(e: &Event, in_scope: &impl Fn(&Value) -> bool, batch: &mut String) -> bool {
    let now_in = e.kind != EventType::Deleted && in_scope(&e.obj);
    let was_in = e.prev.as_ref().is_some_and(in_scope);
    match (was_in, now_in) {
        (false, true) => push_event(batch, "ADDED", &e.obj),
        (true, true) => push_event(batch, e.kind.as_str(), &e.obj),
        (true, false) if e.kind == EventType::Deleted => push_event(batch, "DELETED", &e.obj),
        (true, false) => {
            let mut old = e.prev.clone().unwrap_or(Value::Null);
            old["metadata"]["resourceVersion"] = json!(e.rv.to_string());
            push_event(batch, "DELETED", &old);
        }
        (false, false) => return false,
    }
    true
}

/// An object's key, as stored (objects are stored with their namespace).
fn key_of(ty: TypeId, obj: &Value) -> Key {
    let meta = &obj["metadata"];
    let s = |f: &str| meta[f].as_str().unwrap_or_default().to_owned();
    (ty, s("namespace"), s("name"))
}

fn push_event(batch: &mut String, kind: &str, obj: &Value) {
    let _ = writeln!(batch, "{}", json!({"type": kind, "object": obj}));
}

fn bookmark(t: &ResourceType, rv: u64) -> Value {
    json!({
        "kind": t.kind,
        "apiVersion": t.api_version,
        "metadata": {"resourceVersion": rv.to_string()},
    })
}

/// A `Status` failure object, as the apiserver sends for errors.
fn status(code: u16, reason: &str, message: String) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn write_json(out: &mut TcpStream, code: u16, body: &Value, close: bool) -> io::Result<()> {
    write_response(
        out,
        code,
        "application/json",
        body.to_string().as_bytes(),
        close,
    )
}

fn write_response(
    out: &mut TcpStream,
    code: u16,
    content_type: &str,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        410 => "Gone",
        _ => "Error",
    };
    let mut msg = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    )
    .into_bytes();
    if close {
        msg.extend_from_slice(b"Connection: close\r\n");
    }
    msg.extend_from_slice(b"\r\n");
    msg.extend_from_slice(body);
    out.write_all(&msg)
}

/// One requirement of a label selector.
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// One requirement of a field selector: (field path, value, equal?).
struct FieldReq {
    field: &'static str,
    value: String,
    equal: bool,
}

/// Parsed `labelSelector` and `fieldSelector`.
struct Selector {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selector {
    fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
        let mut sel = Selector {
            labels: Vec::new(),
            fields: Vec::new(),
        };
        for term in split_top_level(labels.unwrap_or(""))? {
            sel.labels.push(parse_label_req(term)?);
        }
        for term in fields
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            let (path, value, equal) = if let Some((p, v)) = term.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, v, true)
            } else {
                return Err(format!("invalid field selector term {term:?}"));
            };
            let field = match path.trim() {
                "metadata.name" => "name",
                "metadata.namespace" => "namespace",
                other => return Err(format!("field label not supported: {other}")),
            };
            sel.fields.push(FieldReq {
                field,
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(sel)
    }

    fn matches(&self, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        let fields_ok = self.fields.iter().all(|f| {
            let actual = meta[f.field].as_str().unwrap_or("");
            (actual == f.value) == f.equal
        });
        let label = |k: &str| meta["labels"][k].as_str();
        fields_ok
            && self.labels.iter().all(|req| match req {
                LabelReq::Exists(k) => label(k).is_some(),
                LabelReq::NotExists(k) => label(k).is_none(),
                LabelReq::In(k, vs) => label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
                // As in Kubernetes, a missing label satisfies `notin` and `!=`.
                LabelReq::NotIn(k, vs) => label(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            })
    }
}

/// Splits a label selector at commas outside `( )`.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("unbalanced parentheses in label selector {s:?}"));
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced parentheses in label selector {s:?}"));
    }
    terms.push(&s[start..]);
    Ok(terms
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect())
}

fn parse_label_req(term: &str) -> Result<LabelReq, String> {
    let bad = || format!("invalid label selector term {term:?}");
    let key = |k: &str| {
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            Err(bad())
        } else {
            Ok(k.to_owned())
        }
    };
    if let Some(k) = term.strip_prefix('!') {
        return Ok(LabelReq::NotExists(key(k)?));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelReq::NotIn(key(k)?, vec![v.trim().to_owned()]));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelReq::In(key(k)?, vec![v.trim().to_owned()]));
    }
    if let Some(open) = term.find('(') {
        let (head, list) = term.split_at(open);
        let values = list
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(bad)?
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect();
        let mut words = head.split_whitespace();
        let (Some(k), Some(op), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad());
        };
        return match op {
            "in" => Ok(LabelReq::In(key(k)?, values)),
            "notin" => Ok(LabelReq::NotIn(key(k)?, values)),
            _ => Err(bad()),
        };
    }
    Ok(LabelReq::Exists(key(term)?))
}

/// A UUID-shaped, unique-per-process uid.
fn uid(seq: u64) -> String {
    let pid = u64::from(std::process::id());
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        pid & 0xffff_ffff,
        seq & 0xffff_ffff_ffff
    )
}

/// `YYYY-MM-DDTHH:MM:SSZ` in UTC.
fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), valid after 1970.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // leap day 2024
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn query_decoding() {
        assert_eq!(
            percent_decode("metadata.name%3Dnode-1"),
            "metadata.name=node-1"
        );
        assert_eq!(percent_decode("a+in+%28x%2Cy%29"), "a in (x,y)");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "fe"}}});
        let matches = |l: &str| Selector::parse(Some(l), None).map(|s| s.matches(&obj));
        assert_eq!(matches("app=web"), Ok(true));
        assert_eq!(matches("app==web,tier!=be"), Ok(true));
        assert_eq!(matches("app in (db, web),!missing"), Ok(true));
        assert_eq!(matches("app notin (web)"), Ok(false));
        assert_eq!(matches("missing"), Ok(false));
        assert_eq!(matches("!app"), Ok(false));
        assert!(matches("app in (web").is_err());
    }

    #[test]
    fn kube_proxys_selector_keeps_out_other_proxies_and_headless() {
        let sel = Selector::parse(
            Some("!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"),
            None,
        )
        .unwrap();
        let labelled = |labels: Value| json!({"metadata": {"name": "a", "labels": labels}});
        assert!(sel.matches(&json!({"metadata": {"name": "a"}})));
        assert!(sel.matches(&labelled(json!({"kubernetes.io/service-name": "a"}))));
        // The key's presence is what counts, whatever its value.
        assert!(!sel.matches(&labelled(
            json!({"service.kubernetes.io/service-proxy-name": "other"})
        )));
        assert!(!sel.matches(&labelled(json!({"service.kubernetes.io/headless": ""}))));
        assert!(!sel.matches(&labelled(json!({
            "kubernetes.io/service-name": "a",
            "service.kubernetes.io/headless": "",
        }))));
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "node-1"}});
        let matches = |f: &str| Selector::parse(None, Some(f)).map(|s| s.matches(&obj));
        assert_eq!(matches("metadata.name=node-1"), Ok(true));
        assert_eq!(matches("metadata.name==node-2"), Ok(false));
        assert_eq!(matches("metadata.name!=node-2"), Ok(true));
        assert!(matches("spec.unschedulable=true").is_err());
    }

    #[test]
    fn routes() {
        let ty = |p| match route(p) {
            Some(Target::Collection { ty, ns }) => Some((TYPES[ty].kind, ns, None)),
            Some(Target::Object { ty, ns, name }) => Some((TYPES[ty].kind, ns, Some(name))),
            None => None,
        };
        assert_eq!(ty("/api/v1/services"), Some(("Service", None, None)));
        assert_eq!(
            ty("/apis/discovery.k8s.io/v1/namespaces/x/endpointslices/s"),
            Some(("EndpointSlice", Some("x".into()), Some("s".into())))
        );
        assert_eq!(
            ty("/api/v1/nodes/n1"),
            Some(("Node", None, Some("n1".into())))
        );
        assert_eq!(
            ty("/api/v1/namespaces/x"),
            Some(("Namespace", None, Some("x".into())))
        );
        assert_eq!(ty("/api/v1/endpointslices"), None);
        assert_eq!(ty("/api/v1/services/x"), None);
    }
}
