//! The datapath library shared by every hook. At ground level, what needs
//! no map: addresses (`addr`), checksum arithmetic (`csum`), atomic
//! swaps (`atomic`), the clock (`clock`), verdicts (`verdict`) and the
//! packet-context trait (`ctx`); then the pinned maps (`maps`) and the counters (`stats`);
//! then each address family's maps and types (`family`), frontend lookup
//! and backend selection (`lb`), the socket hooks' translation (`sock`),
//! and the per-packet code of traffic from outside the node: packet
//! parsing and rewriting (`packet`), connection tracking and SNAT (`ct`),
//! the NodePort logic (`nodeport`), direct server return (`dsr`), FIB
//! lookups (`fib`) and rejects and ICMP answers (`reject`), and the XDP
//! fast path over them (`xdp`), which sends the flows it forwarded with
//! one lookup (`flow_cache`). The program entry points live in the binary
//! (`programs/`), one file per hook family.
#![no_std]
// `atomic_cxchg`: the BPF target has no compare-and-swap in `core::sync`
// (`atomic-cas` is off in its spec), but the kernel has BPF_CMPXCHG.
#![feature(core_intrinsics)]
#![expect(internal_features, reason = "core_intrinsics, for atomic_cxchg")]

pub mod addr;
pub mod atomic;
pub mod clock;
pub mod csum;
pub mod ct;
pub mod ctx;
pub mod dsr;
pub mod family;
pub mod fib;
pub mod flow_cache;
pub mod lb;
pub mod maps;
pub mod nodeport;
pub mod packet;
pub mod reject;
pub mod sock;
pub mod stats;
pub mod verdict;
pub mod xdp;
