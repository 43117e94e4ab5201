//! The datapath library shared by every hook, in layers that import only
//! those below them. Ground level, what needs no family: addresses
//! (`addr`), checksum arithmetic (`csum`), atomic swaps (`atomic`), the
//! clock (`clock`), verdicts (`verdict`), the packet-context trait
//! (`ctx`), the pinned maps (`maps`), the counters (`stats`) and what
//! XDP tells tc in a packet's metadata (`meta`). Then the
//! concerns, each declaring the trait of what it needs of a family:
//! packet parsing and rewriting (`packet`), frontend lookup and backend
//! selection (`lb`), connection tracking and SNAT (`ct`), rejects and ICMP
//! answers (`reject`), direct server return (`dsr`), FIB lookups (`fib`)
//! and the XDP per-flow cache (`flow_cache`). Then the family bindings
//! (`family`) and the hand-off of a parsed packet to its family
//! (`dispatch`). Then the state machines: the NodePort logic
//! (`nodeport`), the XDP fast path over it (`xdp`) and the socket hooks'
//! translation (`sock`). The program entry points live in the binary
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
pub mod dispatch;
pub mod dsr;
pub mod family;
pub mod fib;
pub mod flow_cache;
pub mod lb;
pub mod maps;
pub mod meta;
pub mod nodeport;
pub mod packet;
pub mod reject;
pub mod sock;
pub mod stats;
pub mod verdict;
pub mod xdp;
