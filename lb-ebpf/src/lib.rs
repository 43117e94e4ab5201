//! The datapath library shared by every hook family: the pinned maps,
//! frontend lookup and backend selection, the counters, and the tc
//! programs' packet rewriting and connection tracking. The program
//! entry points live in the binary (`main.rs`), one file per hook family.
#![no_std]

pub mod ct;
pub mod lb;
pub mod maps;
pub mod packet;
pub mod reject;
pub mod stats;
