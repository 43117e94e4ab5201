//! Which resource a path names, and the dispatch of one request to a
//! GET, a LIST or a WATCH.

use std::{io, net::TcpStream};

use serde_json::json;

use super::{
    Verb,
    http::{Request, status, write_json, write_response},
    list::list,
    selector::Selector,
    store::{Shared, TYPES, TypeId},
    watch::watch,
};

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
pub(super) fn handle(
    shared: &Shared,
    req: &Request,
    out: &mut TcpStream,
    epoch: u64,
) -> io::Result<bool> {
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
    let ty = match &target {
        Target::Collection { ty, .. } | Target::Object { ty, .. } => *ty,
    };
    let mut st = shared.state();
    if st.forbidden.contains(&ty) {
        let (v, verb) = match &target {
            Target::Object { .. } => (Verb::Get, "get"),
            Target::Collection { .. } if matches!(req.param("watch"), Some("true" | "1")) => {
                (Verb::Watch, "watch")
            }
            Target::Collection { .. } => (Verb::List, "list"),
        };
        *st.counts.entry((ty, v)).or_default() += 1;
        drop(st);
        let plural = TYPES[ty].plural;
        // The message of a real apiserver's RBAC refusal.
        let body = status(
            403,
            "Forbidden",
            format!(
                "{plural} is forbidden: User \"system:anonymous\" cannot {verb} resource \"{plural}\" at the cluster scope"
            ),
        );
        write_json(out, 403, &body, false)?;
        return Ok(true);
    }
    drop(st);
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

#[cfg(test)]
mod tests {
    use super::*;

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
