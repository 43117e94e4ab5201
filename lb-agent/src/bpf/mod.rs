//! Everything that touches the kernel's BPF objects.

pub mod cgroup;
pub mod loader;
pub mod pins;
pub mod store;
