//! The XDP fast path: the NodePort logic (`nodeport`) run first, on the
//! frame as the driver got it, for the packets XDP can send on itself.
//!
//! A packet of an external frontend's flow whose translated destination
//! the FIB sends out of the device it came in on, or out of another device
//! the fast path runs on ([`LB_XDP_DEVICES`]: tc egress would run there
//! too), is translated exactly as tc would translate it at ingress and then
//! at egress (DNAT and the SNAT of `externalTrafficPolicy: Cluster`, or the
//! reverse of both), its TTL decremented and its MAC addresses set as the
//! FIB says, and sent with `XDP_TX` or `bpf_redirect`: it never reaches
//! tc, whose egress would have applied the SNAT.
//!
//! Everything else is passed (`XDP_PASS`) untouched. A packet of a flow of
//! ours XDP does not send on (local backends and backends behind any
//! other device, failed FIB lookups: no neighbour yet, forwarding off, MTU
//! exceeded; DSR flows; kernel flows) is handed over: XDP records or
//! advances the flow as tc would and leaves what it found in the packet's
//! metadata ([`lb_common::XdpFound`]), so that tc only rewrites it. The
//! rest goes to tc before any byte or flow entry changes (only what makes
//! tc decide alike may be written: a ClientIP affinity entry for the
//! backend picked, a first fragment's ports), for tc to handle as it does
//! without XDP: ICMP errors, IPv4 fragments whose first fragment was not
//! seen, IPv4 options and IPv6 extension headers (IPv6 fragments too), new
//! DSR flows, rejects, drops by policy, an expiring TTL. A packet that XDP
//! found to be no frontend's nor any flow's of ours (host traffic)
//! carries that in its metadata ([`lb_common::XDP_META_NOT_OURS`]), and
//! tc passes it without repeating the lookups.

use core::mem::MaybeUninit;

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup, xdp_action},
    helpers::{bpf_fib_lookup as fib_lookup, bpf_redirect},
    programs::XdpContext,
};
use lb_common::{At, Reason, XDP_DEVICES_MAX, XDP_FOUND_FLOW, XDP_FOUND_KERNEL, XDP_META_NOT_OURS};

use crate::{
    csum::csum_add,
    ct::config,
    family::Family,
    flow_cache,
    meta::{tell_tc, tell_tc_found},
    nodeport::{self, Hook, Verdict},
    packet::{ETH_HLEN, Ip, Packet},
    stats::count,
};

const PASS: i32 = xdp_action::XDP_PASS as i32;
const DROP: i32 = xdp_action::XDP_DROP as i32;
const TX: i32 = xdp_action::XDP_TX as i32;
/// `AF_INET6`, as [`Ip::AF`] says it.
const AF_INET6: u8 = 10;

/// The interface indexes of the devices the fast path runs on, which it
/// may redirect to (`lb_common::xdp`); written by the agent, 0 unused.
#[unsafe(no_mangle)]
static mut LB_XDP_DEVICES: [u32; XDP_DEVICES_MAX] = [0; XDP_DEVICES_MAX];

/// Whether `ifindex` is one of [`LB_XDP_DEVICES`].
#[inline(always)]
fn xdp_device(ifindex: u32) -> bool {
    let list = (&raw const LB_XDP_DEVICES).cast::<u32>();
    for i in 0..XDP_DEVICES_MAX {
        // SAFETY: inside the array; read afresh (the agent writes it while
        // the program runs), a word at a time, which the kernel writes
        // whole.
        if unsafe { core::ptr::read_volatile(list.add(i)) } == ifindex {
            return true;
        }
    }
    false
}

/// The XDP hook of the NodePort logic: admits a packet only if it can be
/// sent on from here.
pub struct Forward<'a> {
    ctx: &'a XdpContext,
    /// The device the FIB sends the packet out of, once [`Hook::admit`]
    /// said yes (the packet is then being translated); 0 before.
    egress: u32,
    /// The route's MTU the FIB gave with it.
    mtu: u16,
    /// What the full path said of the packet: [`NOT_OURS`], [`HANDED`],
    /// [`FIRST`]. One byte: the frame of the steps that hold this has no
    /// room for more (the verifier's 512 bytes over IPv6's chain of calls).
    said: u8,
}

/// [`Hook::not_ours`] was said.
const NOT_OURS: u8 = 1;
/// [`Hook::hand_over`] told tc.
const HANDED: u8 = 2;
/// [`Hook::recorded`] was said: the packet is its flow's first.
const FIRST: u8 = 4;

impl Hook for Forward<'_> {
    const FIRST: bool = true;
    const AT: At = At::XDP;

    /// What XDP does itself: the rest it passes to tc untouched, which
    /// decides and counts.
    #[inline(always)]
    fn counts(reason: Reason) -> bool {
        matches!(
            reason,
            Reason::NewFlow
                | Reason::DropConntrackInsert
                | Reason::DropSnatExhausted
                | Reason::DropSynBudget
                | Reason::DsrSnatHairpin
        )
    }

    #[inline(always)]
    fn admit<F: Family>(&mut self, p: &Packet<F::Addr>, dst: &F::Addr) -> bool {
        self.egress = lookup(self.ctx, p, dst, &mut self.mtu);
        if self.egress == 0 {
            count::<F::Addr>(At::XDP, Reason::PassedToTc);
        }
        self.egress != 0
    }

    #[inline(always)]
    fn not_ours(&mut self) {
        self.said |= NOT_OURS;
    }

    #[inline(always)]
    fn recorded(&mut self) {
        self.said |= FIRST;
    }

    #[inline(always)]
    fn hand_over<F: Family>(&mut self, addr: &F::Addr, port_be: u16, kernel: bool) -> bool {
        let what = if kernel {
            XDP_FOUND_KERNEL
        } else {
            XDP_FOUND_FLOW
        };
        let told = tell_tc_found(self.ctx, addr, port_be, what) == 0;
        if told {
            self.said |= HANDED;
        }
        told
    }
}

/// The device `p`, translated to `dst`, leaves by, by the FIB, if it is
/// the one it came in on or another one the fast path runs on; else 0. If
/// not 0, the frame has the MAC addresses the FIB gave (it is then
/// translated and sent, or dropped), and `mtu` the route's MTU. A BPF function of its own: the
/// lookup's 64 bytes of parameters stay off the stack of the steps that
/// call it, and it keeps nothing else on its own (the verifier's 512 bytes
/// over a chain of calls hold IPv6's conntrack step above it).
#[inline(never)]
fn lookup<A: Ip>(ctx: &XdpContext, p: &Packet<A>, dst: &A, mtu: &mut u16) -> u32 {
    let ingress = ctx.ingress_ifindex() as u32;
    // All zero (what the kernel wants of the fields not set), a word at a
    // time: `mem::zeroed` would call `memset`, a BPF function whose frame,
    // however empty, the verifier counts against the 512 bytes of this
    // chain of calls, IPv6's deepest.
    let mut f = MaybeUninit::<bpf_fib_lookup>::uninit();
    let words = f.as_mut_ptr().cast::<u64>();
    for i in 0..size_of::<bpf_fib_lookup>() / 8 {
        // SAFETY: inside `f`, 8-byte aligned (it holds u64-sized unions)
        // and a whole number of words long.
        unsafe { words.add(i).write_volatile(0) };
    }
    // SAFETY: every byte was written; all zero is a valid value of its
    // plain integers and arrays.
    let f = unsafe { f.assume_init_mut() };
    f.family = A::AF;
    f.l4_protocol = p.proto;
    f.sport = p.sport_be;
    f.dport = p.dport_be;
    // The IP length, for the kernel's MTU check.
    f.__bindgen_anon_1.tot_len = (ctx.data_end() - ctx.data() - ETH_HLEN) as u16;
    f.ifindex = ingress;
    f.__bindgen_anon_3.ipv6_src = p.saddr.fib_words();
    f.__bindgen_anon_4.ipv6_dst = dst.fib_words();
    // SAFETY: the context is this program's; the parameters are a valid
    // `bpf_fib_lookup` of the size given.
    let ret = unsafe {
        fib_lookup(
            ctx.as_ptr(),
            &raw mut *f,
            size_of::<bpf_fib_lookup>() as i32,
            0,
        )
    };
    let egress = f.ifindex;
    // SAFETY: a plain integer; the kernel writes the MTU there on success
    // (it read the length from it).
    *mtu = unsafe { f.__bindgen_anon_1.mtu_result };
    if ret != i64::from(BPF_FIB_LKUP_RET_SUCCESS)
        || egress == 0
        || (egress != ingress && !xdp_device(egress))
    {
        return 0;
    }
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + ETH_HLEN > end {
        return 0;
    }
    // The destination address, then the source, a byte at a time (a
    // 6-byte copy would call `memmove`, see above).
    for i in 0..6 {
        // SAFETY: the Ethernet header is in the packet, just checked.
        unsafe {
            ((data + i) as *mut u8).write_volatile(f.dmac[i]);
            ((data + 6 + i) as *mut u8).write_volatile(f.smac[i]);
        }
    }
    egress
}

impl<'a> Forward<'a> {
    #[inline(always)]
    fn new(ctx: &'a XdpContext) -> Self {
        Self {
            ctx,
            egress: 0,
            mtu: 0,
            said: 0,
        }
    }

    /// Sends the translated packet on (its MAC addresses are the FIB's
    /// already): TTL (hop limit) one less, out of the device the FIB said.
    #[inline(always)]
    fn send<A: Ip>(&self) -> i32 {
        let (data, end) = (self.ctx.data(), self.ctx.data_end());
        if data + ETH_HLEN + A::HLEN > end {
            // Parsed in place, so never; the verifier wants the check.
            return DROP;
        }
        let ttl = (data + ETH_HLEN + A::TTL) as *mut u8;
        // SAFETY: the Ethernet and IP headers are in the packet, just
        // checked against its end; written at constant offsets inside them.
        unsafe {
            if A::AF == AF_INET6 {
                *ttl -= 1;
            } else {
                // The TTL and protocol bytes are one word of the header
                // checksum.
                let word = ttl.cast::<u16>();
                let csum = (data + ETH_HLEN + 10) as *mut u16;
                let old = word.read_unaligned();
                *ttl -= 1;
                let new = word.read_unaligned();
                let sum = (u32::from(!old)) + u32::from(new);
                csum.write_unaligned(csum_add(csum.read_unaligned(), sum));
            }
        }
        count::<A>(At::XDP, Reason::Forwarded);
        if self.egress == self.ctx.ingress_ifindex() as u32 {
            return TX;
        }
        // SAFETY: the helper has no preconditions; it returns the verdict
        // (`XDP_REDIRECT`, or `XDP_ABORTED` for flags it does not know).
        unsafe { bpf_redirect(self.egress, 0) as i32 }
    }
}

/// Whether XDP could send `p` on at all: headers at constant offsets (no
/// IPv4 options, no IPv6 extension headers; `send` rewrites the TTL there),
/// a TTL that does not expire here, a sound IPv4 header, and settings (the
/// agent writes them before it attaches XDP). Anything else,
/// which the stack drops or answers (time exceeded), is tc's.
#[inline(always)]
fn sendable<A: Ip>(ctx: &XdpContext, p: &Packet<A>) -> bool {
    let (data, end) = (ctx.data(), ctx.data_end());
    if !p.in_place() || data + ETH_HLEN + A::HLEN > end || config().is_none() {
        return false;
    }
    // SAFETY: inside the IP header, just checked against the packet's end.
    let ttl = unsafe { *((data + ETH_HLEN + A::TTL) as *const u8) };
    ttl > 1 && A::header_ok::<XdpContext, ETH_HLEN>(ctx, true)
}

/// A TCP or UDP packet (or later fragment) at XDP: sent on translated if
/// its flow's next hop is behind the device it came in on or another one
/// the fast path runs on, else passed to tc untouched. How it was sent is
/// remembered for the flow's next packets (`flow_cache`), from its second
/// packet on.
#[inline(always)]
pub fn forward<F: Family>(ctx: &XdpContext, p: &mut Packet<F::Addr>) -> i32 {
    if !sendable::<F::Addr>(ctx, p) {
        return PASS;
    }
    flow_cache::note(p);
    let mut hop = Forward::new(ctx);
    let v = nodeport::ingress::<ETH_HLEN, _, F, _>(ctx, p, &mut hop);
    if hop.egress == 0 {
        // Nothing changed: tc decides, told what XDP found.
        if hop.said & NOT_OURS != 0 {
            tell_tc(ctx, XDP_META_NOT_OURS);
        } else if hop.said & (HANDED | FIRST) == HANDED {
            flow_cache::remember_handed::<F::Addr>(ctx);
        }
        return PASS;
    }
    if v != Verdict::Pass
        || nodeport::egress::<ETH_HLEN, _, F, Forward<'_>>(ctx, p) == Verdict::Drop
    {
        return DROP;
    }
    // A flow's first packet leaves no cache entry: its second packet
    // writes it, so a flow of one datagram (a DNS query) never pays the
    // insert.
    if flow_cache::cacheable(p) && hop.said & FIRST == 0 {
        flow_cache::remember(ctx, p, hop.egress, hop.mtu);
    }
    hop.send::<F::Addr>()
}
