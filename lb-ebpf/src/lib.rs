//! The datapath library shared by every hook family: the pinned maps,
//! frontend lookup and backend selection, the counters, and the tc
//! programs' packet rewriting and connection tracking. The program
//! entry points live in the binary (`main.rs`), one file per hook family.
#![no_std]
// `atomic_cxchg`: the BPF target has no compare-and-swap in `core::sync`
// (`atomic-cas` is off in its spec), but the kernel has BPF_CMPXCHG.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for atomic_cxchg")]

pub mod ct;
pub mod lb;
pub mod maps;
pub mod packet;
pub mod reject;
pub mod stats;
