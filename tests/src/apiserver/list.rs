//! LIST: one page of a collection, with `limit` + `continue` pagination.

use std::{io, net::TcpStream, ops::Bound};

use serde_json::json;

use super::{
    Verb,
    http::{Request, status, write_json},
    selector::Selector,
    store::{Shared, TYPES, TypeId},
};

pub(super) fn list(
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
        Some(key) => Bound::Excluded(key),
        None => Bound::Included((ty, String::new(), String::new())),
    };
    let mut items = Vec::new();
    let mut last = None;
    let mut more = false;
    let state = &mut *st;
    for ((kty, kns, kname), obj) in state.objects.range((start, Bound::Unbounded)) {
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
