//! The tc programs' connection state, for either family: lookups of the
//! conntrack and SNAT maps (falling back to a migration's previous maps),
//! advancing a flow's state and mirroring it into the flow's other entries,
//! and SNAT port allocation. The state machine itself is `lb_common::ct`'s,
//! the port rules `lb_common::nat`'s.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    btf_maps::{ArrayOfMaps, LruHashMap},
    cty::c_void,
    helpers::{bpf_get_prandom_u32, bpf_ktime_get_coarse_ns, bpf_loop},
};
use lb_common::{
    CFG_F_PREV, CT_F_DSR, CT_F_KERNEL, CtKey, CtValue, DEFAULT_CT_MAX, DEFAULT_NAT_MAX,
    DatapathConfig, NAT_F_CLAIMING, NAT_PORT_LINEAR_TRIES, NAT_PORT_RANDOM_TRIES, NAT6_CLAIM_WORD,
    NatKey, NatValue, PROTO_TCP, PortClaim, Timeouts, ct_advance, ct_advance_one_sided,
    ct_closing_one_sided, ct_established, nat_claim, nat_first_offset,
};

use crate::{
    addr::Addr6,
    atomic::{cas, load},
    maps::{LB_CONFIG, LB_SYN_BUDGET, PREV_TEMPLATE},
    packet::Ip,
};

const CT_MAX: usize = DEFAULT_CT_MAX as usize;
const NAT_MAX: usize = DEFAULT_NAT_MAX as usize;

/// A conntrack map of a family, and its previous-map slot.
pub type CtMap<A> = LruHashMap<CtKey<A>, CtValue<A>, CT_MAX>;
pub type CtPrev<A> = ArrayOfMaps<LruHashMap<CtKey<A>, CtValue<A>, PREV_TEMPLATE>, 1>;
/// A SNAT map of a family, and its previous-map slot.
pub type NatMap<A> = LruHashMap<NatKey<A>, NatValue<A>, NAT_MAX>;
pub type NatPrev<A> = ArrayOfMaps<LruHashMap<NatKey<A>, NatValue<A>, PREV_TEMPLATE>, 1>;

/// What connection tracking needs of an address family: its conntrack
/// and SNAT maps (`family` binds each family's), of an address whose SNAT
/// mappings change owner atomically.
pub trait CtMaps {
    /// An address as packets hold it.
    type CtAddr: Ip + Claim;
    fn ct() -> &'static CtMap<Self::CtAddr>;
    fn ct_prev() -> &'static CtPrev<Self::CtAddr>;
    fn nat() -> &'static NatMap<Self::CtAddr>;
    fn nat_prev() -> &'static NatPrev<Self::CtAddr>;
}

/// How a SNAT mapping of an address family changes owner atomically: the
/// 8-byte word of it a claim swaps, and the fields outside that word
/// (written after the swap, while the word holds `NAT_F_CLAIMING`). The
/// protocol itself is [`read_mapping`]'s and [`swap_owner`]'s.
pub trait Claim: Sized {
    /// The claim word of the SNAT mapping `nat`.
    ///
    /// # Safety
    ///
    /// `nat` is a live value of the family's SNAT map (8-byte aligned).
    unsafe fn claim_word(nat: *mut NatValue<Self>) -> *mut u64;

    /// The claim word of `v`.
    fn word(v: &NatValue<Self>) -> u64;

    /// The mapping whose claim word is `word`, the rest read from `nat`
    /// (after the word).
    ///
    /// # Safety
    ///
    /// As [`Claim::claim_word`].
    unsafe fn with_rest(word: u64, nat: *const NatValue<Self>) -> NatValue<Self>;

    /// Writes `new`'s fields outside the claim word into `nat`.
    ///
    /// # Safety
    ///
    /// As [`Claim::claim_word`], and the port is this CPU's claim.
    unsafe fn write_rest(nat: *mut NatValue<Self>, new: &NatValue<Self>);
}

/// Reads the SNAT mapping `nat` so that another CPU's claim of it is seen
/// whole: its claim word first, by a full barrier, then the rest. (A copy
/// in any order could pair the new owner's word with the old owner's dead
/// expiry, and claim the port a second time.)
///
/// # Safety
///
/// `nat` is a value of the family's SNAT map this program looked up.
#[inline(always)]
unsafe fn read_mapping<A: Claim>(nat: *mut NatValue<A>) -> NatValue<A> {
    // SAFETY: the caller's contract; map values are 8-byte aligned.
    unsafe { A::with_rest(load(A::claim_word(nat)), nat) }
}

/// Swaps the owner of the SNAT mapping `nat` from `old`'s to `new`'s client
/// if it still is `old`'s: whether this CPU won the port. The new owner
/// first holds the port as `NAT_F_CLAIMING` (taken, whatever the rest of
/// the mapping says) until the fields outside the swapped word are written.
///
/// # Safety
///
/// `nat` is a value of the family's SNAT map this program looked up.
#[inline(always)]
unsafe fn swap_owner<A: Claim + Copy>(
    nat: *mut NatValue<A>,
    old: &NatValue<A>,
    new: &NatValue<A>,
) -> bool {
    let claiming = NatValue {
        flags: new.flags | NAT_F_CLAIMING,
        ..*new
    };
    // SAFETY: the caller's contract; the kernel allows atomic operations
    // on map values.
    let word = unsafe { A::claim_word(nat) };
    // SAFETY: as above.
    if !unsafe { cas(word, A::word(old), A::word(&claiming)) } {
        return false;
    }
    // SAFETY: as above; the port is this CPU's, and only this CPU clears
    // the claim. The second swap, a full barrier, publishes the rest before
    // the claim ends (it cannot fail: no other CPU swaps a claimed word).
    unsafe {
        A::write_rest(nat, new);
        cas(word, A::word(&claiming), A::word(new));
    }
    true
}

/// The agent's settings (all zero before it wrote any), read in place.
/// `None` cannot happen: an array of one always has index 0.
#[inline(always)]
pub fn config() -> Option<&'static DatapathConfig> {
    LB_CONFIG.get(0)
}

/// Takes a token of this CPU's budget of unconfirmed TCP flows
/// (`lb_common::syn_budget`): whether a new flow that is not established
/// yet may start.
#[inline(always)]
pub fn take_syn_token(cfg: &DatapathConfig) -> bool {
    let Some(bucket) = LB_SYN_BUDGET.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: this CPU's element of an array, which lives as long as the
    // map; only a program preempting this one on this CPU may write it
    // meanwhile, which can cost one token's accuracy, never more. The
    // helper has no preconditions.
    unsafe { (*bucket).take(cfg.syn_budget, cfg.syn_refill, bpf_ktime_get_coarse_ns()) }
}

/// Gives this CPU's budget a token back: a flow's handshake is done.
#[inline(never)]
fn give_syn_token() -> i64 {
    if let (Some(cfg), Some(bucket)) = (config(), LB_SYN_BUDGET.get_ptr_mut(0)) {
        // SAFETY: as in `take_syn_token`.
        unsafe { (*bucket).give_back(cfg.syn_budget) };
    }
    0
}

/// The conntrack entry of `key`. During a migration (`CFG_F_PREV`) an
/// entry only the previous map has (the old programs wrote it after the
/// agent copied that map) is carried over first, as this layout keeps it.
#[inline(always)]
pub fn ct_entry<F: CtMaps>(
    key: &CtKey<F::CtAddr>,
    cfg: &DatapathConfig,
) -> Option<*mut CtValue<F::CtAddr>> {
    if let Some(entry) = F::ct().get_ptr_mut(key) {
        return Some(entry);
    }
    if cfg.flags & CFG_F_PREV == 0 {
        return None;
    }
    ct_carried::<F>(key)
}

/// [`ct_entry`]'s migration path, a BPF function of its own: its copies
/// stay off the stack of every other packet.
#[inline(never)]
fn ct_carried<F: CtMaps>(key: &CtKey<F::CtAddr>) -> Option<*mut CtValue<F::CtAddr>> {
    let old = F::ct_prev().get_value_ptr_mut(0, key)?;
    // SAFETY: the value stays mapped while the program runs (RCU).
    let value = unsafe { *old }.upgraded(key.dir);
    // A CPU that carried it over first wins; either copy is the same flow.
    let _ = F::ct().insert(key, value, u64::from(BPF_NOEXIST));
    F::ct().get_ptr_mut(key)
}

/// The SNAT entry of `key`, carried over as [`ct_entry`] does.
#[inline(always)]
pub fn nat_entry<F: CtMaps>(
    key: &NatKey<F::CtAddr>,
    cfg: &DatapathConfig,
) -> Option<*mut NatValue<F::CtAddr>> {
    if let Some(entry) = F::nat().get_ptr_mut(key) {
        return Some(entry);
    }
    if cfg.flags & CFG_F_PREV == 0 {
        return None;
    }
    nat_carried::<F>(key)
}

/// [`nat_entry`]'s migration path, as [`ct_carried`].
#[inline(never)]
fn nat_carried<F: CtMaps>(key: &NatKey<F::CtAddr>) -> Option<*mut NatValue<F::CtAddr>> {
    let old = F::nat_prev().get_value_ptr_mut(0, key)?;
    // SAFETY: as in `ct_entry`.
    let mut value = unsafe { *old };
    // An older layout's TCP state bits: the expiry says all.
    value.flags &= CT_F_KERNEL;
    let _ = F::nat().insert(key, value, u64::from(BPF_NOEXIST));
    F::nat().get_ptr_mut(key)
}

/// Whether the flow of a `CT_DIR_IN` entry with `flags` is seen from its
/// client's side only on this node: a DSR flow, whose backend answers
/// around this node (`lb_common::ct_advance_one_sided`).
#[inline(always)]
pub fn one_sided(flags: u16) -> bool {
    flags & CT_F_DSR != 0
}

/// Advances the flow of `entry` by a packet of `proto` with `tcp_flags`
/// from the client (`from_client`) or the backend, and stores what
/// changed: that side's byte and the expiry. `one_sided`: the flow is seen
/// from its client's side only ([`one_sided`] of its `CT_DIR_IN` entry).
/// The entry's value after, and whether anything changed (then the flow's
/// other entries need it too). Most packets change nothing (the expiry
/// moves once a second): storing only then keeps the entry's cache line
/// shared across CPUs.
///
/// The token of the budget of unconfirmed flows a TCP flow took goes back
/// when a backend's answer confirms it, or, seen one side only, when its
/// client closes it; never for the kernel's flows, which took none.
///
/// # Safety
///
/// `entry` is a conntrack value this program looked up: it stays mapped
/// while the program runs (RCU).
#[inline(always)]
pub unsafe fn advance<A: Copy>(
    entry: *mut CtValue<A>,
    t: &Timeouts,
    proto: u8,
    tcp_flags: u8,
    from_client: bool,
    one_sided: bool,
    now: u32,
) -> (CtValue<A>, bool) {
    // SAFETY: mapped (the caller's contract); if the LRU recycles it
    // meanwhile the fields are another flow's and this packet goes astray,
    // as it would have with the entry gone.
    let mut v = unsafe { *entry };
    let (c, b) = (v.seen_client, v.seen_backend);
    let one_sided = one_sided && from_client && proto == PROTO_TCP;
    let a = if one_sided {
        ct_advance_one_sided(t, tcp_flags, c, v.expires, now)
    } else {
        ct_advance(t, proto, tcp_flags, from_client, c, b, v.expires, now)
    };
    let own = if from_client { c } else { b };
    if proto == PROTO_TCP && v.flags & CT_F_KERNEL == 0 {
        let confirmed = if one_sided {
            !ct_closing_one_sided(c) && ct_closing_one_sided(a.seen)
        } else if from_client {
            !ct_established(c, b) && ct_established(a.seen, b)
        } else {
            !ct_established(c, b) && ct_established(c, a.seen)
        };
        if confirmed {
            give_syn_token();
        }
    }
    let changed = a.seen != own || a.expires != v.expires;
    if changed {
        // SAFETY: plain stores to a live element. Each side writes only its
        // own byte, so a packet the other way on another CPU keeps its
        // bits; the later expiry wins, which is what both computed.
        unsafe {
            if from_client {
                (*entry).seen_client = a.seen;
            } else {
                (*entry).seen_backend = a.seen;
            }
            (*entry).expires = a.expires;
        }
        if from_client {
            v.seen_client = a.seen;
        } else {
            v.seen_backend = a.seen;
        }
        v.expires = a.expires;
    }
    (v, changed)
}

/// Writes one side's byte (`from_client`: the client's) and the expiry of
/// `value` into the flow's other conntrack entry, `key`.
#[inline(always)]
pub fn mirror<F: CtMaps>(
    key: &CtKey<F::CtAddr>,
    value: &CtValue<F::CtAddr>,
    from_client: bool,
    cfg: &DatapathConfig,
) {
    let Some(entry) = ct_entry::<F>(key, cfg) else {
        return;
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    unsafe {
        if from_client {
            (*entry).seen_client = value.seen_client;
        } else {
            (*entry).seen_backend = value.seen_backend;
        }
        (*entry).expires = value.expires;
    }
}

/// Gives the SNAT mapping `key` of a flow from `client` the flow's expiry,
/// writing it again if it went (an LRU eviction); whether the mapping is
/// the flow's, not another's.
#[inline(always)]
pub fn hold_nat<F: CtMaps>(
    key: &NatKey<F::CtAddr>,
    client: &(F::CtAddr, u16),
    expires: u32,
    cfg: &DatapathConfig,
) -> bool {
    let Some(nat) = nat_entry::<F>(key, cfg) else {
        let value = NatValue {
            addr_be: client.0,
            port_be: client.1,
            flags: 0,
            expires,
        };
        return F::nat().insert(key, value, u64::from(BPF_NOEXIST)).is_ok();
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU).
    unsafe {
        // A mapping this flow's first packets are claiming on another CPU
        // ([`NAT_F_CLAIMING`]) is already the flow's.
        if (*nat).addr_be != client.0
            || (*nat).port_be != client.1
            || (*nat).flags & !NAT_F_CLAIMING != 0
        {
            return false;
        }
        if (*nat).expires != expires {
            (*nat).expires = expires;
        }
    }
    true
}

/// Allocates a SNAT port of `cfg`'s range for a flow from `client` to
/// `backend` (addresses and ports as packets hold them) that expires at
/// `expires`, and records the reply mapping; the port (network byte
/// order), or `None` when every port tried is another live flow's.
///
/// The ports are tried by `bpf_loop`, whose callback the verifier checks
/// once, rather than by a loop it would walk once per port tried.
#[inline(always)]
pub fn allocate_port<F: CtMaps>(
    cfg: &DatapathConfig,
    snat: F::CtAddr,
    backend: (F::CtAddr, u16),
    proto: u8,
    client: (F::CtAddr, u16),
    expires: u32,
    now: u32,
) -> Option<u16> {
    let (min, max) = (cfg.nat_port_min, cfg.nat_port_max);
    if max < min || snat == F::CtAddr::default() {
        return None;
    }
    let span = u32::from(max - min) + 1;
    let mut search = Search::<F::CtAddr> {
        key: NatKey {
            saddr_be: backend.0,
            daddr_be: snat,
            sport_be: backend.1,
            dport_be: 0,
            proto,
            _pad0: [0; 3],
        },
        value: NatValue {
            addr_be: client.0,
            port_be: client.1,
            flags: 0,
            expires,
        },
        first: nat_first_offset(min, span, client.0.fold(), client.1, cfg.nat_seed),
        span,
        min,
        found: false,
        now,
    };
    let callback: extern "C" fn(u32, *mut c_void) -> i64 = try_port::<F>;
    // SAFETY: the callback is a function of the program; `search` lives on
    // this stack for the whole call, which is all the callback touches.
    unsafe {
        bpf_loop(
            NAT_PORT_LINEAR_TRIES + NAT_PORT_RANDOM_TRIES,
            callback as *mut c_void,
            (&raw mut search).cast(),
            0,
        )
    };
    search.found.then_some(search.key.dport_be)
}

/// [`allocate_port`]'s search: the mapping tried, and where it stands.
struct Search<A> {
    /// The mapping's key, with the port tried last.
    key: NatKey<A>,
    value: NatValue<A>,
    /// Offset of the first port tried, and the range.
    first: u32,
    span: u32,
    min: u16,
    /// Whether `key`'s port is the flow's.
    found: bool,
    now: u32,
}

/// Tries port `i` of a [`Search`]: 1 (stop) once one is the flow's.
extern "C" fn try_port<F: CtMaps>(i: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: `bpf_loop` passes `allocate_port`'s `Search` of this family,
    // which outlives the loop.
    let s = unsafe { &mut *ctx.cast::<Search<F::CtAddr>>() };
    let Some(cfg) = config() else {
        return 1;
    };
    let span = s.span;
    if span == 0 {
        // Not so: `allocate_port` checked the range. This spares a panic
        // path, which the verifier would refuse.
        return 1;
    }
    let offset = if i < NAT_PORT_LINEAR_TRIES {
        (s.first + i) % span
    } else {
        // SAFETY: the helper has no preconditions.
        (unsafe { bpf_get_prandom_u32() }) % span
    };
    // Below the range's end, a u16.
    s.key.dport_be = (s.min + offset as u16).to_be();
    s.found = claim::<F>(&s.key, &s.value, cfg, s.now);
    i64::from(s.found)
}

/// Takes the port of `key` for the flow of `value`: free, the same
/// client's, or dead. Two CPUs racing for a dead port both try to swap the
/// mapping's claim word from the one they read ([`swap_owner`]);
/// one wins, and no CPU reading the mapping meanwhile sees it dead.
#[inline(always)]
fn claim<F: CtMaps>(
    key: &NatKey<F::CtAddr>,
    value: &NatValue<F::CtAddr>,
    cfg: &DatapathConfig,
    now: u32,
) -> bool {
    let Some(nat) = nat_entry::<F>(key, cfg) else {
        return F::nat().insert(key, *value, u64::from(BPF_NOEXIST)).is_ok();
    };
    // SAFETY: looked up by this run: mapped while it runs (RCU). A first
    // look, copied in any order: enough to pass over a live port.
    let glance = unsafe { *nat };
    if nat_claim(&glance, value, now) == PortClaim::Taken {
        return false;
    }
    // Read again in order, so that a claim racing this one is seen whole
    // ([`read_mapping`]); the port is claimed from what that saw.
    // SAFETY: `nat` was looked up in the family's SNAT map by this run.
    let old = unsafe { read_mapping(nat) };
    match nat_claim(&old, value, now) {
        PortClaim::Same => {}
        PortClaim::Expired => {
            // SAFETY: as above.
            if !unsafe { swap_owner(nat, &old, value) } {
                return false;
            }
        }
        PortClaim::Taken => return false,
    }
    // SAFETY: looked up by this run: mapped while it runs (RCU); the port
    // is this flow's now. (A claim by swap wrote the expiry already.)
    unsafe {
        if (*nat).expires != value.expires {
            (*nat).expires = value.expires;
        }
    }
    true
}

/// An `LB4_NAT` mapping's claim word is its first 8 bytes, the owner
/// fields (client address, port, flags); its expiry lies outside.
impl Claim for [u8; 4] {
    #[inline(always)]
    unsafe fn claim_word(nat: *mut NatValue<[u8; 4]>) -> *mut u64 {
        nat.cast()
    }

    #[inline(always)]
    fn word(v: &NatValue<[u8; 4]>) -> u64 {
        let [p0, p1] = v.port_be.to_ne_bytes();
        let [f0, f1] = v.flags.to_ne_bytes();
        let [a0, a1, a2, a3] = v.addr_be;
        u64::from_ne_bytes([a0, a1, a2, a3, p0, p1, f0, f1])
    }

    #[inline(always)]
    unsafe fn with_rest(word: u64, nat: *const NatValue<[u8; 4]>) -> NatValue<[u8; 4]> {
        let [a0, a1, a2, a3, p0, p1, f0, f1] = word.to_ne_bytes();
        NatValue {
            addr_be: [a0, a1, a2, a3],
            port_be: u16::from_ne_bytes([p0, p1]),
            flags: u16::from_ne_bytes([f0, f1]),
            // SAFETY: the element is live (the caller's contract).
            expires: unsafe { (*nat).expires },
        }
    }

    #[inline(always)]
    unsafe fn write_rest(nat: *mut NatValue<[u8; 4]>, new: &NatValue<[u8; 4]>) {
        // SAFETY: the element is live (the caller's contract).
        unsafe { (*nat).expires = new.expires };
    }
}

/// An `LB6_NAT` mapping's claim word is the 8 bytes at
/// [`NAT6_CLAIM_WORD`]: port, flags and expiry; its client address lies
/// outside.
impl Claim for Addr6 {
    #[inline(always)]
    unsafe fn claim_word(nat: *mut NatValue<Addr6>) -> *mut u64 {
        // SAFETY: the caller's contract; the word lies inside the value.
        unsafe { nat.cast::<u8>().add(NAT6_CLAIM_WORD).cast::<u64>() }
    }

    #[inline(always)]
    fn word(v: &NatValue<Addr6>) -> u64 {
        let [p0, p1] = v.port_be.to_ne_bytes();
        let [f0, f1] = v.flags.to_ne_bytes();
        let [e0, e1, e2, e3] = v.expires.to_ne_bytes();
        u64::from_ne_bytes([p0, p1, f0, f1, e0, e1, e2, e3])
    }

    #[inline(always)]
    unsafe fn with_rest(word: u64, nat: *const NatValue<Addr6>) -> NatValue<Addr6> {
        let [p0, p1, f0, f1, e0, e1, e2, e3] = word.to_ne_bytes();
        let flags = u16::from_ne_bytes([f0, f1]);
        NatValue {
            // A claim's client address is written after its word: until
            // the claim ends it is nobody's (`::`), so that the old owner's
            // address with the new owner's port is no client's mapping.
            addr_be: if flags & NAT_F_CLAIMING != 0 {
                Addr6::default()
            } else {
                // SAFETY: the element is live (the caller's contract).
                unsafe { (*nat).addr_be }
            },
            port_be: u16::from_ne_bytes([p0, p1]),
            flags,
            expires: u32::from_ne_bytes([e0, e1, e2, e3]),
        }
    }

    #[inline(always)]
    unsafe fn write_rest(nat: *mut NatValue<Addr6>, new: &NatValue<Addr6>) {
        // SAFETY: the element is live (the caller's contract).
        unsafe { (*nat).addr_be = new.addr_be };
    }
}
