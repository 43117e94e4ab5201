//! The XDP fast path's per-flow cache (`lb_common::XdpFlow`): a packet of
//! a flow the full path (`xdp`, over `nodeport`) forwarded this second is
//! sent on with one lookup, keyed by its own bytes (addresses and ports as
//! they lie in it), and a rewrite in place: addresses and ports, checksums
//! by the differences the entry holds, TTL, MAC addresses, out of the
//! device the entry names. A packet of a flow the full path handed over to
//! tc this second (a local endpoint's, a DSR or kernel flow's) is handed
//! over the same way, told where it goes (`lb_common::XdpFound`), untouched.
//!
//! Why that is the full path's answer: the entry is used only in the
//! second the full path last ran for the flow (which advanced its
//! conntrack entries then) and at the generation the agent last set
//! (bumped on every route, neighbour, link and address change, and when
//! it deletes flows), and only by a packet without SYN, FIN or RST, no
//! fragment, no IPv4 options or IPv6 extension headers, a TTL that does
//! not expire, within the route's MTU, arriving on the device the full
//! path saw it on. Within a second, such a packet
//! changes nothing the full path would write (a state byte it already
//! has, the expiry it already got), so skipping it changes nothing. Every
//! other packet takes the full path, which writes the entry again.

use aya_ebpf::{
    bindings::xdp_action,
    btf_maps::{Array, LruHashMap, PerCpuArray},
    cty::c_void,
    helpers::{bpf_ktime_get_coarse_ns, bpf_map_lookup_elem, bpf_redirect},
    macros::btf_map,
    programs::XdpContext,
};
use lb_common::{
    At, PROTO_TCP, PROTO_UDP, Reason, TCP_FIN, TCP_RST, TCP_SYN, XDP_FLOWS_MAX, XdpFlow,
    XdpFlowKey, XdpFound, addr_bit4, addr_bit6,
};

use crate::{
    addr::Addr6,
    clock::now,
    csum::{csum_add, diff16},
    ctx::PacketCtx as _,
    maps::{LB_CONFIG, maybe_frontend},
    meta::tell_tc_found,
    packet::{ETH_HLEN, Ip, Packet},
    stats::count,
};

const FLOWS_MAX: usize = XDP_FLOWS_MAX as usize;

/// The flows the fast path forwards, by family (the loaded object's own
/// maps). One map each, looked up at one place each: the verifier inlines
/// a lookup only where a single map reaches it.
#[btf_map]
static LB4_XDP_FLOWS: LruHashMap<XdpFlowKey<[u8; 4]>, XdpFlow<[u8; 4]>, FLOWS_MAX> =
    LruHashMap::new();
#[btf_map]
static LB6_XDP_FLOWS: LruHashMap<XdpFlowKey<Addr6>, XdpFlow<Addr6>, FLOWS_MAX> = LruHashMap::new();

/// The generation entries must have to be used; written by the agent.
#[btf_map]
pub static LB_XDP_GENERATION: Array<u32, 1> = Array::new();

/// The packet the full path is sending, as it arrived, per CPU: kept here
/// rather than on the stack, whose 512 bytes IPv6's full path needs. (XDP
/// programs do not nest on a CPU.)
#[btf_map]
static LB4_XDP_PENDING: PerCpuArray<Pending<[u8; 4]>, 1> = PerCpuArray::new();
#[btf_map]
static LB6_XDP_PENDING: PerCpuArray<Pending<Addr6>, 1> = PerCpuArray::new();

/// A packet the full path is sending.
#[derive(Clone, Copy)]
pub struct Pending<A> {
    /// Its tuple as it arrived.
    key: XdpFlowKey<A>,
    /// The second the full path runs in (read before it ran: the
    /// conntrack entries it advances were advanced in that second or the
    /// next).
    second: u32,
    /// Its protocol, and whether the packets of its flow that follow it
    /// may take the cache ([`cacheable`]).
    proto: u8,
    cacheable: bool,
}

type Flows<A> = LruHashMap<XdpFlowKey<A>, XdpFlow<A>, FLOWS_MAX>;

const TX: i32 = xdp_action::XDP_TX as i32;
const PASS: i32 = xdp_action::XDP_PASS as i32;
/// [`hit_family`]: not sent by the cache; the full path's.
const MISS: i32 = -1;
/// `ETH_P_IP` and `ETH_P_IPV6` as the frame holds them.
const ETH_P_IP_BE: u16 = 0x0800_u16.to_be();
const ETH_P_IPV6_BE: u16 = 0x86dd_u16.to_be();

/// What the cache needs of an address family beyond [`Ip`].
pub trait Cached: Ip {
    fn flows() -> &'static Flows<Self>;
    fn pending() -> &'static PerCpuArray<Pending<Self>, 1>;
    /// Offset of the protocol (next header) in the IP header.
    const PROTO: usize;
    /// Whether the IP header has a checksum (IPv4's).
    const HEADER_CSUM: bool;
    /// Whether the IP header at `l3` (its fixed part in the packet) is one
    /// the cache may send: IPv4 without options and not a fragment.
    ///
    /// # Safety
    ///
    /// `l3` points at the fixed IP header, inside the packet.
    unsafe fn plain(l3: usize) -> bool;
    /// The IP packet's length (host order).
    ///
    /// # Safety
    ///
    /// As [`Self::plain`].
    unsafe fn ip_len(l3: usize) -> u16;
    /// The one's complement sum that turns a checksum over `from` into one
    /// over `to`.
    fn diff(from: &Self, to: &Self) -> u32;
    /// Decrements the TTL (hop limit) at `l3`, and adds `l3_diff` and what
    /// that changes to the header checksum, if there is one.
    ///
    /// # Safety
    ///
    /// As [`Self::plain`].
    unsafe fn next_hop(l3: usize, l3_diff: u32);
    /// Whether the packet at `l3` may have an entry: it goes to an address
    /// with a frontend (`LB_ADDRS`, whose bit may also be another
    /// address's) or to the SNAT address (a reply). Any other is spared
    /// the lookup, not the full path, which still looks it up: a flow
    /// outlives its frontend's bit.
    ///
    /// # Safety
    ///
    /// As [`Self::plain`].
    unsafe fn may_have_entry(l3: usize) -> bool;
}

impl Cached for [u8; 4] {
    const PROTO: usize = 9;
    const HEADER_CSUM: bool = true;

    #[inline(always)]
    fn flows() -> &'static Flows<Self> {
        &LB4_XDP_FLOWS
    }

    #[inline(always)]
    fn pending() -> &'static PerCpuArray<Pending<Self>, 1> {
        &LB4_XDP_PENDING
    }

    #[inline(always)]
    unsafe fn plain(l3: usize) -> bool {
        // SAFETY: the caller's contract: the fixed header is there.
        let (first, frag) = unsafe {
            (
                *(l3 as *const u8),
                ((l3 + 6) as *const u16).read_unaligned(),
            )
        };
        // Version 4, 20 bytes; neither more fragments nor an offset.
        first == 0x45 && frag & 0x3fff_u16.to_be() == 0
    }

    #[inline(always)]
    unsafe fn ip_len(l3: usize) -> u16 {
        // SAFETY: the caller's contract.
        u16::from_be(unsafe { ((l3 + 2) as *const u16).read_unaligned() })
    }

    #[inline(always)]
    fn diff(from: &Self, to: &Self) -> u32 {
        let (from, to) = (u32::from_ne_bytes(*from), u32::from_ne_bytes(*to));
        (!from >> 16) + (!from & 0xffff) + (to >> 16) + (to & 0xffff)
    }

    #[inline(always)]
    unsafe fn next_hop(l3: usize, l3_diff: u32) {
        let word = (l3 + Self::TTL) as *mut u16;
        let csum = (l3 + 10) as *mut u16;
        // SAFETY: the caller's contract: TTL, protocol and checksum lie in
        // the fixed header. The TTL and protocol bytes are one word of the
        // checksum.
        unsafe {
            let old = word.read_unaligned();
            *((l3 + Self::TTL) as *mut u8) -= 1;
            let new = word.read_unaligned();
            let sum = l3_diff + u32::from(!old) + u32::from(new);
            csum.write_unaligned(csum_add(csum.read_unaligned(), sum));
        }
    }

    #[inline(always)]
    unsafe fn may_have_entry(l3: usize) -> bool {
        // SAFETY: the caller's contract: the address lies in the fixed
        // header.
        let dst = unsafe { ((l3 + Self::DADDR) as *const [u8; 4]).read_unaligned() };
        LB_CONFIG.get(0).is_some_and(|c| c.snat4_be == dst) || maybe_frontend(addr_bit4(dst))
    }
}

impl Cached for Addr6 {
    const PROTO: usize = 6;
    const HEADER_CSUM: bool = false;

    #[inline(always)]
    fn flows() -> &'static Flows<Self> {
        &LB6_XDP_FLOWS
    }

    #[inline(always)]
    fn pending() -> &'static PerCpuArray<Pending<Self>, 1> {
        &LB6_XDP_PENDING
    }

    #[inline(always)]
    unsafe fn plain(l3: usize) -> bool {
        // SAFETY: the caller's contract. (A next header of TCP or UDP,
        // checked by the caller, means no extension headers.)
        (unsafe { *(l3 as *const u8) }) >> 4 == 6
    }

    #[inline(always)]
    unsafe fn ip_len(l3: usize) -> u16 {
        // SAFETY: the caller's contract.
        let payload = u16::from_be(unsafe { ((l3 + 4) as *const u16).read_unaligned() });
        payload.saturating_add(Self::HLEN as u16)
    }

    #[inline(always)]
    fn diff(from: &Self, to: &Self) -> u32 {
        diff16(from, to)
    }

    #[inline(always)]
    unsafe fn next_hop(l3: usize, _l3_diff: u32) {
        // SAFETY: the caller's contract.
        unsafe { *((l3 + Self::TTL) as *mut u8) -= 1 };
    }

    #[inline(always)]
    unsafe fn may_have_entry(l3: usize) -> bool {
        // SAFETY: as for IPv4's.
        let dst = unsafe { ((l3 + Self::DADDR) as *const [u8; 16]).read_unaligned() };
        LB_CONFIG.get(0).is_some_and(|c| c.snat6_be == dst) || maybe_frontend(addr_bit6(&dst))
    }
}

/// The generation cache entries must have.
#[inline(always)]
fn generation() -> u32 {
    LB_XDP_GENERATION.get(0).copied().unwrap_or(0)
}

/// The frame's verdict if the cache sends it; `None` for the full path.
#[inline(always)]
pub fn hit(ctx: &XdpContext) -> Option<i32> {
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + ETH_HLEN > end {
        return None;
    }
    // SAFETY: the Ethernet header is in the packet, just checked.
    let ethertype = unsafe { ((data + 12) as *const u16).read_unaligned() };
    let verdict = match ethertype {
        ETH_P_IP_BE => hit_family::<[u8; 4]>(ctx),
        ETH_P_IPV6_BE => hit_family::<Addr6>(ctx),
        _ => MISS,
    };
    (verdict != MISS).then_some(verdict)
}

/// [`hit`] for a family: a BPF function of its own, so that its key stays
/// off the stack the full path starts from.
#[inline(never)]
fn hit_family<A: Cached>(ctx: &XdpContext) -> i32 {
    let (data, end) = (ctx.data(), ctx.data_end());
    let l3 = data + ETH_HLEN;
    let l4 = l3 + A::HLEN;
    // UDP's header; TCP's is checked below.
    if l4 + 8 > end {
        return MISS;
    }
    // SAFETY: the fixed IP header is in the packet, just checked.
    let (proto, ttl, plain) = unsafe {
        (
            *((l3 + A::PROTO) as *const u8),
            *((l3 + A::TTL) as *const u8),
            A::plain(l3),
        )
    };
    // SAFETY: as above.
    if ttl <= 1 || !plain || !unsafe { A::may_have_entry(l3) } {
        return MISS;
    }
    let csum = if proto == PROTO_TCP {
        if l4 + 20 > end {
            return MISS;
        }
        // SAFETY: the TCP header is in the packet, just checked.
        if unsafe { *((l4 + 13) as *const u8) } & (TCP_SYN | TCP_FIN | TCP_RST) != 0 {
            return MISS;
        }
        l4 + 16
    } else if proto == PROTO_UDP {
        l4 + 6
    } else {
        return MISS;
    };
    // The addresses and ports lie in the packet as the key holds them.
    let tuple = l3 + A::SADDR;
    let flows = A::flows();
    // SAFETY: the map is one of the program's; the key's bytes lie in the
    // headers checked above (the verifier checks them against the packet's
    // end again). Looked up by a raw pointer: a reference to the packet's
    // bytes could be unaligned.
    let entry = unsafe {
        bpf_map_lookup_elem(
            core::ptr::from_ref(flows).cast_mut().cast(),
            tuple as *const c_void,
        )
    }
    .cast::<XdpFlow<A>>();
    if entry.is_null() {
        return MISS;
    }
    // SAFETY: looked up by this run: mapped while it runs (RCU). Only the
    // full path writes entries, whole, each time; a torn read is caught by
    // the expiry or generation or, at worst, sends one packet by an older
    // answer of the same flow.
    let f = unsafe { &*entry };
    // SAFETY: the helper has no preconditions.
    let now_ns = unsafe { bpf_ktime_get_coarse_ns() };
    // SAFETY: the fixed IP header is in the packet.
    let len = unsafe { A::ip_len(l3) };
    if now_ns >= f.until_ns
        || f.proto != proto
        || f.generation != generation()
        || f.ingress != ctx.ingress_ifindex() as u32
        || len > f.mtu
        // A sound header, as the full path wants: checked on a hit only.
        || !A::header_ok::<XdpContext, ETH_HLEN>(ctx, true)
    {
        return MISS;
    }
    if f.ifindex == 0 {
        // Handed over to tc, told where it goes; untold (no room for
        // metadata), the full path's.
        if tell_tc_found(ctx, &f.tuple.daddr_be, f.tuple.dport_be, f.handed) != 0 {
            return MISS;
        }
        count::<A>(At::XDP, Reason::PassedToTc);
        return PASS;
    }
    // SAFETY: every offset lies in the headers checked above (the L4
    // checksum in TCP's or UDP's).
    unsafe {
        let csum = csum as *mut u16;
        let old = csum.read_unaligned();
        // A UDP datagram without a checksum keeps none; a computed 0 is
        // sent as its other form (`CSUM_MANGLED_0`).
        if proto == PROTO_TCP || old != 0 {
            let mut new = csum_add(old, f.l4_diff);
            if proto == PROTO_UDP && new == 0 {
                new = 0xffff;
            }
            csum.write_unaligned(new);
        }
        put_bytes(tuple, &f.tuple);
        A::next_hop(l3, f.l3_diff);
        put_bytes(data, &f.dmac);
        put_bytes(data + 6, &f.smac);
    }
    count::<A>(At::XDP, Reason::Forwarded);
    if f.ifindex == ctx.ingress_ifindex() as u32 {
        return TX;
    }
    // SAFETY: the helper has no preconditions; it returns the verdict.
    unsafe { bpf_redirect(f.ifindex, 0) as i32 }
}

/// Copies `src` over the packet's bytes at `dst`, unrolled: a copy of
/// the whole (`write_unaligned`) would call `memmove`, a BPF function
/// that loops over the bytes.
///
/// # Safety
///
/// The packet holds `size_of::<T>()` bytes at `dst`.
#[inline(always)]
unsafe fn put_bytes<T>(dst: usize, src: &T) {
    let (dst, src) = (dst as *mut u8, core::ptr::from_ref(src).cast::<u8>());
    for i in 0..size_of::<T>() {
        // SAFETY: the caller's contract; `src` is read within `T`. Volatile,
        // so that LLVM keeps the stores apart rather than calling `memmove`.
        unsafe { dst.add(i).write_volatile(*src.add(i)) };
    }
}

/// Notes the packet `p` as it arrived, before the full path rewrites it,
/// for [`remember`]. A BPF function of its own: the key stays off the
/// full path's stack.
#[inline(never)]
pub fn note<A: Cached>(p: &Packet<A>) {
    let Some(pending) = A::pending().get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's element of an array, which lives as long as the
    // map; no other program of this CPU uses it meanwhile.
    unsafe {
        (*pending).key = XdpFlowKey {
            saddr_be: p.saddr,
            daddr_be: p.daddr,
            sport_be: p.sport_be,
            dport_be: p.dport_be,
        };
        (*pending).second = now();
        (*pending).proto = p.proto;
        (*pending).cacheable = cacheable(p);
    }
}

/// Whether the packets of `p`'s flow that follow it may be sent by the
/// cache, once the full path sent it: not a later fragment, and TCP
/// without SYN, FIN or RST (those change a flow's state).
#[inline(always)]
pub fn cacheable<A>(p: &Packet<A>) -> bool {
    !p.later_fragment && (p.proto != PROTO_TCP || p.tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST) == 0)
}

/// Records how the full path sent the packet [`note`] noted, which
/// leaves as `p`, out of `ifindex` (the route's MTU `mtu`) with the MAC
/// addresses the frame now has. A BPF function of its own: its value
/// stays off the full path's stack.
#[inline(never)]
pub fn remember<A: Cached>(ctx: &XdpContext, p: &Packet<A>, ifindex: u32, mtu: u16) {
    let Some(pending) = A::pending().get_ptr(0) else {
        return;
    };
    // SAFETY: as in `note`.
    let Pending { key, second, .. } = unsafe { *pending };
    // Copied by the helper: LLVM would pass the packet's pointers in place
    // of the context, and widen the end pointer, which the verifier
    // refuses.
    let Ok(macs) = ctx.load::<[[u8; 6]; 2]>(0) else {
        return;
    };
    let [dmac, smac] = macs;
    let ports = u32::from(!key.sport_be)
        + u32::from(p.sport_be)
        + u32::from(!key.dport_be)
        + u32::from(p.dport_be);
    let addrs = fold32(
        A::diff(&key.saddr_be, &p.saddr),
        A::diff(&key.daddr_be, &p.daddr),
    );
    // The pseudo-header's addresses, and the ports.
    let l4_diff = addrs + ports;
    let l3_diff = if A::HEADER_CSUM { addrs } else { 0 };
    let value = XdpFlow {
        tuple: XdpFlowKey {
            saddr_be: p.saddr,
            daddr_be: p.daddr,
            sport_be: p.sport_be,
            dport_be: p.dport_be,
        },
        l3_diff,
        l4_diff,
        ifindex,
        dmac,
        smac,
        mtu,
        proto: p.proto,
        handed: 0,
        generation: generation(),
        ingress: ctx.ingress_ifindex() as u32,
        until_ns: (u64::from(second) + 1) * 1_000_000_000,
    };
    // Without memory for it, the flow's packets take the full path.
    let _ = A::flows().insert(key, value, 0);
}

/// Records that the full path handed the packet [`note`] noted over to
/// tc, with what it told tc in the metadata ([`lb_common::XdpFound`]), if
/// its flow's next packets may take the cache: they are handed over the
/// same way with one lookup, until the end of the second. A BPF function
/// of its own, called by the program (not from within the full path,
/// whose chain of calls holds IPv6's largest frames), as [`remember`].
#[inline(never)]
pub fn remember_handed<A: Cached>(ctx: &XdpContext) {
    let Some(pending) = A::pending().get_ptr(0) else {
        return;
    };
    // SAFETY: as in `note`.
    let Pending {
        key,
        second,
        proto,
        cacheable,
    } = unsafe { *pending };
    let (meta, data) = (ctx.metadata(), ctx.data());
    if !cacheable || meta + size_of::<XdpFound<A>>() > data {
        return;
    }
    // SAFETY: the metadata holds what the full path told tc, just checked
    // to be that long; read unaligned.
    let found = unsafe { (meta as *const XdpFound<A>).read_unaligned() };
    let value = XdpFlow {
        tuple: XdpFlowKey {
            daddr_be: found.addr_be,
            dport_be: found.port_be,
            ..key
        },
        l3_diff: 0,
        l4_diff: 0,
        ifindex: 0,
        dmac: [0; 6],
        smac: [0; 6],
        mtu: u16::MAX,
        proto,
        handed: found.what,
        generation: generation(),
        ingress: ctx.ingress_ifindex() as u32,
        until_ns: (u64::from(second) + 1) * 1_000_000_000,
    };
    let _ = A::flows().insert(key, value, 0);
}

/// The one's complement sum of two sums, in 16 bits and a carry (small
/// enough that the ports' words may be added after).
#[inline(always)]
fn fold32(a: u32, b: u32) -> u32 {
    let sum = u64::from(a) + u64::from(b);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    ((sum & 0xffff) + (sum >> 16)) as u32
}
