//! What the fuzz targets share: the per-packet programs' world for
//! `packet_programs` (the tc tests' bed, frames from structured input, the
//! invariants checked after each frame).

#[path = "../../lb-agent/tests/tc/bed.rs"]
#[expect(
    dead_code,
    reason = "the bed serves the tc tests; the fuzzer uses part of it"
)]
#[expect(
    unsafe_code,
    reason = "the bed's raw BPF_PROG_TEST_RUN call and CPU pinning, each with its SAFETY"
)]
mod bed;
#[path = "../../lb-agent/tests/tc/fib_netns.rs"]
#[expect(dead_code, reason = "the fuzzer enters the namespace for good")]
mod fib_netns;
#[path = "../../lb-agent/tests/tc/packets6.rs"]
#[expect(
    dead_code,
    reason = "the builders serve the tc tests; the fuzzer uses part of them"
)]
mod packets6;

pub mod packet_check;
pub mod packet_frame;
pub mod packet_seeds;
pub mod packet_world;
