//! The tc programs on the node's external devices: entry points over
//! `lb_ebpf::nodeport`, which holds what they do with each packet, for
//! both families. Each program comes twice: for Ethernet devices, and
//! (`lb_tc_l3_*`) for devices without a link-layer header (WireGuard, IPIP,
//! TUN). `lb_tc_pod_*` run on the host-side interfaces of pods that opted
//! out of socket load balancing, over the same library. Program names stay within the kernel's 15 characters, by which
//! clsact filters are found again.
//!
//! Packets the library does not translate are passed on untouched
//! (`TC_ACT_UNSPEC`, which TCX reads as "next program"), as are packets it
//! cannot parse. A failed rewrite leaves a packet the kernel's checksum
//! checks drop.

use core::marker::PhantomData;

use aya_ebpf::{
    bindings::{TC_ACT_REDIRECT, TC_ACT_SHOT, TC_ACT_UNSPEC},
    macros::classifier,
    programs::TcContext,
};
use lb_common::At;
use lb_ebpf::{
    ctx::PacketCtx as _,
    dispatch::{Handler, parse},
    family::Family,
    nodeport::{self, Hook, PodEgress, PodIngress, TcEgress, TcIngress, Verdict},
    packet::{ETH_HLEN, Packet},
};

const PASS: i32 = TC_ACT_UNSPEC;

#[classifier]
pub(crate) fn lb_tc_ingress(ctx: TcContext) -> i32 {
    parse::<ETH_HLEN, _, _>(&ctx, Ingress::<ETH_HLEN, TcIngress>(&ctx, PhantomData))
}

#[classifier]
pub(crate) fn lb_tc_egress(ctx: TcContext) -> i32 {
    parse::<ETH_HLEN, _, _>(&ctx, Egress::<ETH_HLEN, TcEgress>(&ctx, PhantomData))
}

/// A pod's host-side interface, ingress: the pod's packets (a pod that
/// opted out of socket load balancing, or any with
/// `--bpf-lb-sock-hostns-only`).
#[classifier]
pub(crate) fn lb_tc_pod_in(ctx: TcContext) -> i32 {
    parse::<ETH_HLEN, _, _>(&ctx, Ingress::<ETH_HLEN, PodIngress>(&ctx, PhantomData))
}

/// A pod's host-side interface, egress: packets to the pod.
#[classifier]
pub(crate) fn lb_tc_pod_out(ctx: TcContext) -> i32 {
    parse::<ETH_HLEN, _, _>(&ctx, Egress::<ETH_HLEN, PodEgress>(&ctx, PhantomData))
}

#[classifier]
pub(crate) fn lb_tc_l3_in(ctx: TcContext) -> i32 {
    parse::<0, _, _>(&ctx, Ingress::<0, TcIngress>(&ctx, PhantomData))
}

#[classifier]
pub(crate) fn lb_tc_l3_out(ctx: TcContext) -> i32 {
    parse::<0, _, _>(&ctx, Egress::<0, TcEgress>(&ctx, PhantomData))
}

/// tc's return code for a verdict.
#[inline(always)]
fn code(ctx: &TcContext, v: Verdict) -> i32 {
    match v {
        Verdict::Pass => PASS,
        Verdict::Bounce => ctx.bounce(),
        Verdict::Redirected => TC_ACT_REDIRECT,
        Verdict::Drop => TC_ACT_SHOT,
    }
}

/// What ingress does with each packet, as hook `H` (a node's device, or
/// a pod's).
struct Ingress<'a, const L2: usize, H>(&'a TcContext, PhantomData<H>);

impl<const L2: usize, H: Hook + Default> Handler for Ingress<'_, L2, H> {
    const AT: At = H::AT;

    #[inline(always)]
    fn flow<F: Family>(self, p: &mut Packet<F::Addr>) -> i32 {
        code(
            self.0,
            nodeport::ingress::<L2, _, F, _>(self.0, p, &mut H::default()),
        )
    }

    #[inline(always)]
    fn icmp_error<F: Family>(self, l3: usize, l4: usize) -> i32 {
        code(self.0, nodeport::ingress_icmp::<_, F, H>(self.0, l3, l4))
    }

    #[inline(always)]
    fn unknown_fragment<F: Family>(self) -> i32 {
        code(self.0, nodeport::unknown_fragment::<F, H>())
    }

    #[inline(always)]
    fn unparsed(self) -> i32 {
        PASS
    }
}

/// What egress does with each packet, as hook `H`.
struct Egress<'a, const L2: usize, H>(&'a TcContext, PhantomData<H>);

impl<const L2: usize, H: Hook + Default> Handler for Egress<'_, L2, H> {
    const AT: At = H::AT;

    #[inline(always)]
    fn flow<F: Family>(self, p: &mut Packet<F::Addr>) -> i32 {
        code(self.0, nodeport::egress::<L2, _, F, H>(self.0, p))
    }

    #[inline(always)]
    fn icmp_error<F: Family>(self, l3: usize, l4: usize) -> i32 {
        code(self.0, nodeport::egress_icmp::<_, F, H>(self.0, l3, l4))
    }

    #[inline(always)]
    fn unknown_fragment<F: Family>(self) -> i32 {
        code(self.0, nodeport::unknown_fragment::<F, H>())
    }

    #[inline(always)]
    fn unparsed(self) -> i32 {
        PASS
    }
}
