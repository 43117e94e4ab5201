//! The object store: the served resource types, the objects, the history
//! that watches replay, and the counters tests read.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    net::TcpStream,
    sync::{Condvar, Mutex, MutexGuard, PoisonError, atomic::AtomicU64},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::Verb;

/// A resource type the stand-in serves.
pub(super) struct ResourceType {
    pub(super) kind: &'static str,
    pub(super) plural: &'static str,
    pub(super) api_version: &'static str,
    pub(super) namespaced: bool,
}

const fn rt(kind: &'static str, plural: &'static str, gv: &'static str, ns: bool) -> ResourceType {
    ResourceType {
        kind,
        plural,
        api_version: gv,
        namespaced: ns,
    }
}

pub(super) const TYPES: &[ResourceType] = &[
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
pub(super) type TypeId = usize;

fn type_by_kind(kind: &str) -> Option<TypeId> {
    TYPES.iter().position(|t| t.kind == kind)
}

/// The type served under a collection name, e.g. `"services"`.
pub(super) fn type_by_plural(plural: &str) -> Option<TypeId> {
    TYPES.iter().position(|t| t.plural == plural)
}

/// Where `kind`'s object `name` is stored: in `namespace` (default
/// `"default"`), which is ignored for cluster-scoped kinds. `None` for a
/// kind not served.
pub(super) fn key(kind: &str, namespace: Option<&str>, name: &str) -> Option<Key> {
    let ty = type_by_kind(kind)?;
    let ns = if TYPES[ty].namespaced {
        namespace.unwrap_or("default")
    } else {
        ""
    };
    Some((ty, ns.to_owned(), name.to_owned()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history that watches replay.
pub(super) struct Event {
    pub(super) rv: u64,
    pub(super) ty: TypeId,
    pub(super) kind: EventType,
    /// The new object, or for a delete the final object.
    pub(super) obj: Value,
    /// The object before an update or delete; filtered watches need it.
    pub(super) prev: Option<Value>,
}

/// (type, namespace or "", name); BTreeMap order is etcd's key order.
pub(super) type Key = (TypeId, String, String);

pub(super) struct State {
    pub(super) rv: u64,
    /// Watches from a resourceVersion below this get 410.
    pub(super) compacted: u64,
    pub(super) objects: BTreeMap<Key, Value>,
    /// Every change after `compacted`, in rv order; each rv is one event.
    pub(super) history: VecDeque<Event>,
    /// Bumped by `stop`: streams of an older epoch end abruptly.
    pub(super) serve_epoch: u64,
    /// Bumped by `close_watches`: streams of an older epoch end cleanly.
    pub(super) watch_epoch: u64,
    pub(super) paused: bool,
    pub(super) bookmark_interval: Duration,
    pub(super) counts: HashMap<(TypeId, Verb), u64>,
    pub(super) open_watches: HashMap<TypeId, usize>,
    pub(super) uids: u64,
    /// Every object any response carried (a GET, a list item, a watch
    /// event), in any version.
    pub(super) sent: BTreeSet<Key>,
    /// Types every request for is refused with 403, as RBAC refuses what
    /// a role does not grant.
    pub(super) forbidden: BTreeSet<TypeId>,
}

impl State {
    pub(super) fn new() -> Self {
        State {
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
            forbidden: BTreeSet::new(),
        }
    }

    /// Stores `obj` as [`super::ApiServer::apply`] describes; returns its new
    /// resourceVersion.
    pub(super) fn apply(&mut self, mut obj: Value) -> anyhow::Result<u64> {
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

        self.rv += 1;
        let rv = self.rv;
        let key = (ty, ns, name);
        let prev = self.objects.get(&key).cloned();
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
                self.uids += 1;
                meta.insert("uid".into(), json!(uid(self.uids)));
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
        self.objects.insert(key, obj.clone());
        self.history.push_back(Event {
            rv,
            ty,
            kind,
            obj,
            prev,
        });
        Ok(rv)
    }

    /// Removes an object as [`super::ApiServer::delete`] describes.
    pub(super) fn delete(
        &mut self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> anyhow::Result<()> {
        let key =
            key(kind, namespace, name).with_context(|| format!("kind {kind} is not served"))?;
        let ty = key.0;
        let Some(prev) = self.objects.remove(&key) else {
            bail!("{kind} {}/{name} not found", key.1);
        };
        self.rv += 1;
        let rv = self.rv;
        let mut obj = prev.clone();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.history.push_back(Event {
            rv,
            ty,
            kind: EventType::Deleted,
            obj,
            prev: Some(prev),
        });
        Ok(())
    }
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Signalled on every change of `state` that a watch may care about.
    pub(super) changed: Condvar,
    /// Open connections, so that `stop` can cut them.
    pub(super) conns: Mutex<HashMap<u64, TcpStream>>,
    pub(super) next_conn: AtomicU64,
}

impl Shared {
    pub(super) fn new() -> Self {
        Shared {
            state: Mutex::new(State::new()),
            changed: Condvar::new(),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not take the server down.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn conns(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
}
