//! WATCH: the chunked event stream, its replay of the history, bookmarks,
//! the 410 `ERROR` event after a compaction, and how a stream ends.

use std::{
    fmt::Write as _,
    io::{self, Write},
    net::TcpStream,
    sync::PoisonError,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{
    Verb,
    http::{Request, status, write_json},
    selector::Selector,
    store::{Event, EventType, Key, ResourceType, Shared, TYPES, TypeId},
};

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

pub(super) fn watch(
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
