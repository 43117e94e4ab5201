//! Where the sync loop's changes come from: the apiserver's watch
//! streams, or the files, polled.

use std::{sync::Arc, time::Instant};

use futures::{StreamExt as _, stream::BoxStream};
use tracing::{info, warn};

use super::{
    Change, ListKind, NodeFacts, Source,
    file_poll::FilePoll,
    kube::{self, KubeError},
};
use crate::shared::Shared;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Connecting to the apiserver.
    #[error(transparent)]
    Connect(#[from] KubeError),
    #[error("the watch streams ended")]
    WatchEnded,
}

/// The configured source, opened.
pub enum Changes {
    Kube {
        events: BoxStream<'static, kube::Event>,
        /// What the model has of the Node (`None` until one arrives: the
        /// first always goes to the model, which waits for it): a Node
        /// update that leaves it (taints, heartbeats) is no change for the
        /// model.
        node: Option<NodeFacts>,
        /// The apiserver refuses to list every Node, as it said last
        /// (logged once until it lists them again).
        nodes_refused: bool,
        shared: Arc<Shared>,
    },
    File {
        poll: FilePoll,
        shared: Arc<Shared>,
    },
}

impl Changes {
    /// Connects to the apiserver and starts the watches, or starts
    /// polling the files, for the node `node_name`.
    /// `all_pods`: every Pod of the node is watched, not only those
    /// labelled to opt out.
    pub async fn open(
        source: &Source,
        node_name: &str,
        all_pods: bool,
        shared: Arc<Shared>,
    ) -> Result<Self, SourceError> {
        Ok(match source {
            Source::Kube { kubeconfig, master } => {
                let client = kube::client(
                    kubeconfig.as_deref(),
                    master.as_deref(),
                    shared.metrics.rest_client_requests.clone(),
                )
                .await?;
                info!(node = %node_name, "watching Services, EndpointSlices, this Node, every Node's networks, this node's Pods and every Namespace");
                Self::Kube {
                    events: kube::watch(client, node_name, all_pods),
                    node: None,
                    nodes_refused: false,
                    shared,
                }
            }
            Source::File(path) => Self::File {
                poll: FilePoll::new(path.clone(), node_name.to_owned()),
                shared,
            },
        })
    }

    /// The next changes, each with the moment it was read. Cancel-safe:
    /// it only waits on the stream or the poll timer.
    pub async fn next(&mut self) -> Result<Vec<(Change, Instant)>, SourceError> {
        match self {
            Self::Kube {
                events,
                node,
                nodes_refused,
                shared,
            } => loop {
                match events.next().await {
                    Some(kube::Event::Change(c)) => {
                        // Pending from here: a sync thread that stops
                        // keeping up shows on /healthz.
                        shared.health.queued();
                        return Ok(vec![(c, Instant::now())]);
                    }
                    Some(kube::Event::Node { eligible, facts }) => {
                        shared.health.set_node_eligible(eligible);
                        if node.as_ref() != Some(&facts) {
                            *node = Some(facts.clone());
                            shared.health.queued();
                            return Ok(vec![(Change::Node(facts), Instant::now())]);
                        }
                    }
                    // Not a change to write: nothing is pending.
                    Some(kube::Event::NodeRefused(why)) => {
                        return Ok(vec![(Change::NodeRefused(why), Instant::now())]);
                    }
                    Some(kube::Event::NodeDeleted) => shared.health.set_node_eligible(false),
                    // Pending only if the model finds that it changes
                    // something (the syncer says so).
                    Some(kube::Event::Networks(c)) => {
                        if *nodes_refused && matches!(c, Change::Listed(ListKind::Nodes)) {
                            *nodes_refused = false;
                            info!("the Nodes are listed now, with their addresses and pod CIDRs");
                        }
                        return Ok(vec![(c, Instant::now())]);
                    }
                    Some(kube::Event::NodesRefused(why)) => {
                        shared.metrics.node_list_refused.inc();
                        if !*nodes_refused {
                            *nodes_refused = true;
                            warn!(
                                "the Nodes cannot be listed ({why}); going on without their \
                                 addresses and pod CIDRs: a DSR flow from a node to a backend on \
                                 that same node is SNATed only if its client is itself an \
                                 endpoint of a DSR Service, and is lost otherwise (retrying with \
                                 backoff; logged again once they are listed)"
                            );
                        }
                    }
                    None => return Err(SourceError::WatchEnded),
                }
            },
            Self::File { poll, shared } => Ok(poll.next(shared).await),
        }
    }
}
