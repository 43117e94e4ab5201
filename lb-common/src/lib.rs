//! Map key/value types shared by the eBPF programs and the agent.
//!
//! Every type is `#[repr(C)]` with explicit `_pad` fields, holds no `bool`,
//! `Option` or enum, and carries a compile-time size assert, so that both
//! sides agree on the layout byte for byte. Addresses and ports are stored in
//! network byte order; fields say so with a `_be` suffix. Addresses are byte
//! arrays so that `bpftool map dump` prints them readably.
//!
//! IPv4 maps come first. IPv6 maps will be parallel `*6` maps whose keys hold
//! `[u8; 16]` addresses; the value types ([`ServiceValue`], and backends with
//! a wider address) keep their shape.
#![no_std]

mod maps;
mod types;

pub use maps::*;
pub use types::*;
