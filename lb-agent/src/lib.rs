//! The node agent: sources -> pure model -> reconciler -> pinned BPF maps.

pub mod bpf;
pub mod dump;
pub mod model;
pub mod reconcile;
pub mod source;
