//! `--from-file`: the file (or directory) polled for edits, each edit read
//! whole into the complete set of objects.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use tokio::time::{Interval, MissedTickBehavior};
use tracing::{error, warn};

use super::{Change, NodeFacts, file};
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
        }
    }

    /// The changes of the next edit: every Service, every EndpointSlice
    /// and this node's Node, read at one moment. A file that cannot be
    /// read keeps the last programmed state (a half-written file is
    /// retried on the next edit); malformed documents are skipped and
    /// counted. Cancel-safe: it only waits on the poll timer.
    pub async fn next(&mut self, shared: &Shared) -> Vec<(Change, Instant)> {
        loop {
            self.poll.tick().await;
            let now = file::fingerprint(&self.path);
            if self.seen.as_ref() == Some(&now) {
                continue;
            }
            self.seen = Some(now);
            match file::load(&self.path) {
                Ok(objects) => {
                    shared.health.queued();
                    return changes(objects, &self.node_name, shared, Instant::now());
                }
                Err(e) => error!(
                    error = &e as &dyn std::error::Error,
                    "keeping the current state"
                ),
            }
        }
    }
}

/// The complete state `objects` holds, as read at `read`, with this
/// node's Node (`node_name`); its skipped documents are logged and counted.
pub fn changes(
    objects: file::Objects,
    node_name: &str,
    shared: &Shared,
    read: Instant,
) -> Vec<(Change, Instant)> {
    for s in &objects.skipped {
        warn!(document = %s.location, "skipping malformed document: {}", s.reason);
        shared.metrics.skipped_documents.inc();
    }
    let node = objects
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name))
        .map(NodeFacts::of)
        .unwrap_or_default();
    vec![
        (Change::AllServices(objects.services), read),
        (Change::AllSlices(objects.slices), read),
        (Change::Node(node), read),
    ]
}

#[cfg(test)]
mod tests {
    use std::{fs, path::Path};

    use super::*;

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

    #[test]
    fn an_edit_is_the_whole_state_with_this_nodes_node() {
        let file = TempFile::new("whole", OBJECTS);
        let objects = file::load(file.path()).unwrap();
        let read = Instant::now();
        let got = changes(objects, "node-a", &Shared::default(), read);
        let [
            (Change::AllServices(services), t1),
            (Change::AllSlices(slices), t2),
            (Change::Node(node), t3),
        ] = got.as_slice()
        else {
            panic!("not the whole state: {got:?}");
        };
        assert_eq!(services.len(), 1);
        assert!(slices.is_empty());
        assert_eq!(node.zone.as_deref(), Some("zone-a"));
        assert_eq!(
            node.primary_ips,
            ["192.168.0.1".parse::<std::net::IpAddr>().unwrap()]
        );
        assert!([t1, t2, t3].iter().all(|t| **t == read));
    }

    #[test]
    fn without_this_nodes_node_the_node_is_empty() {
        let file = TempFile::new("other", OBJECTS);
        let objects = file::load(file.path()).unwrap();
        let got = changes(objects, "node-c", &Shared::default(), Instant::now());
        assert!(matches!(&got[2], (Change::Node(n), _) if *n == NodeFacts::default()));
    }

    #[tokio::test(start_paused = true)]
    async fn each_edit_is_read_once_and_malformed_documents_are_counted() {
        let file = TempFile::new("edits", OBJECTS);
        let shared = Shared::default();
        let mut poll = FilePoll::new(file.path().to_owned(), "node-a".into());
        let first = poll.next(&shared).await;
        assert_eq!(first.len(), 3);
        assert_eq!(shared.metrics.skipped_documents.get(), 1);
        // No edit: nothing for as long as it polls.
        let idle = tokio::time::timeout(FILE_POLL * 5, poll.next(&shared)).await;
        assert!(idle.is_err(), "an unedited file was read again");
        fs::write(file.path(), OBJECTS.replace("10.96.0.10", "10.96.0.100")).unwrap();
        let second = poll.next(&shared).await;
        assert!(matches!(&second[0], (Change::AllServices(s), _) if s.len() == 1));
        assert_eq!(shared.metrics.skipped_documents.get(), 2);
    }
}
