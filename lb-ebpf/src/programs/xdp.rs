//! The XDP program on the node's external (Ethernet) devices: `lb_xdp`,
//! the fast path over `lb_ebpf::xdp` for both families. Packets it does
//! not send on itself go up to the tc programs untouched.

use aya_ebpf::{bindings::xdp_action, macros::xdp, programs::XdpContext};
use lb_common::At;
use lb_ebpf::{
    dispatch::{Handler, parse},
    family::Family,
    flow_cache,
    packet::{ETH_HLEN, Packet},
    xdp::forward,
};

const PASS: i32 = xdp_action::XDP_PASS as i32;

#[xdp]
pub(crate) fn lb_xdp(ctx: XdpContext) -> u32 {
    // A flow sent this second: one lookup. Anything else: the full path.
    if let Some(verdict) = flow_cache::hit(&ctx) {
        return verdict as u32;
    }
    parse::<ETH_HLEN, _, _>(&ctx, Fast(&ctx)) as u32
}

/// What XDP does with each packet: flows it may forward; the rest is tc's.
struct Fast<'a>(&'a XdpContext);

impl Handler for Fast<'_> {
    const AT: At = At::XDP;

    #[inline(always)]
    fn flow<F: Family>(self, p: &mut Packet<F::Addr>) -> i32 {
        forward::<F>(self.0, p)
    }

    #[inline(always)]
    fn icmp_error<F: Family>(self, _l3: usize, _l4: usize) -> i32 {
        PASS
    }

    #[inline(always)]
    fn unknown_fragment<F: Family>(self) -> i32 {
        PASS
    }

    #[inline(always)]
    fn unparsed(self) -> i32 {
        PASS
    }
}
