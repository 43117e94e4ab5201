//! `--from-file`: the file (or directory) polled for edits, each edit read
//! into the complete set of objects, streamed to the model a chunk of
//! documents at a time as an apiserver relist is.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::time::{Interval, MissedTickBehavior};
use tracing::{error, warn};

use super::{Change, ListKind, NodeFacts, NodeNetworks, file};
use crate::shared::Shared;

/// How often the source files are checked for edits.
const FILE_POLL: Duration = Duration::from_millis(200);

/// The files, and what was last read of them.
pub struct FilePoll {
    path: PathBuf,
    poll: Interval,
    seen: Option<file::Fingerprint>,
    /// The files may hold this node's Node, for its zone label and
    /// addresses.
    node_name: String,
    /// The edit being read (boxed: the source enum stays small).
    reading: Option<Box<Reading>>,
}

/// An edit being read: the rest of its documents, and this node's Node if
/// seen yet. Each change carries the moment its chunk was parsed; the
/// oldest, the edit's beginning, dates the sync that writes them.
struct Reading {
    reader: file::Reader,
    node: Option<NodeFacts>,
}

impl FilePoll {
    /// Must be called within a tokio runtime.
    pub fn new(path: PathBuf, node_name: String) -> Self {
        let mut poll = tokio::time::interval(FILE_POLL);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            path,
            poll,
            seen: None,
            node_name,
            reading: None,
        }
    }

    /// The next changes of an edit: its beginning (a relist of every
    /// kind), then each chunk's Services, EndpointSlices and Nodes' networks,
    /// then its end with this node's Node. A file that cannot be read keeps what the
    /// model has (a half-written file is retried on the next edit; nothing
    /// is deleted without a complete read); malformed documents are skipped
    /// and counted. Cancel-safe: it only waits on the poll timer.
    pub async fn next(&mut self, shared: &Shared) -> Vec<(Change, Instant)> {
        loop {
            if let Some(r) = &mut self.reading {
                match r.reader.next_chunk() {
                    Ok(Some(objects)) => {
                        shared.health.queued();
                        let read = Instant::now();
                        return chunk_changes(objects, &self.node_name, &mut r.node, shared, read);
                    }
                    Ok(None) => {
                        let node = r.node.take();
                        self.reading = None;
                        shared.health.queued();
                        return end(node, Instant::now());
                    }
                    Err(e) => {
                        self.reading = None;
                        error!(
                            error = &e as &dyn std::error::Error,
                            "keeping the current state"
                        );
                    }
                }
            }
            self.poll.tick().await;
            let now = file::fingerprint(&self.path);
            if self.seen.as_ref() == Some(&now) {
                continue;
            }
            self.seen = Some(now);
            match file::Reader::open(&self.path) {
                Ok(reader) => {
                    self.reading = Some(Box::new(Reading { reader, node: None }));
                    return begin(Instant::now());
                }
                Err(e) => error!(
                    error = &e as &dyn std::error::Error,
                    "keeping the current state"
                ),
            }
        }
    }
}

/// A whole read of `objects` at `read`, as [`FilePoll::next`] hands it
/// over in one chunk.
pub fn changes(
    objects: file::Objects,
    node_name: &str,
    shared: &Shared,
    read: Instant,
) -> Vec<(Change, Instant)> {
    let mut node = None;
    let mut all = begin(read);
    all.extend(chunk_changes(objects, node_name, &mut node, shared, read));
    all.extend(end(node, read));
    all
}

/// The beginning of an edit: a relist of every kind.
fn begin(read: Instant) -> Vec<(Change, Instant)> {
    vec![
        (Change::Relist(ListKind::Services), read),
        (Change::Relist(ListKind::Slices), read),
        (Change::Relist(ListKind::Nodes), read),
        (Change::Relist(ListKind::Pods), read),
        (Change::Relist(ListKind::Namespaces), read),
    ]
}

/// The end of an edit: every list complete, and this node's Node (empty
/// if the files do not hold it).
fn end(node: Option<NodeFacts>, read: Instant) -> Vec<(Change, Instant)> {
    vec![
        (Change::Listed(ListKind::Services), read),
        (Change::Listed(ListKind::Slices), read),
        (Change::Listed(ListKind::Nodes), read),
        (Change::Listed(ListKind::Pods), read),
        (Change::Listed(ListKind::Namespaces), read),
        (Change::Node(node.unwrap_or_default()), read),
    ]
}

/// The Services, slices and Nodes' networks of one chunk, read at `read`;
/// its skipped documents are logged and counted, and this node's Node
/// (`node_name`), if it holds it, kept in `node` for the end of the edit.
fn chunk_changes(
    objects: file::Objects,
    node_name: &str,
    node: &mut Option<NodeFacts>,
    shared: &Shared,
    read: Instant,
) -> Vec<(Change, Instant)> {
    for s in &objects.skipped {
        warn!(document = %s.location, "skipping malformed document: {}", s.reason);
        shared.metrics.skipped_documents.inc();
    }
    if let Some(n) = objects
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name))
    {
        *node = Some(NodeFacts::of(n));
    }
    let services = objects
        .services
        .into_iter()
        .map(|s| (Change::Service(Box::new(s)), read));
    let slices = objects
        .slices
        .into_iter()
        .map(|s| (Change::Slice(Box::new(s)), read));
    let networks = objects
        .nodes
        .iter()
        .filter(|n| n.metadata.name.is_some())
        .map(|n| (Change::NodeNetworks(NodeNetworks::of(n)), read));
    let pods = objects
        .pods
        .into_iter()
        .filter(|p| p.node_name == node_name)
        .map(|p| (Change::Pod(p), read));
    let namespaces = objects
        .namespaces
        .into_iter()
        .map(|(name, setting)| (Change::Namespace { name, setting }, read));
    services
        .chain(slices)
        .chain(networks)
        .chain(pods)
        .chain(namespaces)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::{fs, path::Path};

    use super::*;
    use crate::model::sock_lb::{Setting, SockLb};

    const OBJECTS: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, protocol: TCP}]}
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {topology.kubernetes.io/zone: zone-b}}
status: {addresses: [{type: InternalIP, address: 192.168.0.2}]}
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {topology.kubernetes.io/zone: zone-a}}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: broken, namespace: default}
spec: {ports: nope}
---
apiVersion: v1
kind: Namespace
metadata: {name: mesh, labels: {lb-agent.io/socket-lb: disabled}}
---
apiVersion: v1
kind: Pod
metadata: {name: here, namespace: mesh}
spec: {nodeName: node-a, containers: [{name: c}]}
status: {podIPs: [{ip: 10.244.0.7}]}
---
apiVersion: v1
kind: Pod
metadata: {name: there, namespace: mesh}
spec: {nodeName: node-b, containers: [{name: c}]}
";

    /// A file of its own for one test, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "lb-agent-file-poll-{}-{name}.yaml",
                std::process::id()
            ));
            fs::write(&path, text).unwrap();
            Self(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }

    /// Every change of the next edit, up to and with its Node.
    async fn edit(poll: &mut FilePoll, shared: &Shared) -> Vec<Change> {
        let mut all = Vec::new();
        loop {
            let batch = poll.next(shared).await;
            let done = batch.iter().any(|(c, _)| matches!(c, Change::Node(_)));
            all.extend(batch.into_iter().map(|(c, _)| c));
            if done {
                return all;
            }
        }
    }

    fn service_names(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .filter_map(|c| match c {
                Change::Service(s) => s.metadata.name.clone(),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn an_edit_is_a_relist_of_both_kinds_ending_with_this_nodes_node() {
        let file = TempFile::new("whole", OBJECTS);
        let shared = Shared::default();
        let mut poll = FilePoll::new(file.path().to_owned(), "node-a".into());
        let got = edit(&mut poll, &shared).await;
        let [
            Change::Relist(ListKind::Services),
            Change::Relist(ListKind::Slices),
            Change::Relist(ListKind::Nodes),
            Change::Relist(ListKind::Pods),
            Change::Relist(ListKind::Namespaces),
            Change::Service(web),
            Change::NodeNetworks(b),
            Change::NodeNetworks(a),
            Change::Pod(pod),
            Change::Namespace { name, setting },
            Change::Listed(ListKind::Services),
            Change::Listed(ListKind::Slices),
            Change::Listed(ListKind::Nodes),
            Change::Listed(ListKind::Pods),
            Change::Listed(ListKind::Namespaces),
            Change::Node(node),
        ] = got.as_slice()
        else {
            panic!("not one whole edit: {got:?}");
        };
        assert_eq!(web.metadata.name.as_deref(), Some("web"));
        // This node's Pods only, and every Namespace.
        assert_eq!(pod.pod.to_string(), "mesh/here");
        assert_eq!(pod.ips, ["10.244.0.7".parse::<std::net::IpAddr>().unwrap()]);
        assert_eq!(
            (name.as_str(), setting),
            ("mesh", &Setting::Set(SockLb::Disabled))
        );
        // Every Node's networks, this node's too.
        assert_eq!((a.name.as_str(), b.name.as_str()), ("node-a", "node-b"));
        assert_eq!(
            b.addresses,
            ["192.168.0.2".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(node.zone.as_deref(), Some("zone-a"));
        assert_eq!(
            node.primary_ips,
            ["192.168.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_this_nodes_node_the_node_is_empty() {
        let file = TempFile::new("other", OBJECTS);
        let mut poll = FilePoll::new(file.path().to_owned(), "node-c".into());
        let got = edit(&mut poll, &Shared::default()).await;
        assert!(matches!(got.last(), Some(Change::Node(n)) if *n == NodeFacts::default()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_file_comes_a_chunk_at_a_time() {
        let doc = |i: usize| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: default}}\n\
                 spec: {{clusterIP: 10.96.{}.{}, ports: [{{port: 80}}]}}\n",
                i / 256,
                i % 256
            )
        };
        let mut docs: Vec<String> = (0..file::CHUNK + 1).map(doc).collect();
        docs.push("kind: Service\nspec: {ports: nope}\n".into());
        let file = TempFile::new("large", &docs.join("---\n"));
        let shared = Shared::default();
        let mut poll = FilePoll::new(file.path().to_owned(), "node-a".into());
        assert_eq!(poll.next(&shared).await.len(), 5, "the relists");
        assert_eq!(poll.next(&shared).await.len(), file::CHUNK);
        let rest = poll.next(&shared).await;
        let rest: Vec<Change> = rest.into_iter().map(|(c, _)| c).collect();
        assert_eq!(service_names(&rest), [format!("s{}", file::CHUNK)]);
        assert_eq!(shared.metrics.skipped_documents.get(), 1);
        assert!(matches!(
            poll.next(&shared).await[0].0,
            Change::Listed(ListKind::Services)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn each_edit_is_read_once_and_malformed_documents_are_counted() {
        let file = TempFile::new("edits", OBJECTS);
        let shared = Shared::default();
        let mut poll = FilePoll::new(file.path().to_owned(), "node-a".into());
        let first = edit(&mut poll, &shared).await;
        assert_eq!(service_names(&first), ["web"]);
        assert_eq!(shared.metrics.skipped_documents.get(), 1);
        // No edit: nothing for as long as it polls.
        let idle = tokio::time::timeout(FILE_POLL * 5, poll.next(&shared)).await;
        assert!(idle.is_err(), "an unedited file was read again");
        fs::write(file.path(), OBJECTS.replace("10.96.0.10", "10.96.0.100")).unwrap();
        let second = edit(&mut poll, &shared).await;
        assert_eq!(service_names(&second), ["web"]);
        assert_eq!(shared.metrics.skipped_documents.get(), 2);
    }
}
