//! Everything that touches the kernel's BPF objects.

mod batch;
pub mod cgroup;
pub mod loader;
pub mod pins;
pub mod store;
