//! The family bindings: each address family's maps bound to the traits
//! the concerns below declare for what they need ([`LbMaps`] for the
//! lookup, [`CtMaps`] for connection tracking, [`RejectMaps`] for
//! rejects), and [`Family`], which gathers them with what only the
//! NodePort logic needs, for [`V4`] (the `LB4_*` maps) and [`V6`]
//! (`LB6_*`). The lookup (`lb`), the connection tracking (`ct`) and the
//! NodePort logic (`nodeport`) are written once over these traits.

use aya_ebpf::btf_maps::{Array, HashMap, LpmTrie, LruHashMap, lpm_trie::Key};
use lb_common::{
    AffinityKey, AffinityValue, Backend, DEFAULT_DSR_EPS_MAX, DEFAULT_NODE_NETS_MAX,
    DEFAULT_SOURCE_RANGES_MAX, DatapathConfig, DsrEndpointKey, FrontendId, FrontendKey,
    FrontendState, MaglevChunk, MaglevKey, Member, MemberKey, NodeNet, REJECTS_MAX, RejectBucket,
    SOURCE_RANGE_PREFIX, SOURCE_RANGE6_PREFIX, Slot, SlotKey, SourceRange, addr_bit4, addr_bit6,
};

use crate::{
    addr::{Addr6, bytes6, words6},
    ct::{CtMap, CtMaps, CtPrev, NatMap, NatPrev},
    flow_cache::Cached,
    lb::LbMaps,
    maps::{
        AFFINITY_MAX, BACKENDS_MAX, FE_STATE_MAX, FRONTENDS_MAX, LB4_AFFINITY, LB4_BACKENDS,
        LB4_CT, LB4_CT_PREV, LB4_DSR_EPS, LB4_FE_STATE, LB4_FRONTENDS, LB4_MAGLEV, LB4_MEMBERS,
        LB4_NAT, LB4_NAT_PREV, LB4_NODE_NETS, LB4_REJECTS, LB4_SLOTS, LB4_SRC_RANGES, LB6_AFFINITY,
        LB6_BACKENDS, LB6_CT, LB6_CT_PREV, LB6_DSR_EPS, LB6_FE_STATE, LB6_FRONTENDS, LB6_MAGLEV,
        LB6_MEMBERS, LB6_NAT, LB6_NAT_PREV, LB6_NODE_NETS, LB6_REJECTS, LB6_SLOTS, LB6_SRC_RANGES,
        MAGLEV_MAX, NO_PREALLOC, SLOTS_MAX,
    },
    packet::Ip,
    reject::{Answer, RejectMaps},
};

const RANGES_MAX: usize = DEFAULT_SOURCE_RANGES_MAX as usize;
const REJECT_MAX: usize = REJECTS_MAX as usize;
const DSR_EPS_MAX: usize = DEFAULT_DSR_EPS_MAX as usize;
const NODE_NETS_MAX: usize = DEFAULT_NODE_NETS_MAX as usize;

/// An address family: every concern's maps, of one address type, and what
/// the NodePort logic alone needs.
pub trait Family:
    LbMaps<LbAddr = <Self as Family>::Addr>
    + CtMaps<CtAddr = <Self as Family>::Addr>
    + RejectMaps<RejectAddr = <Self as Family>::Addr>
{
    /// An address as packets hold it.
    type Addr: Ip + Answer + Cached;

    fn src_ranges() -> &'static LpmTrie<SourceRange<Self::Addr>, u32, RANGES_MAX>;
    /// The endpoints on this node of DSR frontends.
    fn dsr_eps() -> &'static HashMap<DsrEndpointKey<Self::Addr>, u32, DSR_EPS_MAX, NO_PREALLOC>;
    /// Which node an address belongs to.
    fn node_nets() -> &'static LpmTrie<Self::Addr, NodeNet, NODE_NETS_MAX>;
    /// Bits of a source-range key before the source address.
    const SOURCE_RANGE_PREFIX: u32;
    /// The node address flows of this family are SNATed to; all zero for
    /// none.
    fn snat(cfg: &DatapathConfig) -> Self::Addr;
    /// A client address as session affinity names it (the external
    /// frontend has an id of its own, so no socket client shares these).
    fn affinity_client(addr: &Self::Addr) -> u64;
    /// The address's bit in `LB_ADDRS`: (word, mask).
    fn addr_bit(addr: &Self::Addr) -> (u32, u64);

    /// Whether `src` is in one of the source ranges of the frontend `key`
    /// (its address, port and protocol; `LB4_SRC_RANGES`). A frontend
    /// with `FE_F_SOURCE_RANGES` but no entry yet (the agent writes the
    /// state first) admits nobody: the firewall fails closed.
    #[inline(always)]
    fn in_source_ranges(key: &FrontendKey<Self::Addr>, src: Self::Addr) -> bool {
        let range = Key::new(
            Self::SOURCE_RANGE_PREFIX + 8 * size_of::<Self::Addr>() as u32,
            SourceRange {
                addr_be: key.addr_be,
                port_be: key.port_be,
                proto: key.proto,
                _pad0: 0,
                src_be: src,
            },
        );
        Self::src_ranges().get(&range).is_some()
    }
}

/// IPv4: the `LB4_*` maps.
pub enum V4 {}
/// IPv6: the `LB6_*` maps.
pub enum V6 {}

/// Binds a family's maps: `$addr` its address, then its load-balancing
/// maps, its conntrack and SNAT maps, its reject limits, and the maps of
/// the NodePort logic.
macro_rules! bind {
    ($family:ident, $addr:ty,
     lb: $frontends:ident, $states:ident, $slots:ident, $backends:ident, $members:ident,
         $affinity:ident, $maglev:ident;
     ct: $ct:ident, $ct_prev:ident, $nat:ident, $nat_prev:ident;
     rejects: $rejects:ident;
     nodeport: $ranges:ident, $dsr_eps:ident, $node_nets:ident) => {
        impl LbMaps for $family {
            type LbAddr = $addr;
            #[inline(always)]
            fn frontends()
            -> &'static HashMap<FrontendKey<$addr>, FrontendId, FRONTENDS_MAX, NO_PREALLOC> {
                &$frontends
            }
            #[inline(always)]
            fn fe_states() -> &'static Array<FrontendState<$addr>, FE_STATE_MAX> {
                &$states
            }
            #[inline(always)]
            fn slots() -> &'static HashMap<SlotKey, Slot, SLOTS_MAX, NO_PREALLOC> {
                &$slots
            }
            #[inline(always)]
            fn backends() -> &'static HashMap<u32, Backend<$addr>, BACKENDS_MAX, NO_PREALLOC> {
                &$backends
            }
            #[inline(always)]
            fn members() -> &'static HashMap<MemberKey, Member, SLOTS_MAX, NO_PREALLOC> {
                &$members
            }
            #[inline(always)]
            fn affinity() -> &'static LruHashMap<AffinityKey, AffinityValue, AFFINITY_MAX> {
                &$affinity
            }
            #[inline(always)]
            fn maglev() -> &'static HashMap<MaglevKey, MaglevChunk, MAGLEV_MAX, NO_PREALLOC> {
                &$maglev
            }
        }

        impl CtMaps for $family {
            type CtAddr = $addr;
            #[inline(always)]
            fn ct() -> &'static CtMap<$addr> {
                &$ct
            }
            #[inline(always)]
            fn ct_prev() -> &'static CtPrev<$addr> {
                &$ct_prev
            }
            #[inline(always)]
            fn nat() -> &'static NatMap<$addr> {
                &$nat
            }
            #[inline(always)]
            fn nat_prev() -> &'static NatPrev<$addr> {
                &$nat_prev
            }
        }

        impl RejectMaps for $family {
            type RejectAddr = $addr;
            #[inline(always)]
            fn rejects() -> &'static LruHashMap<FrontendKey<$addr>, RejectBucket, REJECT_MAX> {
                &$rejects
            }
        }

        impl Family for $family {
            type Addr = $addr;
            const SOURCE_RANGE_PREFIX: u32 = <$addr as Nodeport>::SOURCE_RANGE_PREFIX;
            #[inline(always)]
            fn src_ranges() -> &'static LpmTrie<SourceRange<$addr>, u32, RANGES_MAX> {
                &$ranges
            }
            #[inline(always)]
            fn dsr_eps() -> &'static HashMap<DsrEndpointKey<$addr>, u32, DSR_EPS_MAX, NO_PREALLOC> {
                &$dsr_eps
            }
            #[inline(always)]
            fn node_nets() -> &'static LpmTrie<$addr, NodeNet, NODE_NETS_MAX> {
                &$node_nets
            }
            #[inline(always)]
            fn snat(cfg: &DatapathConfig) -> $addr {
                <$addr as Nodeport>::snat(cfg)
            }
            #[inline(always)]
            fn affinity_client(addr: &$addr) -> u64 {
                <$addr as Nodeport>::affinity_client(addr)
            }
            #[inline(always)]
            fn addr_bit(addr: &$addr) -> (u32, u64) {
                <$addr as Nodeport>::addr_bit(addr)
            }
        }
    };
}

bind!(V4, [u8; 4],
    lb: LB4_FRONTENDS, LB4_FE_STATE, LB4_SLOTS, LB4_BACKENDS, LB4_MEMBERS, LB4_AFFINITY,
        LB4_MAGLEV;
    ct: LB4_CT, LB4_CT_PREV, LB4_NAT, LB4_NAT_PREV;
    rejects: LB4_REJECTS;
    nodeport: LB4_SRC_RANGES, LB4_DSR_EPS, LB4_NODE_NETS);

bind!(V6, Addr6,
    lb: LB6_FRONTENDS, LB6_FE_STATE, LB6_SLOTS, LB6_BACKENDS, LB6_MEMBERS, LB6_AFFINITY,
        LB6_MAGLEV;
    ct: LB6_CT, LB6_CT_PREV, LB6_NAT, LB6_NAT_PREV;
    rejects: LB6_REJECTS;
    nodeport: LB6_SRC_RANGES, LB6_DSR_EPS, LB6_NODE_NETS);

/// What differs by address between the families beyond their maps.
trait Nodeport {
    const SOURCE_RANGE_PREFIX: u32;
    fn snat(cfg: &DatapathConfig) -> Self;
    fn affinity_client(addr: &Self) -> u64;
    fn addr_bit(addr: &Self) -> (u32, u64);
}

impl Nodeport for [u8; 4] {
    const SOURCE_RANGE_PREFIX: u32 = SOURCE_RANGE_PREFIX;

    #[inline(always)]
    fn snat(cfg: &DatapathConfig) -> [u8; 4] {
        cfg.snat4_be
    }

    #[inline(always)]
    fn affinity_client(addr: &[u8; 4]) -> u64 {
        u64::from(u32::from_ne_bytes(*addr)) | 1 << 32
    }

    #[inline(always)]
    fn addr_bit(addr: &[u8; 4]) -> (u32, u64) {
        addr_bit4(*addr)
    }
}

impl Nodeport for Addr6 {
    const SOURCE_RANGE_PREFIX: u32 = SOURCE_RANGE6_PREFIX;

    #[inline(always)]
    fn snat(cfg: &DatapathConfig) -> Addr6 {
        words6(&cfg.snat6_be)
    }

    #[inline(always)]
    fn affinity_client(addr: &Addr6) -> u64 {
        // The address folded into 32 bits; a clash only shares stickiness.
        u64::from(addr.fold()) | 2 << 32
    }

    #[inline(always)]
    fn addr_bit(addr: &Addr6) -> (u32, u64) {
        addr_bit6(&bytes6(addr))
    }
}
