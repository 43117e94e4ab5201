//! Destroys connected UDP sockets that the load balancer sent to a backend
//! that stopped serving: kube-proxy flushes conntrack entries so clients
//! move on, but `connect4` translated these sockets once, at `connect()`,
//! and they would keep sending to the old backend. A destroyed socket is
//! disconnected: its next receive fails with `ECONNABORTED`, its sends with
//! `EDESTADDRREQ`, and the application reconnects (through `connect4`
//! again, to a serving backend).
//!
//! A pass dumps the connected UDP sockets, IPv4 and IPv6, of every network
//! namespace on the node (`diag.rs`, NETLINK_SOCK_DIAG), finds the frontend
//! each one was sent through in its socket storage, which the
//! `lb_iter_udp` iterator reads (`iter.rs`), or else in `LB4_REVNAT` or
//! `LB6_REVNAT` by socket cookie and backend (`revnat.rs`; a v4-mapped
//! peer is IPv4), and destroys
//! those sent through a frontend the request names (`request.rs`) to a
//! backend that frontend does not serve when the pass gets to them
//! (`serving.rs`, kept by the sync loop). Namespaces (`netns.rs`) are
//! entered with `setns` on a thread that exists for that pass only
//! (`scan.rs`); [`SocketReaper`] runs passes in the background.
//!
//! Unconnected sockets (`sendto` through `sendmsg4`) are translated per
//! datagram and need nothing.

mod diag;
mod iter;
mod netns;
pub mod pods;
mod reaper;
mod request;
mod revnat;
mod scan;
mod serving;

#[cfg(test)]
mod privileged;

use std::{io, path::PathBuf};

pub use diag::DiagError;
pub use iter::UdpIter;
pub use netns::{DEFAULT_NETNS_DIR, NetnsSources};
pub use reaper::SocketReaper;
pub use request::StaleUdp;
pub use scan::{Report, destroy_stale};
pub use serving::{Serving, UdpServing};

#[derive(Debug, thiserror::Error)]
pub enum SocketsError {
    #[error("opening the reverse-NAT map pinned at {path}")]
    RevNat {
        path: PathBuf,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("looking a socket up in the reverse-NAT map")]
    Lookup(#[source] aya::maps::MapError),
    #[error("listing network namespaces in {path}")]
    List {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("entering network namespace {path}")]
    Enter {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("dumping the UDP sockets of network namespace {path}")]
    Diag {
        path: PathBuf,
        #[source]
        source: DiagError,
    },
    #[error("destroying a UDP socket in network namespace {path}")]
    Destroy {
        path: PathBuf,
        #[source]
        source: DiagError,
    },
    #[error("reading the UDP socket iterator in network namespace {path}")]
    Iter {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("starting the socket scan thread")]
    Thread(#[source] io::Error),
    #[error("asking the kernel's route netlink")]
    Netlink(#[source] io::Error),
    #[error("the socket reaper thread has stopped")]
    ReaperStopped,
}
