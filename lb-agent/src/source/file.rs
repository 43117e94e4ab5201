//! `--from-file`: Services and EndpointSlices (and the Nodes, Pods and
//! Namespaces the agent reads) from YAML (or JSON) files.
//!
//! A file holds one or more `---`-separated documents; a `kind: List` document
//! (as `kubectl get -o yaml` writes) is unpacked. A directory means every
//! `*.yaml`, `*.yml` and `*.json` file in it, in name order. A document that
//! cannot be parsed is reported and skipped; the others are still used.
//! Objects are parsed with only the fields the model reads ([`Kept`]).

use std::{
    fs, io,
    path::{Path, PathBuf},
    sync::mpsc,
    time::SystemTime,
};

use k8s_openapi::api::{
    core::v1::{Namespace, Node, Pod, Service},
    discovery::v1::EndpointSlice,
};
use yaml_serde::Value;

use super::{
    nesting,
    strip::{Kept, Whole},
};
use crate::model::sock_lb::{PodFacts, Setting};

/// Everything read from the files.
#[derive(Debug, Default)]
pub struct Objects {
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    /// Nodes: the agent reads its own one's zone label and addresses.
    pub nodes: Vec<Node>,
    /// Pods and Namespaces: whether they opted out of socket load
    /// balancing (`model::sock_lb`).
    pub pods: Vec<PodFacts>,
    pub namespaces: Vec<(String, Setting)>,
    /// Documents that were skipped: where, and why.
    pub skipped: Vec<SkippedDocument>,
}

impl Objects {
    /// Adds `other`'s objects after these.
    pub fn append(&mut self, other: Objects) {
        self.services.extend(other.services);
        self.slices.extend(other.slices);
        self.nodes.extend(other.nodes);
        self.pods.extend(other.pods);
        self.namespaces.extend(other.namespaces);
        self.skipped.extend(other.skipped);
    }
}

/// A document that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedDocument {
    /// `file#index`, plus `kind namespace/name` when those could be read.
    pub location: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// The files `path` stands for: itself, or the manifests in a directory.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, FileSourceError> {
    let read_err = |source| FileSourceError::Read {
        path: path.to_owned(),
        source,
    };
    if !path.metadata().map_err(read_err)?.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut out = Vec::new();
    for entry in fs::read_dir(path).map_err(read_err)? {
        let p = entry.map_err(read_err)?.path();
        let manifest = matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        );
        if manifest && p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Documents parsed at a time: an edit reaches the model a chunk at a
/// time, so the objects of a large file are never all held at once (at
/// 100,000 Services they took as much memory again as the model).
pub const CHUNK: usize = 2048;

/// The documents under a path, parsed a chunk at a time on a thread of
/// their own, a chunk ahead of the model that takes them.
pub struct Reader {
    chunks: mpsc::Receiver<Result<Objects, FileSourceError>>,
}

impl Reader {
    /// Lists the files `path` stands for and starts parsing them; each
    /// file is read when its turn comes.
    pub fn open(path: &Path) -> Result<Self, FileSourceError> {
        let files = files(path)?;
        // One chunk waits while the next is parsed; a reader dropped
        // half-way stops the thread at its next send.
        let (tx, chunks) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("file-parse".into())
            .spawn(move || parse_files(files, &tx))
            .map_err(|source| FileSourceError::Read {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self { chunks })
    }

    /// The objects of the next [`CHUNK`] documents (fewer at the end of a
    /// file); `None` once every file is read.
    pub fn next_chunk(&mut self) -> Result<Option<Objects>, FileSourceError> {
        // A closed channel: every file was sent (or the thread is gone).
        self.chunks.recv().ok().transpose()
    }
}

/// Reads and parses `files` in order, a chunk at a time, into `tx`.
fn parse_files(files: Vec<PathBuf>, tx: &mpsc::SyncSender<Result<Objects, FileSourceError>>) {
    for file in files {
        let text = match fs::read_to_string(&file) {
            Ok(text) => text,
            Err(source) => {
                let _ = tx.send(Err(FileSourceError::Read { path: file, source }));
                return;
            }
        };
        let origin = file.display().to_string();
        let docs = split_documents(&text);
        for (i, chunk) in docs.chunks(CHUNK).enumerate() {
            let mut out = Objects::default();
            parse_chunk(&origin, chunk, i * CHUNK, &mut out);
            if tx.send(Ok(out)).is_err() {
                return;
            }
        }
    }
}

/// Reads every document under `path` at once.
pub fn load(path: &Path) -> Result<Objects, FileSourceError> {
    let mut reader = Reader::open(path)?;
    let mut objects = Objects::default();
    while let Some(chunk) = reader.next_chunk()? {
        objects.append(chunk);
    }
    Ok(objects)
}

/// What [`fingerprint`] returns.
pub type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// A cheap fingerprint of the files (name, size, mtime) to notice edits.
pub fn fingerprint(path: &Path) -> Fingerprint {
    files(path)
        .unwrap_or_default()
        .into_iter()
        .map(|f| {
            let meta = f.metadata().ok();
            let len = meta.as_ref().map_or(0, |m| m.len());
            let mtime = meta.and_then(|m| m.modified().ok());
            (f, len, mtime)
        })
        .collect()
}

/// Documents below this many are parsed on the calling thread.
const PARALLEL_FROM: usize = 512;

/// Parses a multi-document text; `origin` names it in reports.
pub fn parse_into(origin: &str, text: &str, out: &mut Objects) {
    parse_chunk(origin, &split_documents(text), 0, out);
}

/// Parses `docs` of `origin`, the first of which is its document number
/// `first`.
pub fn parse_chunk(origin: &str, docs: &[&str], first: usize, out: &mut Objects) {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    if threads == 1 || docs.len() < PARALLEL_FROM {
        parse_documents(origin, docs, first, out, true);
        return;
    }
    // YAML parsing is most of a cold start from a large file: use every core.
    let per_thread = docs.len().div_ceil(threads);
    let parts: Vec<Objects> = std::thread::scope(|scope| {
        let workers: Vec<_> = docs
            .chunks(per_thread)
            .enumerate()
            .map(|(i, chunk)| {
                scope.spawn(move || {
                    let mut part = Objects::default();
                    parse_documents(origin, chunk, first + i * per_thread, &mut part, true);
                    part
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for part in parts {
        out.append(part);
    }
}

/// [`parse_into`] with every document taken by the general path: the
/// `file_source` fuzz target checks that the fast path reads the same.
#[cfg(any(test, feature = "fuzzing"))]
pub fn parse_into_general(origin: &str, text: &str, out: &mut Objects) {
    parse_documents(origin, &split_documents(text), 0, out, false);
}

/// Parses `docs`, the first of which is document number `first`; with
/// `fast`, Services and slices in block style go straight to their type.
fn parse_documents(origin: &str, docs: &[&str], first: usize, out: &mut Objects, fast: bool) {
    for (i, doc) in docs.iter().enumerate() {
        if nesting::deeper_than(doc, nesting::MAX_DEPTH) {
            out.skipped.push(SkippedDocument {
                location: format!("{origin}#{}", first + i),
                reason: format!(
                    "nested deeper than {} levels (not parsed)",
                    nesting::MAX_DEPTH
                ),
            });
            continue;
        }
        // Fast path: a Service or slice goes straight to its type. Anything
        // else, or anything it cannot read, takes the general path, which
        // also says what is wrong.
        match top_level_kind(doc).filter(|_| fast) {
            Some("Service") => {
                if let Ok(Whole(svc)) = yaml_serde::from_str(doc) {
                    out.services.push(svc);
                    continue;
                }
            }
            Some("EndpointSlice") => {
                if let Ok(Whole(slice)) = yaml_serde::from_str(doc) {
                    out.slices.push(slice);
                    continue;
                }
            }
            _ => {}
        }
        let location = format!("{origin}#{}", first + i);
        match yaml_serde::from_str::<Value>(doc) {
            Ok(Value::Null) => {}
            Ok(value) => add_value(&location, value, Some(doc), out),
            Err(e) => out.skipped.push(SkippedDocument {
                location,
                reason: format!("not valid YAML: {e}"),
            }),
        }
    }
}

/// The `kind` of a block-style document: its one `kind:` line at column 0
/// (nested `kind:` keys, as in ownerReferences, are indented).
fn top_level_kind(doc: &str) -> Option<&str> {
    let mut kinds = doc.lines().filter_map(|l| l.strip_prefix("kind:"));
    let kind = kinds.next()?.trim();
    kinds.next().is_none().then_some(kind)
}

/// Splits on `---` lines ourselves, so one broken document cannot take the
/// rest of the stream down with it.
pub fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&text[start..]);
    docs
}

/// Adds what `value` holds. `text`, the document's own text when `value` is
/// a whole document, is what a Service or slice is read from: as on the
/// fast path, whatever the document's style (a YAML value has lost the
/// difference between an empty scalar and null, which a string field
/// reads as `""`). Items of a List are read from their value.
fn add_value(location: &str, value: Value, text: Option<&str>, out: &mut Objects) {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let what = describe(&value);
    let skip = |reason: String| SkippedDocument {
        location: format!("{location} ({what})"),
        reason,
    };
    match kind {
        "List" | "ServiceList" | "EndpointSliceList" | "NodeList" | "PodList" | "NamespaceList" => {
            match value.get("items") {
                Some(Value::Sequence(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        add_value(&format!("{location}.items[{i}]"), item.clone(), None, out);
                    }
                }
                _ => out.skipped.push(skip("a List without items".into())),
            }
        }
        "Service" => match read::<Kept<Service>>(value, text) {
            Ok(Kept(svc)) => out.services.push(svc),
            Err(e) => out.skipped.push(skip(format!("not a valid Service: {e}"))),
        },
        "EndpointSlice" => match read::<Kept<EndpointSlice>>(value, text) {
            Ok(Kept(slice)) => out.slices.push(slice),
            Err(e) => out
                .skipped
                .push(skip(format!("not a valid EndpointSlice: {e}"))),
        },
        "Node" => match yaml_serde::from_value::<Node>(value) {
            Ok(node) => out.nodes.push(node),
            Err(e) => out.skipped.push(skip(format!("not a valid Node: {e}"))),
        },
        "Pod" => match yaml_serde::from_value::<Pod>(value) {
            Ok(pod) => out.pods.push(super::pod_facts(&pod)),
            Err(e) => out.skipped.push(skip(format!("not a valid Pod: {e}"))),
        },
        "Namespace" => match yaml_serde::from_value::<Namespace>(value) {
            Ok(ns) => out.namespaces.push((
                ns.metadata.name.clone().unwrap_or_default(),
                super::sock_lb_setting(&ns.metadata),
            )),
            Err(e) => out
                .skipped
                .push(skip(format!("not a valid Namespace: {e}"))),
        },
        // Other kinds (Deployments, ConfigMaps, ...) may share the file; not ours.
        "" => out.skipped.push(skip("no kind".into())),
        _ => {}
    }
}

/// A `T` from the document's text if there is one, else from its value.
fn read<T: serde::de::DeserializeOwned>(
    value: Value,
    text: Option<&str>,
) -> Result<T, yaml_serde::Error> {
    match text {
        Some(text) => yaml_serde::from_str(text),
        None => yaml_serde::from_value(value),
    }
}

/// `Kind namespace/name`, as far as the document says.
fn describe(value: &Value) -> String {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("?").to_owned();
    let meta = value.get("metadata");
    format!(
        "{} {}/{}",
        s(value.get("kind")),
        meta.and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or("default"),
        s(meta.and_then(|m| m.get("name")))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_parses_a_chunk_at_a_time_and_numbers_documents_in_their_file() {
        let ok = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n";
        let mut docs = vec![ok; CHUNK + 1];
        docs.push(": : [unclosed\n");
        let path =
            std::env::temp_dir().join(format!("lb-agent-reader-{}.yaml", std::process::id()));
        fs::write(&path, docs.join("---\n")).unwrap();
        let mut reader = Reader::open(&path).unwrap();
        let first = reader.next_chunk().unwrap().unwrap();
        let second = reader.next_chunk().unwrap().unwrap();
        let end = reader.next_chunk().unwrap();
        fs::remove_file(&path).unwrap();
        assert_eq!(first.services.len(), CHUNK);
        assert!(first.skipped.is_empty());
        assert_eq!(second.services.len(), 1);
        let at = format!("{}#{}", path.display(), CHUNK + 1);
        assert_eq!(
            second
                .skipped
                .iter()
                .map(|s| s.location.as_str())
                .collect::<Vec<_>>(),
            [at.as_str()]
        );
        assert!(end.is_none());
    }

    #[test]
    fn broken_document_does_not_hide_its_neighbours() {
        let text = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n---\n: : [unclosed\n---\napiVersion: v1\nkind: Service\nmetadata: {name: b}\nspec: {clusterIP: 10.0.0.2, ports: [{port: 80}]}\n";
        let mut out = Objects::default();
        parse_into("t.yaml", text, &mut out);
        let names: Vec<_> = out
            .services
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(out.skipped.len(), 1);
        assert!(
            out.skipped[0].location.starts_with("t.yaml#1"),
            "{:?}",
            out.skipped
        );
    }

    #[test]
    fn a_deeply_nested_document_is_skipped_unparsed_and_its_neighbours_read() {
        // 40,000 levels under `kind: Service` took 9 s to reject when parsed.
        let deep = format!(
            "kind: Service\nspec: {}{}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let compact = format!("kind: Service\nspec:\n{}x", "- ".repeat(100_000));
        let ok = "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}\n";
        let text = format!("{deep}\n---\n{ok}---\n{compact}\n");
        let mut out = Objects::default();
        parse_into("d.yaml", &text, &mut out);
        assert_eq!(out.services.len(), 1);
        let skipped: Vec<(&str, &str)> = out
            .skipped
            .iter()
            .map(|s| (s.location.as_str(), s.reason.as_str()))
            .collect();
        let why = "nested deeper than 256 levels (not parsed)";
        assert_eq!(skipped, [("d.yaml#0", why), ("d.yaml#2", why)]);
    }

    #[test]
    fn a_document_reads_the_same_in_block_and_in_flow_style() {
        // Found by the file_source fuzz target: a label without a value,
        // which the fast path (block style) read as "" and the general path
        // (flow style, through a YAML value: null) refused.
        let block = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
                     metadata: {name: web-1, labels: {kubernetes.io/service-name: web, team}}\n\
                     addressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]\n";
        let flow = "{apiVersion: discovery.k8s.io/v1, kind: EndpointSlice,\n \
                    metadata: {name: web-1, labels: {kubernetes.io/service-name: web, team}},\n \
                    addressType: IPv4, endpoints: [{addresses: [10.0.0.1]}]}\n";
        let mut read = Vec::new();
        for text in [block, flow] {
            let mut out = Objects::default();
            parse_into("s.yaml", text, &mut out);
            assert!(out.skipped.is_empty(), "{text}: {:?}", out.skipped);
            read.push(out.slices);
        }
        assert_eq!(read[0], read[1]);
        let labels = read[0][0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("team").map(String::as_str), Some(""));
    }

    #[test]
    fn a_kind_line_inside_a_string_does_not_make_a_document_a_slice() {
        // Found by the file_source fuzz target: a document without a kind
        // whose multi-line quoted string has a `kind: EndpointSlice` line
        // at its first column was read as a slice by the fast path.
        let text = "metadata: {name: web-1}\nnote: 'a\nkind: EndpointSlice\nb'\n\
                    addressType: IPv4\nendpoints: [{addresses: [10.0.0.1]}]\n";
        assert_eq!(top_level_kind(text), Some("EndpointSlice"));
        let mut out = Objects::default();
        parse_into("k.yaml", text, &mut out);
        assert!(out.slices.is_empty(), "{:?}", out.slices);
        let skipped: Vec<_> = out.skipped.iter().map(|s| s.location.as_str()).collect();
        assert_eq!(skipped, ["k.yaml#0 (? default/web-1)"]);
    }

    #[test]
    fn list_is_unpacked_and_bad_item_named() {
        let text = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"ok"},"spec":{"clusterIP":"10.0.0.1"}},
            {"apiVersion":"v1","kind":"Service","metadata":{"name":"bad","namespace":"ns"},"spec":{"ports":"nope"}}]}"#;
        let mut out = Objects::default();
        parse_into("l.json", text, &mut out);
        assert_eq!(out.services.len(), 1);
        assert_eq!(out.skipped.len(), 1);
        assert!(
            out.skipped[0].location.contains("Service ns/bad"),
            "{:?}",
            out.skipped
        );
    }

    #[test]
    fn fast_path_reads_block_documents_and_leaves_errors_to_the_general_path() {
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s\n  \
                    ownerReferences:\n  - {apiVersion: v1, kind: Service, name: a, uid: u}\n\
                    addressType: IPv4\nendpoints: []\n---\n\
                    apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  ports: nope\n";
        assert_eq!(
            top_level_kind(text.split("---").next().unwrap()),
            Some("EndpointSlice")
        );
        let mut out = Objects::default();
        parse_into("f.yaml", text, &mut out);
        assert_eq!(out.slices.len(), 1);
        assert_eq!(out.services.len(), 0);
        assert_eq!(out.skipped.len(), 1, "{:?}", out.skipped);
        assert!(
            out.skipped[0]
                .location
                .starts_with("f.yaml#1 (Service default/bad)"),
            "{:?}",
            out.skipped
        );
        assert!(
            out.skipped[0].reason.starts_with("not a valid Service"),
            "{:?}",
            out.skipped
        );
    }

    #[test]
    fn large_files_keep_document_order_and_numbers() {
        let n = PARALLEL_FROM * 3 + 7;
        let broken = n - 2;
        let docs: Vec<String> = (0..n)
            .map(|i| {
                if i == broken {
                    ": : [unclosed\n".to_owned()
                } else {
                    format!(
                        "apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}}}\n\
                         spec: {{clusterIP: 10.0.0.1, ports: [{{port: 80}}]}}\n"
                    )
                }
            })
            .collect();
        let mut out = Objects::default();
        parse_into("big.yaml", &docs.join("---\n"), &mut out);
        let names: Vec<String> = out
            .services
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        let want: Vec<String> = (0..n)
            .filter(|i| *i != broken)
            .map(|i| format!("s{i}"))
            .collect();
        assert_eq!(names, want);
        assert_eq!(out.skipped.len(), 1);
        assert_eq!(out.skipped[0].location, format!("big.yaml#{broken}"));
    }
}
