//! An address family's maps and types: the lookup (`lb`), the connection
//! tracking (`ct`) and the NodePort logic (`nodeport`) are written once over
//! [`Family`], for [`V4`] (the `LB4_*` maps) and [`V6`] (`LB6_*`).

use aya_ebpf::btf_maps::{Array, ArrayOfMaps, HashMap, LpmTrie, LruHashMap};
use lb_common::{
    AffinityKey, AffinityValue, Backend, CtKey, CtValue, DEFAULT_CT_MAX, DEFAULT_DSR_EPS_MAX,
    DEFAULT_FRAG_MAX, DEFAULT_NAT_MAX, DEFAULT_NODE_NETS_MAX, DEFAULT_SOURCE_RANGES_MAX,
    DatapathConfig, DsrEndpointKey, Frag4Key, Frag4Value, Frag6Key, FrontendId, FrontendKey,
    FrontendState, MaglevChunk, MaglevKey, Member, MemberKey, NAT_F_CLAIMING, NatKey, NatValue,
    NodeNet, REJECTS_MAX, RejectBucket, SOURCE_RANGE_PREFIX, SOURCE_RANGE6_PREFIX, STAT_TC6_OFFSET,
    Slot, SlotKey, SourceRange,
};

use crate::{
    addr::{Addr6, words6},
    atomic::cas,
    flow_cache::Cached,
    maps::{
        AFFINITY_MAX, BACKENDS_MAX, FE_STATE_MAX, FRONTENDS_MAX, LB4_AFFINITY, LB4_BACKENDS,
        LB4_CT, LB4_CT_PREV, LB4_DSR_EPS, LB4_FE_STATE, LB4_FRAG, LB4_FRONTENDS, LB4_MAGLEV,
        LB4_MEMBERS, LB4_NAT, LB4_NAT_PREV, LB4_NODE_NETS, LB4_REJECTS, LB4_SLOTS, LB4_SRC_RANGES,
        LB6_AFFINITY, LB6_BACKENDS, LB6_CT, LB6_CT_PREV, LB6_DSR_EPS, LB6_FE_STATE, LB6_FRAG,
        LB6_FRONTENDS, LB6_MAGLEV, LB6_MEMBERS, LB6_NAT, LB6_NAT_PREV, LB6_NODE_NETS, LB6_REJECTS,
        LB6_SLOTS, LB6_SRC_RANGES, MAGLEV_MAX, NO_PREALLOC, PREV_TEMPLATE, SLOTS_MAX,
    },
    packet::Ip,
    reject::Answer,
};

const CT_MAX: usize = DEFAULT_CT_MAX as usize;
const NAT_MAX: usize = DEFAULT_NAT_MAX as usize;
const FRAG_MAX: usize = DEFAULT_FRAG_MAX as usize;
const RANGES_MAX: usize = DEFAULT_SOURCE_RANGES_MAX as usize;
const REJECT_MAX: usize = REJECTS_MAX as usize;
const DSR_EPS_MAX: usize = DEFAULT_DSR_EPS_MAX as usize;
const NODE_NETS_MAX: usize = DEFAULT_NODE_NETS_MAX as usize;

/// A conntrack map of a family, and its previous-map slot.
pub type CtMap<A> = LruHashMap<CtKey<A>, CtValue<A>, CT_MAX>;
pub type CtPrev<A> = ArrayOfMaps<LruHashMap<CtKey<A>, CtValue<A>, PREV_TEMPLATE>, 1>;
/// A SNAT map of a family, and its previous-map slot.
pub type NatMap<A> = LruHashMap<NatKey<A>, NatValue<A>, NAT_MAX>;
pub type NatPrev<A> = ArrayOfMaps<LruHashMap<NatKey<A>, NatValue<A>, PREV_TEMPLATE>, 1>;

/// An address family's maps and key types.
pub trait Family {
    /// An address as packets hold it.
    type Addr: Ip + Answer + Cached;
    /// A datagram, as its fragments carry it.
    type FragKey: Copy + 'static;

    /// The load-balancing maps (`lb_common::lb`).
    fn frontends()
    -> &'static HashMap<FrontendKey<Self::Addr>, FrontendId, FRONTENDS_MAX, NO_PREALLOC>;
    fn fe_states() -> &'static Array<FrontendState<Self::Addr>, FE_STATE_MAX>;
    fn slots() -> &'static HashMap<SlotKey, Slot, SLOTS_MAX, NO_PREALLOC>;
    fn backends() -> &'static HashMap<u32, Backend<Self::Addr>, BACKENDS_MAX, NO_PREALLOC>;
    fn members() -> &'static HashMap<MemberKey, Member, SLOTS_MAX, NO_PREALLOC>;
    fn affinity() -> &'static LruHashMap<AffinityKey, AffinityValue, AFFINITY_MAX>;
    fn maglev() -> &'static HashMap<MaglevKey, MaglevChunk, MAGLEV_MAX, NO_PREALLOC>;
    /// The tc programs' maps.
    fn ct() -> &'static CtMap<Self::Addr>;
    fn ct_prev() -> &'static CtPrev<Self::Addr>;
    fn nat() -> &'static NatMap<Self::Addr>;
    fn nat_prev() -> &'static NatPrev<Self::Addr>;
    fn frag() -> &'static LruHashMap<Self::FragKey, Frag4Value, FRAG_MAX>;
    fn src_ranges() -> &'static LpmTrie<SourceRange<Self::Addr>, u32, RANGES_MAX>;
    fn rejects() -> &'static LruHashMap<FrontendKey<Self::Addr>, RejectBucket, REJECT_MAX>;
    /// The endpoints on this node of DSR frontends.
    fn dsr_eps() -> &'static HashMap<DsrEndpointKey<Self::Addr>, u32, DSR_EPS_MAX, NO_PREALLOC>;
    /// Which node an address belongs to.
    fn node_nets() -> &'static LpmTrie<Self::Addr, NodeNet, NODE_NETS_MAX>;
    /// Bits of a source-range key before the source address.
    const SOURCE_RANGE_PREFIX: u32;
    /// Added to a `STAT_TC_*` counter: each family counts apart.
    const STAT_OFFSET: u32;
    /// The node address flows of this family are SNATed to; all zero for
    /// none.
    fn snat(cfg: &DatapathConfig) -> Self::Addr;
    /// A client address as session affinity names it (the external
    /// frontend has an id of its own, so no socket client shares these).
    fn affinity_client(addr: &Self::Addr) -> u64;
    /// Swaps the owner of the SNAT mapping `nat` from `old`'s to `new`'s
    /// client if it still is `old`'s: whether this CPU won the port.
    ///
    /// # Safety
    ///
    /// `nat` is a value of [`Family::nat`] this program looked up.
    unsafe fn swap_owner(
        nat: *mut NatValue<Self::Addr>,
        old: &NatValue<Self::Addr>,
        new: &NatValue<Self::Addr>,
    ) -> bool;
}

/// IPv4: the `LB4_*` maps.
pub enum V4 {}
/// IPv6: the `LB6_*` maps.
pub enum V6 {}

/// Binds a family's load-balancing maps.
macro_rules! lb_maps {
    ($frontends:ident, $states:ident, $slots:ident, $backends:ident, $members:ident,
     $affinity:ident, $maglev:ident) => {
        #[inline(always)]
        fn frontends()
        -> &'static HashMap<FrontendKey<Self::Addr>, FrontendId, FRONTENDS_MAX, NO_PREALLOC> {
            &$frontends
        }
        #[inline(always)]
        fn fe_states() -> &'static Array<FrontendState<Self::Addr>, FE_STATE_MAX> {
            &$states
        }
        #[inline(always)]
        fn slots() -> &'static HashMap<SlotKey, Slot, SLOTS_MAX, NO_PREALLOC> {
            &$slots
        }
        #[inline(always)]
        fn backends() -> &'static HashMap<u32, Backend<Self::Addr>, BACKENDS_MAX, NO_PREALLOC> {
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
    };
}

/// Binds a family's maps of the tc (and XDP) programs.
macro_rules! tc_maps {
    ($ct:ident, $ct_prev:ident, $nat:ident, $nat_prev:ident, $frag:ident, $ranges:ident,
     $rejects:ident, $dsr_eps:ident, $node_nets:ident) => {
        #[inline(always)]
        fn ct() -> &'static CtMap<Self::Addr> {
            &$ct
        }
        #[inline(always)]
        fn ct_prev() -> &'static CtPrev<Self::Addr> {
            &$ct_prev
        }
        #[inline(always)]
        fn nat() -> &'static NatMap<Self::Addr> {
            &$nat
        }
        #[inline(always)]
        fn nat_prev() -> &'static NatPrev<Self::Addr> {
            &$nat_prev
        }
        #[inline(always)]
        fn frag() -> &'static LruHashMap<Self::FragKey, Frag4Value, FRAG_MAX> {
            &$frag
        }
        #[inline(always)]
        fn src_ranges() -> &'static LpmTrie<SourceRange<Self::Addr>, u32, RANGES_MAX> {
            &$ranges
        }
        #[inline(always)]
        fn rejects() -> &'static LruHashMap<FrontendKey<Self::Addr>, RejectBucket, REJECT_MAX> {
            &$rejects
        }
        #[inline(always)]
        fn dsr_eps() -> &'static HashMap<DsrEndpointKey<Self::Addr>, u32, DSR_EPS_MAX, NO_PREALLOC>
        {
            &$dsr_eps
        }
        #[inline(always)]
        fn node_nets() -> &'static LpmTrie<Self::Addr, NodeNet, NODE_NETS_MAX> {
            &$node_nets
        }
    };
}

impl Family for V4 {
    type Addr = [u8; 4];
    type FragKey = Frag4Key;
    const SOURCE_RANGE_PREFIX: u32 = SOURCE_RANGE_PREFIX;
    const STAT_OFFSET: u32 = 0;

    lb_maps!(
        LB4_FRONTENDS,
        LB4_FE_STATE,
        LB4_SLOTS,
        LB4_BACKENDS,
        LB4_MEMBERS,
        LB4_AFFINITY,
        LB4_MAGLEV
    );
    tc_maps!(
        LB4_CT,
        LB4_CT_PREV,
        LB4_NAT,
        LB4_NAT_PREV,
        LB4_FRAG,
        LB4_SRC_RANGES,
        LB4_REJECTS,
        LB4_DSR_EPS,
        LB4_NODE_NETS
    );

    #[inline(always)]
    fn snat(cfg: &DatapathConfig) -> [u8; 4] {
        cfg.snat4_be
    }

    #[inline(always)]
    fn affinity_client(addr: &[u8; 4]) -> u64 {
        u64::from(u32::from_ne_bytes(*addr)) | 1 << 32
    }

    #[inline(always)]
    unsafe fn swap_owner(
        nat: *mut NatValue<[u8; 4]>,
        old: &NatValue<[u8; 4]>,
        new: &NatValue<[u8; 4]>,
    ) -> bool {
        /// The owner fields (client address, port, flags): the value's
        /// first 8 bytes.
        fn owner(v: &NatValue<[u8; 4]>) -> u64 {
            let [p0, p1] = v.port_be.to_ne_bytes();
            let [f0, f1] = v.flags.to_ne_bytes();
            let [a0, a1, a2, a3] = v.addr_be;
            u64::from_ne_bytes([a0, a1, a2, a3, p0, p1, f0, f1])
        }
        // The owner word alone is swapped: the expiry lies outside it. So
        // the new owner first holds the port as `NAT_F_CLAIMING` (taken,
        // whatever its old expiry says) until its expiry is written.
        let claiming = NatValue {
            flags: new.flags | NAT_F_CLAIMING,
            ..*new
        };
        let word = nat.cast::<u64>();
        // SAFETY: the element is live (the caller's contract); map values
        // are 8-byte aligned, and its first 8 bytes are the owner fields,
        // plain bytes; the kernel allows atomic operations on map values.
        if !unsafe { cas(word, owner(old), owner(&claiming)) } {
            return false;
        }
        // SAFETY: as above; the port is this CPU's, and only this CPU
        // clears the claim. The second swap, a full barrier, publishes the
        // expiry before the claim ends (it cannot fail: no other CPU swaps
        // a claimed word).
        unsafe {
            (*nat).expires = new.expires;
            cas(word, owner(&claiming), owner(new));
        }
        true
    }
}

impl Family for V6 {
    type Addr = Addr6;
    type FragKey = Frag6Key;
    const SOURCE_RANGE_PREFIX: u32 = SOURCE_RANGE6_PREFIX;
    const STAT_OFFSET: u32 = STAT_TC6_OFFSET;

    lb_maps!(
        LB6_FRONTENDS,
        LB6_FE_STATE,
        LB6_SLOTS,
        LB6_BACKENDS,
        LB6_MEMBERS,
        LB6_AFFINITY,
        LB6_MAGLEV
    );
    tc_maps!(
        LB6_CT,
        LB6_CT_PREV,
        LB6_NAT,
        LB6_NAT_PREV,
        LB6_FRAG,
        LB6_SRC_RANGES,
        LB6_REJECTS,
        LB6_DSR_EPS,
        LB6_NODE_NETS
    );

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
    unsafe fn swap_owner(
        nat: *mut NatValue<Addr6>,
        old: &NatValue<Addr6>,
        new: &NatValue<Addr6>,
    ) -> bool {
        /// The word a claim swaps: port, flags and expiry.
        fn word(v: &NatValue<Addr6>) -> u64 {
            let [p0, p1] = v.port_be.to_ne_bytes();
            let [f0, f1] = v.flags.to_ne_bytes();
            let [e0, e1, e2, e3] = v.expires.to_ne_bytes();
            u64::from_ne_bytes([p0, p1, f0, f1, e0, e1, e2, e3])
        }
        // SAFETY: the element is live (the caller's contract); map values
        // are 8-byte aligned and the word at NAT6_CLAIM_WORD (16) is plain
        // bytes; the kernel allows atomic operations on map values.
        let won = unsafe {
            cas(
                nat.cast::<u8>()
                    .add(lb_common::NAT6_CLAIM_WORD)
                    .cast::<u64>(),
                word(old),
                word(new),
            )
        };
        if won {
            // The port is this CPU's now: another claim of it fails on the
            // swapped word, and no reply can come before the flow's first
            // packet leaves with it.
            // SAFETY: as above; a plain store to a live element.
            unsafe { (*nat).addr_be = new.addr_be };
        }
        won
    }
}
