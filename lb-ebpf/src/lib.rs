//! The datapath library shared by every hook family: the pinned maps,
//! frontend lookup and backend selection, and the counters. The program
//! entry points live in the binary (`main.rs`), one file per hook family.
#![no_std]

pub mod lb;
pub mod maps;
pub mod stats;
