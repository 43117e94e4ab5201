//! `labelSelector` and `fieldSelector`: parsing and matching, as the
//! apiserver applies them to LISTs and WATCHes.

use serde_json::Value;

/// One requirement of a label selector.
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// One requirement of a field selector: (field path, value, equal?).
struct FieldReq {
    /// The object's section and the field in it.
    field: (&'static str, &'static str),
    value: String,
    equal: bool,
}

/// Parsed `labelSelector` and `fieldSelector`.
pub(super) struct Selector {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selector {
    pub(super) fn parse(labels: Option<&str>, fields: Option<&str>) -> Result<Self, String> {
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
                "metadata.name" => ("metadata", "name"),
                "metadata.namespace" => ("metadata", "namespace"),
                // Pods only, as the apiserver's.
                "spec.nodeName" => ("spec", "nodeName"),
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

    pub(super) fn matches(&self, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        let fields_ok = self.fields.iter().all(|f| {
            let actual = obj[f.field.0][f.field.1].as_str().unwrap_or("");
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
