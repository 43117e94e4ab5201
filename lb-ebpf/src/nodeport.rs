//! Per-packet load balancing of traffic from outside the node, for either
//! family ([`Family`]) on any packet context ([`PacketCtx`]): what the tc
//! programs do with each packet (`lb_common::ct` describes the halves and
//! the state machine). The program files call these and turn the
//! [`Verdict`] into their hook's return code.
//!
//! Ingress: replies of SNATed flows get their client back; packets of
//! known flows are DNATed to their backend; the first packet of a flow to
//! an external frontend (`SCOPE_EXTERNAL`) picks a backend, records the
//! flow in both directions and is DNATed. TCP without SYN and without a
//! flow of ours is left to the kernel, whose conntrack may translate it
//! (kube-proxy's flows, when the agent took over), but at a frontend with
//! Maglev and DSR, where it is a flow another node had (mid-flow failover).
//! Egress: replies to clients get their frontend back as source; packets
//! of `externalTrafficPolicy: Cluster` flows leaving towards a backend on
//! another node are SNATed to the node address.
//!
//! Later fragments of a datagram follow its first one (`packet`). ICMP
//! errors about a translated flow are translated as the packet they quote
//! would be, quote included, so that path-MTU discovery and port
//! unreachables reach the socket they concern: towards the client (the
//! quote names the backend) and towards the backend (the quote names the
//! frontend, as the client saw the reply).

use core::mem::MaybeUninit;

use aya_ebpf::btf_maps::lpm_trie::Key;
use lb_common::{
    At, CFG_F_MIDFLOW, CFG_F_XDP, CT_DIR_IN, CT_DIR_OUT, CT_DIR_POD_IN, CT_DIR_POD_OUT, CT_F_DSR,
    CT_F_KERNEL, CT_F_SNAT, CtKey, CtValue, DatapathConfig, DsrEndpointKey, FE_F_DSR,
    FE_F_EXTERNAL_LOCAL, FE_F_MAGLEV, FE_F_SOURCE_RANGES, FlowHash, FrontendKey, NatKey,
    PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, Reason, SCOPE_INTERNAL, TCP_ACK, TCP_SYN, XDP_FOUND_FLOW,
    XDP_FOUND_KERNEL, XDP_META_FOUND, XDP_META_NOT_OURS, XdpFound, ct_advance_one_sided, ct_closed,
    ct_closing_one_sided, ct_expired, ct_new_expiry, ct_takes_token, ports_word, seen_bits,
};

use crate::{
    clock::now,
    ct::{
        advance, allocate_port, config, ct_entry, hold_nat, mirror, nat_entry, one_sided,
        take_syn_token,
    },
    ctx::{PacketCtx, code, errno},
    dsr,
    family::Family,
    fib,
    lb::{Random, Selection, Strategy, read_state, select},
    maps::maybe_frontend,
    packet::{IcmpError, Ip, Packet},
    reject::{self, Answer as _, reject},
    stats::count,
};

pub use crate::verdict::Verdict;
use Verdict::{Drop as DROP, Pass as PASS};

/// What differs between the hooks that run this logic: tc, which decides
/// on every packet, and XDP, which runs first and translates only what it
/// forwards itself, leaving everything else untouched to tc.
pub trait Hook {
    /// Whether tc sees what this hook passes: then what is not forwarded
    /// here is passed untouched and uncounted, for tc to decide and count.
    const FIRST: bool;
    /// Where this hook counts: its program and direction.
    const AT: At;
    /// Whether this hook runs on a pod's host-side interface, for a pod
    /// that opted out of socket load balancing: its packets' frontends are
    /// the socket programs' (cluster IPs, and this node's NodePorts and
    /// external addresses with the cluster's endpoints), and its flows are
    /// kept under `CT_DIR_POD_*`, where no packet from outside finds them.
    const POD: bool = false;
    /// Whether this hook counts `reason`: a first hook leaves to tc what
    /// tc decides, and counts, after it.
    #[inline(always)]
    fn counts(_reason: Reason) -> bool {
        true
    }
    /// Whether to translate packet `p`, which then goes to `dst`: called
    /// before anything of the packet or its flow changes.
    #[inline(always)]
    fn admit<F: Family>(&mut self, _p: &Packet<F::Addr>, _dst: &F::Addr) -> bool {
        true
    }
    /// The packet, looked up, is no frontend's nor any flow's of ours.
    #[inline(always)]
    fn not_ours(&mut self) {}
    /// The packet started a flow, now recorded.
    #[inline(always)]
    fn recorded(&mut self) {}
    /// A first hook passes up a packet of a flow of ours, whose
    /// destination becomes `addr:port_be` (or, `kernel`, a kernel flow,
    /// which tc passes): whether tc will be told so
    /// ([`lb_common::XdpFound`]). If it will, this hook advances the flow
    /// (or records it) as tc would have, and tc only rewrites; if not,
    /// nothing changes here, and tc decides alone.
    #[inline(always)]
    fn hand_over<F: Family>(&mut self, _addr: &F::Addr, _port_be: u16, _kernel: bool) -> bool {
        false
    }
}

/// The tc ingress programs: every packet is theirs to decide.
#[derive(Default)]
pub struct TcIngress;

impl Hook for TcIngress {
    const FIRST: bool = false;
    const AT: At = At::TC_IN;
}

/// The tc egress programs.
#[derive(Default)]
pub struct TcEgress;

impl Hook for TcEgress {
    const FIRST: bool = false;
    const AT: At = At::TC_OUT;
}

/// The tc ingress program of a pod's host-side interface: the pod's
/// packets.
#[derive(Default)]
pub struct PodIngress;

impl Hook for PodIngress {
    const FIRST: bool = false;
    const AT: At = At::POD_IN;
    const POD: bool = true;
}

/// The tc egress program of a pod's host-side interface: packets to the
/// pod.
#[derive(Default)]
pub struct PodEgress;

impl Hook for PodEgress {
    const FIRST: bool = false;
    const AT: At = At::POD_OUT;
    const POD: bool = true;
}

/// The conntrack direction of a client's packets at hook `H`.
#[inline(always)]
const fn dir_in<H: Hook>() -> u8 {
    if H::POD { CT_DIR_POD_IN } else { CT_DIR_IN }
}

/// The conntrack direction of a backend's replies at hook `H`.
#[inline(always)]
const fn dir_out<H: Hook>() -> u8 {
    if H::POD { CT_DIR_POD_OUT } else { CT_DIR_OUT }
}

/// The frontend packet `p` is addressed to, as hook `H` looks it up.
#[inline(always)]
fn frontend_of<H: Hook, A: Ip>(p: &Packet<A>) -> FrontendKey<A> {
    let mut key = p.frontend();
    if H::POD {
        key.scope = SCOPE_INTERNAL;
    }
    key
}

/// Counts `reason` of family `F` where hook `H` counts it, if it does.
#[inline(always)]
fn count_at<H: Hook, F: Family>(reason: Reason) {
    if H::counts(reason) {
        count::<F::Addr>(H::AT, reason);
    }
}

/// A later fragment whose first one was not seen: its ports are unknown,
/// so whether it is ours is too.
#[inline(always)]
pub fn unknown_fragment<F: Family, H: Hook>() -> Verdict {
    count_at::<H, F>(Reason::DropFragmentUnknown);
    DROP
}

/// The conntrack key of a packet from `src` to `dst` (address, port; as
/// the packet holds them) in direction `dir`.
#[inline(always)]
fn ct_key<A>(src: (A, u16), dst: (A, u16), proto: u8, dir: u8) -> CtKey<A> {
    CtKey {
        saddr_be: src.0,
        daddr_be: dst.0,
        sport_be: src.1,
        dport_be: dst.1,
        proto,
        dir,
        _pad0: [0; 2],
    }
}

/// The SNAT key of a packet from `src` to `dst`.
#[inline(always)]
fn nat_key<A>(src: (A, u16), dst: (A, u16), proto: u8) -> NatKey<A> {
    NatKey {
        saddr_be: src.0,
        daddr_be: dst.0,
        sport_be: src.1,
        dport_be: dst.1,
        proto,
        _pad0: [0; 3],
    }
}

/// What became of a packet at the first step of ingress or egress.
enum Step {
    Done(Verdict),
    /// Not a packet of a known flow: the next step's.
    New,
    /// Ingress: a packet carrying a DSR frontend, of no entry yet. Egress:
    /// a DNATed packet of a DSR flow, to carry its frontend.
    Dsr,
    /// Ingress: a TCP segment without SYN and without a flow of ours
    /// ([`untracked`] says whose it is).
    Untracked,
}

/// A TCP, UDP (or later fragment) packet arriving at the node.
///
/// Its steps are BPF functions of their own, called one after the other
/// from here: their stacks do not add up (the verifier's limit is 512
/// bytes over a chain of calls), and IPv6's keys are large.
#[inline(always)]
pub fn ingress<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
) -> Verdict {
    // A packet the XDP fast path looked up already: no frontend's nor
    // flow's of ours, or a flow of ours XDP advanced and left to tc.
    if !H::FIRST && !H::POD && config().is_some_and(|c| c.flags & CFG_F_XDP != 0) {
        match xdp_found::<L2, C, F>(ctx, p) {
            Step::Done(v) => return v,
            Step::New | Step::Dsr | Step::Untracked => {}
        }
    }
    // A DSR flow's packet from the node that load-balanced it (with IPv4
    // options or IPv6 extension headers only): tc's alone, as it changes
    // the packet's length.
    if !H::FIRST && !H::POD && !p.in_place() {
        match dsr_restore::<L2, C, F>(ctx, p) {
            Step::Done(v) => return v,
            Step::Dsr if dsr_allowed::<L2, C, F>(ctx, p) => {
                return dsr_start::<L2, C, F>(ctx, p);
            }
            Step::Dsr => {
                count_at::<TcIngress, F>(Reason::DropDsrInvalid);
                return DROP;
            }
            Step::New | Step::Untracked => {}
        }
    }
    match known::<L2, C, F, H>(ctx, p, h) {
        Step::Done(v) => v,
        // A first hook leaves these to tc (`known` never says so there).
        Step::Untracked if H::FIRST => PASS,
        Step::Untracked => {
            let failover = !H::POD && config().is_some_and(|c| c.flags & CFG_F_MIDFLOW != 0);
            match untracked::<F, H>(p, failover) {
                UNTRACKED_FAILOVER => {
                    count_at::<TcIngress, F>(Reason::MidflowTakenOver);
                    new_flow::<L2, C, F, H>(ctx, p, h)
                }
                UNTRACKED_FRONTEND => {
                    count_at::<H, F>(Reason::PassedUntracked);
                    PASS
                }
                _ => PASS,
            }
        }
        Step::New | Step::Dsr => new_flow::<L2, C, F, H>(ctx, p, h),
    }
}

/// What the XDP program on the device found of packet `p`, if it left that
/// in the packet's metadata: passed at once (not ours, or a kernel flow),
/// or its destination rewritten (a flow of ours XDP advanced or recorded);
/// [`Step::New`] when it left nothing, or nothing of this family. A BPF
/// function of its own: what it reads stays off the frame of the steps.
#[inline(never)]
fn xdp_found<const L2: usize, C: PacketCtx, F: Family>(ctx: &C, p: &mut Packet<F::Addr>) -> Step {
    match ctx.xdp_meta::<u32>() {
        Some(XDP_META_NOT_OURS) => {
            count_at::<TcIngress, F>(Reason::PassedXdpChecked);
            return Step::Done(PASS);
        }
        Some(XDP_META_FOUND) => {}
        _ => return Step::New,
    }
    let Some(found) = ctx.xdp_meta::<XdpFound<F::Addr>>() else {
        return Step::New;
    };
    if usize::from(found.addr_len) != size_of::<F::Addr>() {
        return Step::New;
    }
    count_at::<TcIngress, F>(Reason::PassedXdpChecked);
    match found.what {
        XDP_FOUND_FLOW => settle(
            p.rewrite::<L2, C>(ctx, true, found.addr_be, found.port_be)
                .map(|()| Step::Done(PASS)),
        ),
        XDP_FOUND_KERNEL => {
            count_at::<TcIngress, F>(Reason::PassedUntracked);
            Step::Done(PASS)
        }
        _ => Step::New,
    }
}

/// The first packet of a flow: picks its backend, records the flow, or
/// rejects or drops it. Its steps are BPF functions called from here.
#[inline(always)]
fn new_flow<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
) -> Verdict {
    let mut backend = MaybeUninit::uninit();
    match choose::<F, H>(p, h, &mut backend) {
        Chosen::Done(v) => v,
        Chosen::Reject => reject::<L2, C, F>(ctx, p, !H::POD),
        Chosen::Backend => {
            // SAFETY: `choose` initializes the backend when it says so.
            let b = unsafe { backend.assume_init_mut() };
            // A client on its backend's node would never get a DSR answer:
            // it is SNATed instead. (A BPF function of its own, called
            // from here: its keys stay off `record`'s frame.)
            // A first hook leaves DSR frontends' flows to tc.
            // A pod sent to itself through a Service: its answer would
            // stay inside it, never reversed, unless it comes from the node.
            if H::POD {
                b.hairpin = p.saddr == b.addr;
            } else if !H::FIRST {
                b.hairpin = b.fe_flags & FE_F_DSR != 0 && same_node::<F>(&p.saddr, &b.addr);
            }
            record::<L2, C, F, H>(ctx, p, h, b)
        }
    }
}

/// A step's result, errors (a failed rewrite) dropping the packet.
///
/// The steps that are BPF functions return what fits a register: a
/// `Result` would come back through a pointer to the caller's stack, which
/// LLVM also returns in `r0`, and the verifier refuses a stack pointer
/// returned.
#[inline(always)]
fn settle<T: From<Verdict>>(r: Result<T, i64>) -> T {
    r.unwrap_or(T::from(DROP))
}

impl From<Verdict> for Step {
    fn from(v: Verdict) -> Self {
        Step::Done(v)
    }
}

/// A packet carrying a DSR flow's frontend ([`dsr::carried`]): refreshes
/// the flow's reply entry (a [`CT_F_DSR`] entry keyed by the backend's
/// reply, which gives it the frontend as its source at egress) and takes
/// the option out; [`Step::Dsr`] when there is no such entry yet (the
/// caller checks the packet, [`dsr_allowed`], and starts one,
/// [`dsr_start`]); [`Step::New`] for a packet without the option.
///
/// Anyone can put an option in a packet, and the entry it writes changes
/// how the backend's packets to the client look. So a packet starts such
/// an entry only where it can be a DSR flow's, never over a live entry of
/// another flow, and, TCP, with a token of the budget of unconfirmed
/// flows, as any new flow; a packet that may not is dropped and counted
/// (`tc_drop_dsr_invalid`). The steps are BPF functions called one after
/// the other, as in [`ingress`]: the FIB lookup's frame adds to the
/// program's only.
#[inline(never)]
fn dsr_restore<const L2: usize, C: PacketCtx, F: Family>(ctx: &C, p: &mut Packet<F::Addr>) -> Step {
    let Some(frontend) = dsr::carried::<L2, C, F::Addr>(ctx) else {
        return Step::New;
    };
    settle(dsr_refresh::<L2, C, F>(ctx, p, frontend))
}

#[inline(always)]
fn dsr_refresh<const L2: usize, C: PacketCtx, F: Family>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    frontend: (F::Addr, u16),
) -> Result<Step, i64> {
    let Some(cfg) = config() else {
        return Ok(Step::New);
    };
    let (t, now) = (cfg.timeouts(), now());
    // The backend's reply runs backend -> client.
    let key = ct_key(p.dst(), p.src(), p.proto, CT_DIR_OUT);
    let syn = p.proto == PROTO_TCP && p.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    if let Some(entry) = ct_entry::<F>(&key, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let ct = unsafe { *entry };
        let dsr = ct.flags & (CT_F_DSR | CT_F_KERNEL) == CT_F_DSR;
        // A new connection from the client's port of a closed one.
        let reopened = syn && dsr && ct_closed(ct.seen_client, ct.seen_backend);
        if !ct_expired(ct.expires, now) && !reopened {
            if !dsr || (ct.addr_be, ct.port_be) != frontend {
                // Another flow's entry, or another frontend's.
                count_at::<TcIngress, F>(Reason::DropDsrInvalid);
                return Ok(Step::Done(DROP));
            }
            if !p.later_fragment {
                // SAFETY: `entry` was looked up in the conntrack map by this run.
                unsafe { advance(entry, &t, p.proto, p.tcp_flags, true, false, now) };
            }
            dsr::strip::<L2, C, F::Addr>(ctx)?;
            return Ok(Step::Done(PASS));
        }
    }
    Ok(Step::Dsr)
}

/// Whether the packet `p` may start a DSR flow's reply entry with the
/// frontend it carries: it is no later fragment (whose first fragment
/// started none), it is to an endpoint on this node of that frontend,
/// which forwards by DSR (`LB4_DSR_EPS`: a NodePort's under the all-zero
/// address, as every node's address serves it), and its client is
/// reached back through the device it came in on, where this node's
/// replies get the frontend back (never a local address, nor a pod of
/// this node: their answers would leave by no device of ours; a node
/// balancing for them SNATs).
#[inline(never)]
fn dsr_allowed<const L2: usize, C: PacketCtx, F: Family>(ctx: &C, p: &Packet<F::Addr>) -> bool {
    let Some(frontend) = dsr::carried::<L2, C, F::Addr>(ctx) else {
        return false;
    };
    if p.later_fragment {
        return false;
    }
    let mut key = DsrEndpointKey {
        frontend_be: frontend.0,
        endpoint_be: p.daddr,
        frontend_port_be: frontend.1,
        endpoint_port_be: p.dport_be,
        proto: p.proto,
        _pad0: [0; 3],
    };
    if F::dsr_eps().get_ptr(key).is_none() {
        key.frontend_be = F::Addr::default();
        if F::dsr_eps().get_ptr(key).is_none() {
            return false;
        }
    }
    fib::out_device(ctx, &p.daddr, &p.saddr, p.proto) == ctx.ifindex()
}

/// Starts the reply entry of a DSR flow [`dsr_allowed`] admitted, and
/// takes the option out.
#[inline(never)]
fn dsr_start<const L2: usize, C: PacketCtx, F: Family>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Verdict {
    settle(dsr_record::<L2, C, F>(ctx, p))
}

#[inline(always)]
fn dsr_record<const L2: usize, C: PacketCtx, F: Family>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Result<Verdict, i64> {
    let (Some(frontend), Some(cfg)) = (dsr::carried::<L2, C, F::Addr>(ctx), config()) else {
        return Ok(DROP);
    };
    // Its backend has not answered yet: unconfirmed.
    if p.proto == PROTO_TCP && !take_syn_token(cfg) {
        count_at::<TcIngress, F>(Reason::DropSynBudget);
        return Ok(DROP);
    }
    let value = CtValue {
        addr_be: frontend.0,
        port_be: frontend.1,
        flags: CT_F_DSR,
        nat_addr_be: F::Addr::default(),
        nat_port_be: 0,
        seen_client: seen_bits(p.proto, p.tcp_flags),
        seen_backend: 0,
        backend_id: 0,
        expires: ct_new_expiry(&cfg.timeouts(), p.proto, now()),
    };
    // Without memory for it, the reply would leave with the backend's
    // address, which the client refuses: drop. (The key's entry, if any,
    // is dead or a closed one's: [`dsr_restore`] said so.)
    let key = ct_key(p.dst(), p.src(), p.proto, CT_DIR_OUT);
    if F::ct().insert(key, value, 0).is_err() {
        count_at::<TcIngress, F>(Reason::DropConntrackInsert);
        return Ok(DROP);
    }
    count_at::<TcIngress, F>(Reason::DsrRestored);
    dsr::strip::<L2, C, F::Addr>(ctx)?;
    Ok(PASS)
}

/// Ingress of a packet of a known flow, or of a SNATed flow's reply.
#[inline(never)]
fn known<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
) -> Step {
    settle(known_nat::<L2, C, F, H>(ctx, p, h))
}

#[inline(always)]
fn known_nat<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
) -> Result<Step, i64> {
    let now = now();
    let Some(cfg) = config() else {
        return Ok(Step::Done(PASS));
    };
    // A reply from a backend on another node to the port its flow was
    // SNATed to: back to the client. Egress then restores the frontend and
    // advances the flow. Only packets to the SNAT address and the ports
    // flows may hold pay the lookup.
    if F::snat(cfg) == p.daddr
        && cfg.nat_reply_port(u16::from_be(p.dport_be))
        && let Some(nat) = nat_entry::<F>(&nat_key(p.src(), p.dst(), p.proto), cfg)
    {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let client = unsafe { *nat };
        // A pod answers only its own hairpin flows through the node's
        // address (it is their client and their backend): it may not reach
        // another flow's client that way.
        let foreign = H::POD && client.addr_be != p.saddr;
        if !ct_expired(client.expires, now) && !foreign {
            // Ingress changes no entry of a reply: a first hook that does
            // not send it on only tells tc what it found.
            if client.flags & CT_F_KERNEL != 0 {
                if H::FIRST {
                    h.hand_over::<F>(&client.addr_be, client.port_be, true);
                } else {
                    count_at::<H, F>(Reason::PassedUntracked);
                }
                return Ok(Step::Done(PASS));
            }
            if !h.admit::<F>(p, &client.addr_be) {
                h.hand_over::<F>(&client.addr_be, client.port_be, false);
                return Ok(Step::Done(PASS));
            }
            p.rewrite::<L2, C>(ctx, true, client.addr_be, client.port_be)?;
            return Ok(Step::Done(PASS));
        }
    }
    known_flow::<L2, C, F, H>(ctx, p, h, cfg, now)
}

/// A packet from a client: its flow's backend, or a new flow.
#[inline(always)]
fn known_flow<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
    cfg: &DatapathConfig,
    now: u32,
) -> Result<Step, i64> {
    let t = cfg.timeouts();
    let key = ct_key(p.src(), p.dst(), p.proto, dir_in::<H>());
    let syn = p.proto == PROTO_TCP && p.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    if let Some(entry) = ct_entry::<F>(&key, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let ct = unsafe { *entry };
        let kernel = ct.flags & CT_F_KERNEL != 0;
        let one_sided = one_sided(ct.flags);
        let closed = if one_sided {
            ct_closing_one_sided(ct.seen_client)
        } else {
            ct_closed(ct.seen_client, ct.seen_backend)
        };
        // A new connection on the port of a closed flow, or of one the
        // kernel had, is a new flow of ours: it picks a backend again.
        let reopened = syn && (kernel || closed);
        if !ct_expired(ct.expires, now) && !reopened {
            // A first hook leaves the kernel's flows, and what it does not
            // forward, to tc; DSR flows too (XDP cannot insert the option).
            // It advances them only if tc is told so, before anything
            // changes; else tc looks them up again.
            let up =
                H::FIRST && (kernel || ct.flags & CT_F_DSR != 0 || !h.admit::<F>(p, &ct.addr_be));
            if up && !h.hand_over::<F>(&ct.addr_be, ct.port_be, kernel) {
                return Ok(Step::Done(PASS));
            }
            if !p.later_fragment {
                // SAFETY: `entry` was looked up in the conntrack map by this run.
                let (after, changed) =
                    unsafe { advance(entry, &t, p.proto, p.tcp_flags, true, one_sided, now) };
                if changed && !kernel {
                    mirror::<F>(&key.partner(&ct), &after, true, cfg);
                }
            }
            if up {
                return Ok(Step::Done(PASS));
            }
            if kernel {
                // kube-proxy's flow, which the kernel's conntrack translates.
                count_at::<H, F>(Reason::PassedUntracked);
                return Ok(Step::Done(PASS));
            }
            p.rewrite::<L2, C>(ctx, true, ct.addr_be, ct.port_be)?;
            return Ok(Step::Done(PASS));
        }
    }
    if p.later_fragment {
        // Its first fragment started no flow of ours.
        return Ok(Step::Done(PASS));
    }
    if p.proto == PROTO_TCP && !syn {
        // Only a SYN starts a flow, but for mid-flow failover. Anything
        // else without one is a flow the kernel may know (kube-proxy's,
        // when the agent took over) or none: the kernel translates it, or
        // resets it as a reset backend would.
        if H::FIRST {
            if F::frontends().get_ptr(frontend_of::<H, _>(p)).is_none() {
                h.not_ours();
            }
            return Ok(Step::Done(PASS));
        }
        return Ok(Step::Untracked);
    }
    Ok(Step::New)
}

/// [`untracked`]: the segment is to no frontend of ours.
const UNTRACKED_NONE: u32 = 0;
/// [`untracked`]: to a frontend, left to the kernel.
const UNTRACKED_FRONTEND: u32 = 1;
/// [`untracked`]: to a frontend that takes flows over mid-flow.
const UNTRACKED_FAILOVER: u32 = 2;

/// What becomes of a TCP segment without SYN and without a flow of ours.
/// With `failover` (`CFG_F_MIDFLOW`), one to a frontend with a
/// Maglev table and DSR is a flow another node balanced until the router
/// in front moved it here: this node's table names the same backend, and
/// DSR lets the backend answer the client as before, so the flow starts
/// here as if new. A SNATed flow could not move: its backend knows it by
/// the other node's address.
#[inline(never)]
fn untracked<F: Family, H: Hook>(p: &Packet<F::Addr>, failover: bool) -> u32 {
    let key = frontend_of::<H, _>(p);
    let Some(id) = F::frontends().get_ptr(key) else {
        return UNTRACKED_NONE;
    };
    if !failover {
        return UNTRACKED_FRONTEND;
    }
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    match read_state::<F>(unsafe { (*id).id }) {
        Some(s)
            if s.owner == key && s.flags & (FE_F_MAGLEV | FE_F_DSR) == FE_F_MAGLEV | FE_F_DSR =>
        {
            UNTRACKED_FAILOVER
        }
        _ => UNTRACKED_FRONTEND,
    }
}

/// What the first packet of a flow gets.
enum Chosen {
    Done(Verdict),
    /// Refused: a frontend without endpoints.
    Reject,
    /// The backend [`choose`] wrote.
    Backend,
}

/// A new flow's backend, as [`choose`] picked it.
struct Backend<A> {
    addr: A,
    port_be: u16,
    /// Its id in the backends map, and its frontend's `FE_F_*` flags.
    id: u32,
    fe_flags: u16,
    /// A DSR frontend's client on this backend's node ([`same_node`]).
    hairpin: bool,
    /// A first hook does not send the packet on itself: it records the
    /// flow and hands the packet over to tc ([`Hook::hand_over`]).
    up: bool,
}

/// How the first packet of a flow picks its backend: by the flow's hash in
/// a frontend's Maglev table, else at random.
///
/// "At random" is a hash of the flow's addresses and ports with a seed the
/// agent chose at random (`nat_seed`, turned so as not to be the SNAT's or
/// Maglev's hash): every backend gets its share of flows, as with
/// kube-proxy's random rules, and every hook that looks at a packet picks
/// the same backend for it. The XDP fast path picks first and leaves a flow
/// it cannot send on (a backend on this node, say) to tc, which then picks
/// that very backend again rather than drawing anew, which would give the
/// backends XDP cannot reach too few flows.
struct NewFlow<'a, A>(&'a Packet<A>);

/// Turns `nat_seed` into the seed of the random pick's hash.
const PICK_SEED_TURN: u32 = 0x5bd1_e995;

impl<A: Ip> NewFlow<'_, A> {
    /// The hash of the flow's source, its ports (`sport_be` for the
    /// source's) and protocol, with `seed`.
    #[inline(always)]
    fn hash(&self, seed: u32, sport_be: u16) -> u32 {
        let p = self.0;
        p.saddr
            .hash(FlowHash::new(seed))
            .word(ports_word(sport_be, p.dport_be))
            .word(u32::from(p.proto))
            .finish()
    }
}

impl<A: Ip> Strategy for NewFlow<'_, A> {
    #[inline(always)]
    fn slot(&self, fe_id: u32, count: u16) -> u16 {
        let seed = config().map_or(0, |c| c.nat_seed) ^ PICK_SEED_TURN;
        Random(self.hash(seed, self.0.sport_be)).slot(fe_id, count)
    }

    #[inline(always)]
    fn flow_hash(&self, affinity: bool) -> Option<u32> {
        let seed = config().map_or(0, |c| c.maglev_seed);
        let sport_be = if affinity { 0 } else { self.0.sport_be };
        Some(self.hash(seed, sport_be))
    }
}

/// The first packet of a flow: picks a backend of its external frontend,
/// written to `backend`. A first hook (`H::FIRST`) passes every other
/// outcome on to tc, which counts it and drops or rejects.
#[inline(never)]
fn choose<F: Family, H: Hook>(
    p: &Packet<F::Addr>,
    h: &mut H,
    backend: &mut MaybeUninit<Backend<F::Addr>>,
) -> Chosen {
    let frontend = frontend_of::<H, _>(p);
    // A pod's packet is the socket path's: only addresses that may be
    // frontends pay the lookups, and a cluster IP's wildcard tells its
    // undefined ports.
    if H::POD && !maybe_frontend(F::addr_bit(&frontend.addr_be)) {
        return Chosen::Done(PASS);
    }
    // Session affinity by client address, as kube-proxy's ClientIP.
    let selection = select::<F>(&frontend, H::POD, &NewFlow(p), || {
        F::affinity_client(&p.saddr)
    });
    // loadBalancerSourceRanges come first, as kube-proxy's firewall does:
    // a source outside them is dropped, endpoints or not.
    if let Selection::Backend { flags, .. }
    | Selection::NoEndpoints { flags }
    | Selection::NoLocalEndpoints { flags } = selection
        && flags & FE_F_SOURCE_RANGES != 0
        && !F::in_source_ranges(&frontend, p.saddr)
    {
        if H::FIRST {
            return Chosen::Done(PASS);
        }
        count_at::<H, F>(Reason::DropSourceRange);
        return Chosen::Done(DROP);
    }
    if H::FIRST && !matches!(selection, Selection::Backend { .. }) {
        if matches!(selection, Selection::NotFrontend | Selection::UnknownPort) {
            h.not_ours();
        }
        return Chosen::Done(PASS);
    }
    // XDP cannot insert DSR's option (a flow to a remote backend), nor know
    // before the FIB lookup whether it must: tc takes DSR frontends' new
    // flows whole.
    if H::FIRST
        && let Selection::Backend { flags, .. } = selection
        && flags & FE_F_DSR != 0
    {
        return Chosen::Done(PASS);
    }
    match selection {
        Selection::NotFrontend => Chosen::Done(PASS),
        Selection::UnknownPort if H::POD => {
            // The socket path refuses these too.
            count_at::<H, F>(Reason::RefusedUnknownPort);
            Chosen::Reject
        }
        Selection::UnknownPort => Chosen::Done(PASS),
        Selection::Removed => {
            count_at::<H, F>(Reason::PassedFrontendRemoved);
            Chosen::Done(PASS)
        }
        Selection::NoLocalEndpoints { .. } => {
            // kube-proxy drops these too (externalTrafficPolicy: Local).
            count_at::<H, F>(Reason::DropNoLocalEndpoints);
            Chosen::Done(DROP)
        }
        Selection::NoEndpoints { .. } => {
            // kube-proxy rejects these: a reset, or port unreachable.
            count_at::<H, F>(Reason::RefusedNoEndpoints);
            Chosen::Reject
        }
        Selection::Inconsistent => {
            count_at::<H, F>(Reason::RefusedInconsistent);
            Chosen::Done(DROP)
        }
        Selection::Backend {
            backend: b,
            id,
            flags,
            ..
        } => {
            let (addr, port_be) = (b.addr_be, b.port_be);
            let up = !h.admit::<F>(p, &addr);
            backend.write(Backend {
                addr,
                port_be,
                id,
                fe_flags: flags,
                hairpin: false,
                up,
            });
            Chosen::Backend
        }
    }
}

/// Records a new flow to backend `b` in both directions and DNATs its
/// first packet.
#[inline(never)]
fn record<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
    b: &Backend<F::Addr>,
) -> Verdict {
    settle(record_flow::<L2, C, F, H>(ctx, p, h, b))
}

#[inline(always)]
fn record_flow<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
    h: &mut H,
    b: &Backend<F::Addr>,
) -> Result<Verdict, i64> {
    if !F::Addr::header_ok::<C, L2>(ctx, p.in_place()) {
        // The stack drops it after us: it must not hold an entry.
        return Ok(PASS);
    }
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    let (t, now) = (cfg.timeouts(), now());
    let key = ct_key(p.src(), p.dst(), p.proto, dir_in::<H>());
    // A pod's flow goes as its socket would have: unSNATed, to any
    // backend, but to itself.
    let dsr = !H::POD && b.fe_flags & FE_F_DSR != 0 && !b.hairpin;
    let snat = if H::POD {
        if b.hairpin { CT_F_SNAT } else { 0 }
    } else if b.fe_flags & FE_F_EXTERNAL_LOCAL != 0 {
        0
    } else if dsr {
        CT_F_DSR
    } else {
        CT_F_SNAT
    };
    // A DSR flow's backend answers around this node: it is seen from the
    // client's side only, whose segments alone drive it. Any other new
    // flow lives as if its first packet were a SYN, whatever it is.
    let (seen_client, expires) = if dsr && p.proto == PROTO_TCP {
        let a = ct_advance_one_sided(&t, p.tcp_flags, 0, now, now);
        (a.seen, a.expires)
    } else {
        (
            seen_bits(p.proto, p.tcp_flags),
            ct_new_expiry(&t, p.proto, now),
        )
    };
    // A SYN flood's flows would push established ones out of the LRU maps:
    // one no backend confirmed yet needs a token of the budget, however it
    // starts (a DSR flow taken over mid-flow too).
    if p.proto == PROTO_TCP && ct_takes_token(dsr, seen_client) && !take_syn_token(cfg) {
        count_at::<H, F>(Reason::DropSynBudget);
        return Ok(DROP);
    }
    let inbound = CtValue {
        addr_be: b.addr,
        port_be: b.port_be,
        flags: snat,
        nat_addr_be: F::Addr::default(),
        nat_port_be: 0,
        seen_client,
        seen_backend: 0,
        backend_id: b.id,
        expires,
    };
    let outbound = CtValue {
        addr_be: p.daddr,
        port_be: p.dport_be,
        ..inbound
    };
    // Reply side first: a reply can only follow once the packet is sent.
    // An LRU insert fails only without memory; the flow then goes untracked
    // and is dropped rather than sent where its replies cannot be reversed.
    if F::ct().insert(key.partner(&inbound), outbound, 0).is_err()
        || F::ct().insert(key, inbound, 0).is_err()
    {
        count_at::<H, F>(Reason::DropConntrackInsert);
        return Ok(DROP);
    }
    count_at::<H, F>(Reason::NewFlow);
    h.recorded();
    if b.hairpin {
        let reason = if H::POD {
            Reason::PodSnatHairpin
        } else {
            Reason::DsrSnatHairpin
        };
        count_at::<H, F>(reason);
    }
    if b.up {
        // Recorded: tc rewrites it if told, else finds the flow as known.
        h.hand_over::<F>(&b.addr, b.port_be, false);
        return Ok(PASS);
    }
    p.rewrite::<L2, C>(ctx, true, b.addr, b.port_be)?;
    Ok(PASS)
}

/// Whether `client` and `backend` are known to be on the same node
/// (`LB4_NODE_NETS`: the nodes' addresses, their pod CIDRs, the endpoints
/// of DSR frontends).
#[inline(never)]
fn same_node<F: Family>(client: &F::Addr, backend: &F::Addr) -> bool {
    let bits = 8 * size_of::<F::Addr>() as u32;
    let node = |addr: &F::Addr| F::node_nets().get(&Key::new(bits, *addr)).map(|n| n.node);
    matches!((node(client), node(backend)), (Some(c), Some(b)) if c == b)
}

/// A TCP, UDP (or later fragment) packet leaving the node: a reply to a
/// client, or a packet DNATed towards a remote backend. Each step is a BPF
/// function of its own, as in [`ingress`].
#[inline(always)]
pub fn egress<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Verdict {
    match reply::<L2, C, F, H>(ctx, p) {
        Step::Done(v) => v,
        Step::New => snat::<L2, C, F, H>(ctx, p),
        Step::Untracked => PASS,
        // A first hook never sends a DSR flow on (it cannot reshape
        // packets): it left it to tc before any change.
        Step::Dsr if H::FIRST => PASS,
        Step::Dsr => match dsr_insert::<L2, C, F>(ctx, p) {
            DSR_SENT => PASS,
            DSR_SNAT => snat::<L2, C, F, H>(ctx, p),
            // Each a BPF function called from here (their frames do not
            // add up): the quote made as the client sent it, the answer
            // written over it, sent.
            DSR_TOO_BIG => match dsr_unnat::<L2, C, F>(ctx, p) {
                0 => DROP,
                mtu if F::Addr::too_big::<L2, C>(ctx, p, mtu) != 0 => DROP,
                _ => dsr_answer::<L2, C, F>(ctx, p),
            },
            _ => DROP,
        },
    }
}

/// A reply to a client: restores the frontend it sent to, and advances
/// the flow in all its entries. [`Step::New`] for a packet of a flow to
/// SNAT.
#[inline(never)]
fn reply<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Step {
    settle(reply_flow::<L2, C, F, H>(ctx, p))
}

#[inline(always)]
fn reply_flow<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Result<Step, i64> {
    let now = now();
    let Some(cfg) = config() else {
        return Ok(Step::Done(PASS));
    };
    let key = ct_key(p.src(), p.dst(), p.proto, dir_out::<H>());
    if let Some(entry) = ct_entry::<F>(&key, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let ct = unsafe { *entry };
        if !ct_expired(ct.expires, now) {
            if !p.later_fragment {
                let t = cfg.timeouts();
                // SAFETY: `entry` was looked up in the conntrack map by this run.
                let (after, changed) =
                    unsafe { advance(entry, &t, p.proto, p.tcp_flags, false, false, now) };
                if changed {
                    mirror::<F>(&key.partner(&ct), &after, false, cfg);
                    if ct.nat_port_be != 0 {
                        let nat = nat_key(p.src(), (ct.nat_addr_be, ct.nat_port_be), p.proto);
                        hold_nat::<F>(&nat, &p.dst(), after.expires, cfg);
                    }
                }
            }
            if ct.flags & CT_F_DSR != 0 {
                // The client's segments will carry the option.
                dsr::clamp_mss(ctx, p)?;
            }
            p.rewrite::<L2, C>(ctx, false, ct.addr_be, ct.port_be)?;
            return Ok(Step::Done(PASS));
        }
    }
    // Most packets leaving the node are no flow's at all: only a DNATed
    // packet of a flow to SNAT (its reversed tuple is the flow's reply
    // entry) pays the next step's call.
    let reply = ct_key(p.dst(), p.src(), p.proto, dir_out::<H>());
    match ct_entry::<F>(&reply, cfg).map(|e| {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        unsafe { (*e).flags }
    }) {
        Some(flags) if flags & CT_F_SNAT != 0 => Ok(Step::New),
        Some(flags) if flags & CT_F_DSR != 0 => Ok(Step::Dsr),
        _ => Ok(Step::Done(PASS)),
    }
}

/// [`dsr_insert`]: the packet carries its frontend, and goes.
const DSR_SENT: u32 = 0;
/// [`dsr_insert`]: it could not be rewritten; dropped.
const DSR_FAILED: u32 = 1;
/// [`dsr_insert`]: the option would take it over the MTU, and it may be
/// fragmented: its flow is SNATed from this packet on.
const DSR_SNAT: u32 = 2;
/// [`dsr_insert`]: the option would take it over the MTU, and it may not
/// be fragmented: the client is told ([`dsr_unnat`]).
const DSR_TOO_BIG: u32 = 3;

/// A DNATed packet of a DSR flow leaving towards its backend on another
/// node: carries the flow's frontend (its reply entry's) in the option.
///
/// A packet the option's bytes would take over the device's MTU is never
/// lost unsaid (Cilium's `dsr_is_too_big`): one that may not be fragmented
/// (IPv4 with don't fragment, any TCP segment, all of IPv6) is answered
/// with ICMP fragmentation needed or Packet Too Big, so that the client
/// sends smaller; an IPv4 datagram without don't fragment (a fragment of a
/// larger one, or a sender that lets routers fragment) moves its flow to
/// SNAT, as if the frontend did not forward by DSR: its replies come back
/// through this node.
#[inline(never)]
fn dsr_insert<const L2: usize, C: PacketCtx, F: Family>(ctx: &C, p: &mut Packet<F::Addr>) -> u32 {
    dsr_insert_flow::<L2, C, F>(ctx, p).unwrap_or(DSR_FAILED)
}

#[inline(always)]
fn dsr_insert_flow<const L2: usize, C: PacketCtx, F: Family>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Result<u32, i64> {
    let Some(cfg) = config() else {
        return Ok(DSR_SENT);
    };
    let reply = ct_key(p.dst(), p.src(), p.proto, CT_DIR_OUT);
    let Some(entry) = ct_entry::<F>(&reply, cfg) else {
        return Ok(DSR_SENT);
    };
    if ctx.too_big(i32::from(dsr::growth::<F::Addr>())).is_some() {
        if p.proto == PROTO_TCP || !F::Addr::may_fragment::<C>(ctx, p.l3()) {
            return Ok(DSR_TOO_BIG);
        }
        // SAFETY: looked up by this run: mapped while it runs (RCU). The
        // flags of the flow's reply entry are written only here once the
        // flow exists; the SNAT step reads them next.
        unsafe { (*entry).flags |= CT_F_SNAT };
        count_at::<TcEgress, F>(Reason::DsrSnatTooBig);
        return Ok(DSR_SNAT);
    }
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let frontend = unsafe { ((*entry).addr_be, (*entry).port_be) };
    dsr::insert::<L2, C, F::Addr>(ctx, frontend)?;
    Ok(DSR_SENT)
}

/// A packet of a DSR flow that the option would take over the MTU and
/// that may not be fragmented ([`DSR_TOO_BIG`]) is answered with ICMP
/// fragmentation needed (ICMPv6 Packet Too Big) from its frontend to its
/// client, saying the MTU less the option, sent to the client as the FIB
/// says, at most as often as its frontend may reject (`LB4_REJECTS`); it is
/// dropped when that cannot be done. First the packet is made as the
/// client sent it (its destination the frontend again), to be quoted: the
/// MTU to say, or 0 to drop it.
#[inline(never)]
fn dsr_unnat<const L2: usize, C: PacketCtx, F: Family>(ctx: &C, p: &mut Packet<F::Addr>) -> u32 {
    dsr_unnat_packet::<L2, C, F>(ctx, p).unwrap_or(0)
}

#[inline(always)]
fn dsr_unnat_packet<const L2: usize, C: PacketCtx, F: Family>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Result<u32, i64> {
    let growth = dsr::growth::<F::Addr>();
    let (Some(cfg), Some(mtu)) = (config(), ctx.too_big(i32::from(growth))) else {
        return Ok(0);
    };
    if !p.in_place() || p.later_fragment {
        return Ok(0);
    }
    let reply = ct_key(p.dst(), p.src(), p.proto, CT_DIR_OUT);
    let Some(entry) = ct_entry::<F>(&reply, cfg) else {
        return Ok(0);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let frontend = unsafe { ((*entry).addr_be, (*entry).port_be) };
    p.rewrite::<L2, C>(ctx, true, frontend.0, frontend.1)?;
    if !reject::allowed::<F>(p) {
        count_at::<TcEgress, F>(Reason::DropRejectRateLimited);
        return Ok(0);
    }
    Ok(mtu - u32::from(growth))
}

/// Sends the answer [`dsr_unnat`] prepared and `Answer::too_big` wrote
/// (from the frontend to the client, as the packet's addresses still say)
/// out of the device the FIB names, the kernel resolving its neighbour.
#[inline(never)]
fn dsr_answer<const L2: usize, C: PacketCtx, F: Family>(ctx: &C, p: &Packet<F::Addr>) -> Verdict {
    let icmp = if size_of::<F::Addr>() == 4 {
        PROTO_ICMP
    } else {
        PROTO_ICMPV6
    };
    let out = fib::out_device(ctx, &p.daddr, &p.saddr, icmp);
    if out == 0 {
        return DROP;
    }
    count_at::<TcEgress, F>(Reason::DsrTooBig);
    ctx.redirect_neigh(out);
    Verdict::Redirected
}

/// A DNATed packet leaving towards its backend: SNATed if its flow is
/// `externalTrafficPolicy: Cluster`.
#[inline(never)]
fn snat<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Verdict {
    settle(snat_flow::<L2, C, F, H>(ctx, p))
}

#[inline(always)]
fn snat_flow<const L2: usize, C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    p: &mut Packet<F::Addr>,
) -> Result<Verdict, i64> {
    let now = now();
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    // Its flow's reply entry is this packet's tuple reversed.
    let reply = ct_key(p.dst(), p.src(), p.proto, dir_out::<H>());
    let Some(entry) = ct_entry::<F>(&reply, cfg) else {
        return Ok(PASS);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let ct = unsafe { *entry };
    if ct.flags & CT_F_SNAT == 0 || ct_expired(ct.expires, now) {
        return Ok(PASS);
    }
    let client = p.src();
    let (nat_addr, nat_port) = if ct.nat_port_be != 0 {
        (ct.nat_addr_be, ct.nat_port_be)
    } else {
        // The flow's first packet to leave takes a port. A later fragment
        // cannot be first, and a closed flow (stray segments) takes none.
        if p.later_fragment || (p.proto == PROTO_TCP && ct_closed(ct.seen_client, ct.seen_backend))
        {
            return Ok(DROP);
        }
        let snat = F::snat(cfg);
        let Some(port) = allocate_port::<F>(cfg, snat, p.dst(), p.proto, client, ct.expires, now)
        else {
            count_at::<H, F>(Reason::DropSnatExhausted);
            return Ok(DROP);
        };
        // SAFETY: looked up by this run: mapped while it runs (RCU). Two
        // CPUs taking a flow's first packets at once start from the same
        // port, and the second takes over the first's mapping as the same
        // client's: both store the same port.
        unsafe {
            (*entry).nat_addr_be = snat;
            (*entry).nat_port_be = port;
        }
        (snat, port)
    };
    // The reply mapping lives as long as the flow. One lost to another
    // flow (evicted from a full map, then taken) cannot be the flow's any
    // more: its next packet takes a new port.
    let nat = nat_key(p.dst(), (nat_addr, nat_port), p.proto);
    if !hold_nat::<F>(&nat, &client, ct.expires, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        unsafe { (*entry).nat_port_be = 0 };
        count_at::<H, F>(Reason::DropSnatExhausted);
        return Ok(DROP);
    }
    p.rewrite::<L2, C>(ctx, false, nat_addr, nat_port)?;
    Ok(PASS)
}

/// An ICMP error arriving at the node (at `l3`/`l4`), if it is about a
/// packet of a translated flow.
#[inline(never)]
pub fn ingress_icmp<C: PacketCtx, F: Family, H: Hook>(ctx: &C, l3: usize, l4: usize) -> Verdict {
    settle(ingress_icmp_error::<C, F, H>(ctx, l3, l4))
}

#[inline(always)]
fn ingress_icmp_error<C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    l3: usize,
    l4: usize,
) -> Result<Verdict, i64> {
    let mut e = IcmpError::default();
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    if e.parse(ctx, l3, l4) != Some(true) {
        return Ok(PASS);
    }
    // About a packet SNATed towards a remote backend (the quote runs
    // node:port -> backend): it is for the client. Egress, on the way to
    // the client, restores the frontend.
    if let Some(nat) = nat_entry::<F>(&nat_key(e.inner_dst(), e.inner_src(), e.proto), cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let (client, flags) = unsafe { (((*nat).addr_be, (*nat).port_be), (*nat).flags) };
        // A pod's only for its own hairpin flows, as in `known_nat`.
        if flags & CT_F_KERNEL == 0 && (!H::POD || client.0 == e.inner_daddr) {
            translate_icmp::<C, F>(ctx, &mut e, &client, How::ToDst)?;
        }
        return Ok(PASS);
    }
    // About a reply the client got (the quote runs frontend -> client): it
    // is for the backend, whose socket sent the reply. Only the DNAT half
    // is undone here: the kernel's conntrack, which saw the flow's packets
    // between the halves (client <-> backend), takes the error for one of
    // that flow's only so (a firewall dropping INVALID packets would drop
    // it otherwise); egress undoes the SNAT half.
    let inbound = ct_key(e.inner_dst(), e.inner_src(), e.proto, dir_in::<H>());
    let Some(entry) = ct_entry::<F>(&inbound, cfg) else {
        return Ok(PASS);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let (backend, flags) = unsafe { (((*entry).addr_be, (*entry).port_be), (*entry).flags) };
    if flags & CT_F_KERNEL == 0 {
        translate_icmp::<C, F>(ctx, &mut e, &backend, How::ToDst)?;
    }
    Ok(PASS)
}

/// An ICMP error leaving the node about a translated flow: for a client,
/// about a packet DNATed to a backend (the quote runs client -> backend),
/// the client must see its frontend; for a remote backend, about its reply
/// (the quote runs backend -> client, as ingress left it), the backend must
/// see the node's SNAT port it sent to. Either way the error leaves from
/// the address NAT gives it, as the kernel's NAT makes an error's outer
/// header that of a reply to the flow (kube-proxy's rules do): the
/// frontend's towards the client, the SNAT address towards the backend.
/// Kept, the address of a router that sent it would come back to that
/// router where the node's way on crosses it again (nodes routed through
/// it), and a router drops an IPv4 packet from its own address (a martian).
#[inline(never)]
pub fn egress_icmp<C: PacketCtx, F: Family, H: Hook>(ctx: &C, l3: usize, l4: usize) -> Verdict {
    settle(egress_icmp_error::<C, F, H>(ctx, l3, l4))
}

#[inline(always)]
fn egress_icmp_error<C: PacketCtx, F: Family, H: Hook>(
    ctx: &C,
    l3: usize,
    l4: usize,
) -> Result<Verdict, i64> {
    let mut e = IcmpError::default();
    let Some(cfg) = config() else {
        return Ok(PASS);
    };
    if e.parse(ctx, l3, l4) != Some(true) {
        return Ok(PASS);
    }
    let outbound = ct_key(e.inner_dst(), e.inner_src(), e.proto, dir_out::<H>());
    if let Some(entry) = ct_entry::<F>(&outbound, cfg) {
        // SAFETY: looked up by this run: mapped while it runs (RCU).
        let frontend = unsafe { ((*entry).addr_be, (*entry).port_be) };
        // Whoever sent it: the backend itself (port unreachable) must not
        // show the client its address either.
        translate_icmp::<C, F>(ctx, &mut e, &frontend, How::FromSrc)?;
        return Ok(PASS);
    }
    if e.daddr != e.inner_saddr {
        return Ok(PASS);
    }
    let reply = ct_key(e.inner_src(), e.inner_dst(), e.proto, dir_out::<H>());
    let Some(entry) = ct_entry::<F>(&reply, cfg) else {
        return Ok(PASS);
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    let nat = unsafe { ((*entry).nat_addr_be, (*entry).nat_port_be) };
    if nat.1 != 0 {
        translate_icmp::<C, F>(ctx, &mut e, &nat, How::FromSrc)?;
    }
    Ok(PASS)
}

/// How [`translate_icmp`] translates an ICMP error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    /// Towards the node: the quoted packet's source and the outer
    /// destination.
    ToDst,
    /// Leaving: the quoted packet's destination, and the outer source too.
    FromSrc,
}

/// Rewrites an ICMP error's quoted packet (and outer address) as `how`
/// says, to `to`. Each rewrite is a BPF function of its own: their stacks
/// (IPv6 checksum differences) do not add to the lookups' or each other's.
#[inline(always)]
fn translate_icmp<C: PacketCtx, F: Family>(
    ctx: &C,
    e: &mut IcmpError<F::Addr>,
    to: &(F::Addr, u16),
    how: How,
) -> Result<(), i64> {
    errno(rewrite_quote::<C, F>(ctx, e, to, how != How::ToDst))?;
    match how {
        How::ToDst => errno(rewrite_outer::<C, F>(ctx, e, &to.0, true)),
        How::FromSrc => errno(rewrite_outer::<C, F>(ctx, e, &to.0, false)),
    }
}

/// [`IcmpError::rewrite_inner`] as a BPF function returning a code.
#[inline(never)]
fn rewrite_quote<C: PacketCtx, F: Family>(
    ctx: &C,
    e: &mut IcmpError<F::Addr>,
    to: &(F::Addr, u16),
    dst: bool,
) -> i64 {
    code(e.rewrite_inner(ctx, dst, to.0, to.1))
}

/// [`IcmpError::rewrite_outer`] as a BPF function returning a code.
#[inline(never)]
fn rewrite_outer<C: PacketCtx, F: Family>(
    ctx: &C,
    e: &mut IcmpError<F::Addr>,
    addr: &F::Addr,
    dst: bool,
) -> i64 {
    code(e.rewrite_outer(ctx, dst, *addr))
}
