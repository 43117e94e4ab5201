//! The node agent: sources -> pure model -> reconciler -> pinned BPF maps.

pub mod agent;
mod bpf_sys;
pub mod cli;
pub mod config;
pub mod datapath;
pub mod dump;
pub mod fd_limit;
pub mod health;
pub mod http;
pub mod log_budget;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod reconcile;
pub mod service_health;
pub mod shared;
pub mod sockets;
pub mod source;
pub mod syncer;
#[cfg(test)]
mod test_rng;
