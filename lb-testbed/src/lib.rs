//! A bed for running the agent's tc and XDP programs on crafted packets
//! through `BPF_PROG_TEST_RUN` ([`bed`]), IPv6 packet builders and
//! checkers ([`packets6`]), and the network namespace the XDP program's
//! FIB lookups run in ([`fib_netns`]). Shared by lb-agent's `tc_*` and
//! `xdp_programs` tests and its `tc_cost` bench. Needs root.

pub mod bed;
pub mod fib_netns;
pub mod packets6;
