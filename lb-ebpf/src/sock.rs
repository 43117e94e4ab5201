//! Socket-level load balancing at the cgroup sock_addr hooks, written once
//! over [`SockFamily`].
//!
//! `connect*` and `sendmsg*` translate `frontend:port` into a backend once
//! per connect (or per unconnected datagram); `recvmsg*` and
//! `getpeername*` show the application the frontend again: from the
//! socket's own storage (`LB_SOCK_REVNAT`: a connected socket's backend, an
//! unconnected one's latest destination), else from `LB4_REVNAT`/
//! `LB6_REVNAT` (an unconnected socket's earlier destinations). There is
//! no per-packet work.
//!
//! An AF_INET6 socket may address an IPv4 frontend as `::ffff:a.b.c.d`.
//! Such an address is IPv4 ([`Mapped`]): `connect6` translates it through
//! the IPv4 maps into a v4-mapped backend, and `recvmsg6`/`getpeername6`
//! reverse it as IPv4. An unconnected send to one never reaches
//! `sendmsg6`: the kernel hands it to the IPv4 path first, and `sendmsg4`
//! translates it (after `sendmsg6`, the kernel refuses any v4-mapped
//! destination, so no program could translate there). A family is never
//! translated into the other.

use aya_ebpf::{
    EbpfContext as _,
    bindings::bpf_sock_addr,
    btf_maps::{ArrayOfMaps, LruHashMap},
    helpers::{bpf_get_netns_cookie, bpf_get_prandom_u32, bpf_get_socket_cookie, bpf_set_retval},
    programs::SockAddrContext,
};
use lb_common::{
    At, Backend, DEFAULT_REVNAT_MAX, FE_F_SOURCE_RANGES, FrontendKey, PROTO_TCP, PROTO_UDP, Reason,
    RevNat4Key, RevNat4Value, RevNatKey, RevNatValue, SCOPE_INTERNAL, SOCK_NETNS_ADDR4,
    SOCK_NETNS_ADDR6, SOCK_REVNAT_V4, SOCK_REVNAT_V6, SockNetns, SockRevNat, sock_balanced,
};

use crate::{
    addr::{Addr6, bytes6, words6},
    family::{Family, V4, V6},
    lb::{Random, Selection, select},
    maps::{
        LB_SOCK_NETNS, LB_SOCK_REVNAT, LB4_REVNAT, LB4_REVNAT_PREV, LB6_REVNAT, LB6_REVNAT_PREV,
        PREV_TEMPLATE, maybe_frontend,
    },
    stats::{Counted, count},
};

/// Verdicts of a cgroup sock_addr program.
const ALLOW: i32 = 1;
const DENY: i32 = 0;
const EPERM: i32 = 1;
const ECONNREFUSED: i32 = 111;
const EHOSTUNREACH: i32 = 113;

const REVNAT_MAX: usize = DEFAULT_REVNAT_MAX as usize;

/// Which translating hook runs: each counts its translations apart.
#[derive(Clone, Copy)]
pub enum Call {
    Connect,
    Sendmsg,
}

/// connect4 / sendmsg4: rewrite `frontend:port` to a backend of it.
#[inline(always)]
pub fn translate4(ctx: &SockAddrContext, call: Call) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel hands us a valid bpf_sock_addr for the program's run.
    let (proto, ip, port) = unsafe { ((*sa).protocol, (*sa).user_ip4, (*sa).user_port) };
    let Some(proto) = balanced(proto) else {
        return ALLOW;
    };
    // user_ip4 holds network-order bytes in memory; keep those bytes.
    verdict::<[u8; 4]>(
        call,
        translate::<User4>(ctx, call, ip.to_ne_bytes(), proto, port),
    )
}

/// connect6 / sendmsg6: as [`translate4`], for an IPv6 frontend or a
/// v4-mapped IPv4 one.
#[inline(always)]
pub fn translate6(ctx: &SockAddrContext, call: Call) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: as in translate4; user_ip6 is read a 32-bit word at a time.
    let (proto, ip, port) = unsafe { ((*sa).protocol, user_ip6(sa), (*sa).user_port) };
    let Some(proto) = balanced(proto) else {
        return ALLOW;
    };
    // Counted in the frontend's family: a v4-mapped one is IPv4's.
    if is_v4_mapped(&ip) {
        verdict::<[u8; 4]>(
            call,
            translate::<Mapped>(ctx, call, ip[3].to_ne_bytes(), proto, port),
        )
    } else {
        verdict::<[u8; 16]>(call, translate::<User6>(ctx, call, ip, proto, port))
    }
}

/// recvmsg4 / getpeername4: show the frontend the application addressed.
#[inline(always)]
pub fn reverse4(ctx: &SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: valid bpf_sock_addr, see translate4.
    let (ip, port) = unsafe { ((*sa).user_ip4, (*sa).user_port) };
    reverse::<User4>(ctx, ip.to_ne_bytes(), port)
}

/// recvmsg6 / getpeername6: [`reverse4`] for IPv6 and v4-mapped peers.
#[inline(always)]
pub fn reverse6(ctx: &SockAddrContext) -> i32 {
    let sa = ctx.sock_addr;
    // SAFETY: valid bpf_sock_addr, see translate4.
    let (ip, port) = unsafe { (user_ip6(sa), (*sa).user_port) };
    if is_v4_mapped(&ip) {
        reverse::<Mapped>(ctx, ip[3].to_ne_bytes(), port)
    } else {
        reverse::<User6>(ctx, ip, port)
    }
}

/// A family's socket reverse-NAT maps and entries.
pub trait SockFamily: Family {
    /// [`SockRevNat::family`] of this family's entries.
    const TAG: u8;
    /// The padding of the reverse-NAT key after its port.
    type RevPad: Copy + Default + 'static;

    fn revnat() -> &'static LruHashMap<RevKey<Self>, RevNatValue<Self::Addr>, REVNAT_MAX>;
    fn revnat_prev()
    -> &'static ArrayOfMaps<LruHashMap<RevKey<Self>, RevNatValue<Self::Addr>, PREV_TEMPLATE>, 1>;
    /// The address as [`SockRevNat`] holds it: IPv4 in the first four
    /// bytes, the rest zero.
    fn wide(addr: &Self::Addr) -> [u8; 16];
    fn narrow(addr: &[u8; 16]) -> Self::Addr;
    /// The address of this family that the namespace `netns` sends from,
    /// if the agent wrote one.
    fn netns_addr(netns: &SockNetns) -> Option<Self::Addr>;
}

/// The reverse-NAT key of family `F`.
type RevKey<F> = RevNatKey<<F as Family>::Addr, <F as SockFamily>::RevPad>;

/// The reverse-NAT key of the backend `addr_be`:`port_be` on the socket
/// `cookie`.
#[inline(always)]
fn rev_key<F: SockFamily>(cookie: u64, addr_be: &F::Addr, port_be: u16) -> RevKey<F> {
    RevNatKey {
        cookie,
        addr_be: *addr_be,
        port_be,
        _pad0: F::RevPad::default(),
    }
}

/// The entry, in its own storage, of the socket that addressed `key` and
/// was sent to `backend`.
#[inline(always)]
fn entry<F: SockFamily>(key: &FrontendKey<F::Addr>, backend: &Backend<F::Addr>) -> SockRevNat {
    SockRevNat {
        backend_be: F::wide(&backend.addr_be),
        frontend_be: F::wide(&key.addr_be),
        backend_port_be: backend.port_be,
        frontend_port_be: key.port_be,
        family: F::TAG,
        _pad0: [0; 3],
    }
}

impl SockFamily for V4 {
    const TAG: u8 = SOCK_REVNAT_V4;
    type RevPad = [u8; 2];

    #[inline(always)]
    fn revnat() -> &'static LruHashMap<RevNat4Key, RevNat4Value, REVNAT_MAX> {
        &LB4_REVNAT
    }
    #[inline(always)]
    fn revnat_prev() -> &'static ArrayOfMaps<LruHashMap<RevNat4Key, RevNat4Value, PREV_TEMPLATE>, 1>
    {
        &LB4_REVNAT_PREV
    }
    #[inline(always)]
    fn wide(addr: &[u8; 4]) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[0] = addr[0];
        out[1] = addr[1];
        out[2] = addr[2];
        out[3] = addr[3];
        out
    }
    #[inline(always)]
    fn narrow(addr: &[u8; 16]) -> [u8; 4] {
        [addr[0], addr[1], addr[2], addr[3]]
    }
    #[inline(always)]
    fn netns_addr(netns: &SockNetns) -> Option<[u8; 4]> {
        (netns.flags & SOCK_NETNS_ADDR4 != 0).then_some(netns.addr4_be)
    }
}

impl SockFamily for V6 {
    const TAG: u8 = SOCK_REVNAT_V6;
    type RevPad = [u8; 6];

    #[inline(always)]
    fn revnat() -> &'static LruHashMap<RevKey<Self>, RevNatValue<Addr6>, REVNAT_MAX> {
        &LB6_REVNAT
    }
    #[inline(always)]
    fn revnat_prev()
    -> &'static ArrayOfMaps<LruHashMap<RevKey<Self>, RevNatValue<Addr6>, PREV_TEMPLATE>, 1> {
        &LB6_REVNAT_PREV
    }
    #[inline(always)]
    fn wide(addr: &Addr6) -> [u8; 16] {
        bytes6(addr)
    }
    #[inline(always)]
    fn narrow(addr: &[u8; 16]) -> Addr6 {
        words6(addr)
    }
    #[inline(always)]
    fn netns_addr(netns: &SockNetns) -> Option<Addr6> {
        (netns.flags & SOCK_NETNS_ADDR6 != 0).then(|| words6(&netns.addr6_be))
    }
}

/// Where a hook finds the address in its `bpf_sock_addr`, and the family
/// it is of.
trait Field {
    type F: SockFamily;

    /// Writes `addr` where the hook's address is.
    ///
    /// # Safety
    ///
    /// `sa` is the hook's valid `bpf_sock_addr`, and its field is writable
    /// in this hook.
    unsafe fn store(sa: *mut bpf_sock_addr, addr: &<Self::F as Family>::Addr);
}

/// `user_ip4` of an AF_INET socket.
enum User4 {}
/// `user_ip6` of an AF_INET6 socket.
enum User6 {}
/// The last word of a `user_ip6` that is `::ffff:a.b.c.d`: the first three
/// stay the v4-mapped prefix.
enum Mapped {}

impl Field for User4 {
    type F = V4;
    #[inline(always)]
    unsafe fn store(sa: *mut bpf_sock_addr, addr: &[u8; 4]) {
        // SAFETY: the caller's contract; a 32-bit store.
        unsafe { (*sa).user_ip4 = u32::from_ne_bytes(*addr) };
    }
}

impl Field for User6 {
    type F = V6;
    #[inline(always)]
    unsafe fn store(sa: *mut bpf_sock_addr, addr: &Addr6) {
        // SAFETY: the caller's contract; the kernel allows only 32-bit
        // stores to user_ip6, one word at a time.
        unsafe {
            (*sa).user_ip6[0] = addr[0];
            (*sa).user_ip6[1] = addr[1];
            (*sa).user_ip6[2] = addr[2];
            (*sa).user_ip6[3] = addr[3];
        }
    }
}

impl Field for Mapped {
    type F = V4;
    #[inline(always)]
    unsafe fn store(sa: *mut bpf_sock_addr, addr: &[u8; 4]) {
        // SAFETY: the caller's contract; a 32-bit store.
        unsafe { (*sa).user_ip6[3] = u32::from_ne_bytes(*addr) };
    }
}

/// `user_ip6`, a 32-bit word at a time (the only loads the kernel allows).
///
/// # Safety
///
/// `sa` is the hook's valid `bpf_sock_addr`.
#[inline(always)]
unsafe fn user_ip6(sa: *const bpf_sock_addr) -> Addr6 {
    // SAFETY: the caller's contract.
    unsafe {
        let ip = (*sa).user_ip6;
        [ip[0], ip[1], ip[2], ip[3]]
    }
}

/// `::ffff:0:0/96`, as the words of `user_ip6` hold it.
#[inline(always)]
fn is_v4_mapped(ip: &Addr6) -> bool {
    ip[0] == 0 && ip[1] == 0 && ip[2] == u32::from_ne_bytes([0, 0, 0xff, 0xff])
}

/// The protocol number of a balanced protocol; `None` for any other.
#[inline(always)]
fn balanced(proto: u32) -> Option<u8> {
    match proto {
        p if p == u32::from(PROTO_TCP) => Some(PROTO_TCP),
        p if p == u32::from(PROTO_UDP) => Some(PROTO_UDP),
        _ => None,
    }
}

/// Why a frontend connect is refused instead of passed on.
enum Refuse {
    /// Its source is outside the frontend's source ranges.
    SourceRange,
    NoEndpoints,
    NoLocalEndpoints,
    UnknownPort,
    Inconsistent,
}

/// The program's answer for a translation: allowed (and counted as
/// translated if it was), or refused with the errno kube-proxy's rules give.
#[inline(always)]
fn verdict<A: Counted>(call: Call, translation: Result<bool, Refuse>) -> i32 {
    match translation {
        Ok(translated) => {
            if translated {
                count::<A>(
                    At::SOCK_OUT,
                    match call {
                        Call::Connect => Reason::ConnectTranslated,
                        Call::Sendmsg => Reason::SendmsgTranslated,
                    },
                );
            }
            ALLOW
        }
        Err(refuse) => {
            let (reason, errno) = match refuse {
                // A firewall's refusal: kube-proxy drops, and the client
                // would wait out its timeout.
                Refuse::SourceRange => (Reason::DropSourceRange, EPERM),
                Refuse::NoEndpoints => (Reason::RefusedNoEndpoints, ECONNREFUSED),
                Refuse::UnknownPort => (Reason::RefusedUnknownPort, ECONNREFUSED),
                Refuse::Inconsistent => (Reason::RefusedInconsistent, ECONNREFUSED),
                // kube-proxy drops here and the client hangs until its
                // timeout; failing at once, distinctly, is deliberate.
                Refuse::NoLocalEndpoints => (Reason::RefusedNoLocalEndpoints, EHOSTUNREACH),
            };
            count::<A>(At::SOCK_OUT, reason);
            // ECONNREFUSED rather than the default EPERM, as kube-proxy's REJECT.
            // SAFETY: the helper exists for cgroup sock_addr programs (kernel >= 5.18).
            unsafe { bpf_set_retval(-errno) };
            DENY
        }
    }
}

/// Rewrites the frontend `addr`:`port` the hook's field holds to a backend
/// of it: whether it did; an error refuses the call.
#[inline(always)]
fn translate<S: Field>(
    ctx: &SockAddrContext,
    call: Call,
    addr: <S::F as Family>::Addr,
    proto: u8,
    port: u32,
) -> Result<bool, Refuse> {
    if !maybe_frontend(S::F::addr_bit(&addr)) {
        return Ok(false);
    }
    let netns = netns_of(ctx);
    if !sock_balanced(netns.flags) {
        count::<<S::F as Family>::Addr>(At::SOCK_OUT, Reason::PassedSockOptOut);
        return Ok(false);
    }
    // user_port holds the network-order port in its low 16 bits' bytes.
    let port_be = port as u16;
    let key = FrontendKey {
        addr_be: addr,
        port_be,
        proto,
        scope: SCOPE_INTERNAL,
    };
    let Some(backend) = choose::<S::F>(ctx, &key, &netns)? else {
        return Ok(false);
    };
    remember::<S::F>(ctx, call, &key, &backend);
    let (backend_addr, backend_port) = (backend.addr_be, backend.port_be);
    let sa = ctx.sock_addr;
    // SAFETY: the field and user_port are writable in connect*/sendmsg*
    // (32-bit stores).
    unsafe {
        S::store(sa, &backend_addr);
        (*sa).user_port = u32::from(backend_port);
    }
    Ok(true)
}

/// What the agent wrote of this socket's network namespace
/// (`lb_common::sock_netns`; all zero for none): whether it is balanced
/// here rather than per packet at its pod's interface, and the address it
/// sends from. Only addresses that may be frontends pay the lookup.
#[inline(always)]
fn netns_of(ctx: &SockAddrContext) -> SockNetns {
    // SAFETY: the helper is valid for sock_addr contexts (kernel >= 5.7).
    let netns = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    // SAFETY: a hash value stays mapped while the program runs (RCU); the
    // agent replaces an entry whole (an update swaps the element).
    LB_SOCK_NETNS
        .get_ptr(netns)
        .map(|v| unsafe { *v })
        .unwrap_or_default()
}

/// Whether the socket's namespace `netns` may reach `key`, whose state
/// has `FE_F_SOURCE_RANGES` (a cluster IP under
/// `--bpf-lb-source-range-all-types`): the address its sockets send from
/// is in one of the frontend's ranges. A namespace whose address the agent
/// has not written (a pod it has not found yet) is refused: the firewall
/// fails closed, as the tc programs' does.
#[inline(always)]
fn source_admitted<F: SockFamily>(key: &FrontendKey<F::Addr>, netns: &SockNetns) -> bool {
    F::netns_addr(netns).is_some_and(|src| F::in_source_ranges(key, src))
}

/// A backend of family `F` for `key`; `Ok(None)` leaves the address alone.
#[inline(always)]
fn choose<F: SockFamily>(
    ctx: &SockAddrContext,
    key: &FrontendKey<F::Addr>,
    netns: &SockNetns,
) -> Result<Option<Backend<F::Addr>>, Refuse> {
    // SAFETY: the helper has no preconditions.
    let rand = Random(unsafe { bpf_get_prandom_u32() });
    // SAFETY: the helper is valid for sock_addr contexts (kernel >= 5.7).
    let client = || unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let selection = select::<F>(key, true, &rand, client);
    if let Selection::Backend { flags, .. }
    | Selection::NoEndpoints { flags }
    | Selection::NoLocalEndpoints { flags } = selection
        && flags & FE_F_SOURCE_RANGES != 0
        && !source_admitted::<F>(key, netns)
    {
        return Err(Refuse::SourceRange);
    }
    match selection {
        Selection::NotFrontend => Ok(None),
        Selection::Removed => {
            count::<F::Addr>(At::SOCK_OUT, Reason::PassedFrontendRemoved);
            Ok(None)
        }
        Selection::NoEndpoints { .. } => Err(Refuse::NoEndpoints),
        Selection::NoLocalEndpoints { .. } => Err(Refuse::NoLocalEndpoints),
        Selection::UnknownPort => Err(Refuse::UnknownPort),
        Selection::Inconsistent => Err(Refuse::Inconsistent),
        Selection::Backend {
            backend, sticky, ..
        } => {
            if sticky {
                count::<F::Addr>(At::SOCK_OUT, Reason::AffinityHit);
            }
            Ok(Some(backend))
        }
    }
}

/// Records which frontend this socket addressed, for recvmsg/getpeername.
///
/// A connected socket (`connect*`, TCP or UDP) keeps it in its own storage,
/// allocated with the socket's memory and freed with it: no shared map to
/// insert into, nothing to evict. The stale-UDP reaper reads a UDP
/// socket's through the `lb_iter_udp` socket iterator. A later connect to
/// no Service leaves it: the readers match it against the socket's peer,
/// and during an upgrade, when old and new programs run on one connect, the
/// second sees the first one's translation as such a connect. (Only a UDP
/// socket reconnected straight to the very backend it was sent to still
/// shows the Service.)
///
/// An unconnected socket (`sendmsg*`) may send to several backends, of
/// several frontends. Its latest destination is in its own storage too, so
/// that a resolver's socket of one query (or of one query per record type,
/// to one backend) writes no shared map, and the reply a sequential client
/// waits for never depends on the shared map's evictions. A new
/// destination moves the previous one into the family's reverse-NAT map
/// (LRU, by socket cookie and backend), where late replies from it find
/// it. A repeated destination writes nothing.
#[inline(always)]
fn remember<F: SockFamily>(
    ctx: &SockAddrContext,
    call: Call,
    key: &FrontendKey<F::Addr>,
    backend: &Backend<F::Addr>,
) {
    let mut entry = entry::<F>(key, backend);
    // SAFETY: the context's socket is a full socket the hook holds; the
    // kernel copies `entry` into the storage if it creates it.
    let mine = unsafe { LB_SOCK_REVNAT.get_or_insert_ptr_mut(ctx, Some(&mut entry)) };
    if !mine.is_null() {
        // SAFETY: the storage lives as long as the socket, and only this
        // socket's connect or sendmsg writes it. A fresh one holds `entry`
        // already; an older one held a failed connect's peer, or the
        // socket's previous destination.
        let old = unsafe { &mut *mine };
        if *old == entry {
            return;
        }
        // A connected socket receives from its peer only. An unconnected
        // one may still get replies from its previous destination (of the
        // other family's maps, it stays in the storage).
        let moved = match call {
            Call::Connect => true,
            Call::Sendmsg => {
                old.family == F::TAG
                    && share::<F>(
                        ctx,
                        &F::narrow(&old.backend_be),
                        old.backend_port_be,
                        &F::narrow(&old.frontend_be),
                        old.frontend_port_be,
                    )
            }
        };
        if moved {
            *old = entry;
            return;
        }
    }
    share::<F>(
        ctx,
        &backend.addr_be,
        backend.port_be,
        &key.addr_be,
        key.port_be,
    );
}

/// Puts this socket's entry for the backend `addr`:`port_be` of the
/// frontend `frontend`:`frontend_port_be` into the family's reverse-NAT map
/// unless it is there: whether it is.
#[inline(always)]
fn share<F: SockFamily>(
    ctx: &SockAddrContext,
    addr: &F::Addr,
    port_be: u16,
    frontend: &F::Addr,
    frontend_port_be: u16,
) -> bool {
    // SAFETY: the helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let rev_key = rev_key::<F>(cookie, addr, port_be);
    let value = RevNatValue {
        addr_be: *frontend,
        port_be: frontend_port_be,
        _pad0: [0; 2],
    };
    // SAFETY: an LRU value stays mapped while the program runs (RCU).
    let same = F::revnat()
        .get_ptr(rev_key)
        .is_some_and(|v| unsafe { *v } == value);
    if same {
        return true;
    }
    // A failed insert costs only the frontend address in recvmsg and
    // getpeername; the connection itself works, so it is counted, not refused.
    if F::revnat().insert(rev_key, value, 0).is_err() {
        count::<F::Addr>(At::SOCK_OUT, Reason::RevnatUpdateFailed);
        return false;
    }
    // A lookup marks the new entry referenced, as the reply's recvmsg will.
    // A full map's LRU, short of free entries, takes back its CPUs'
    // recently inserted entries unreferenced first: unmarked, this live
    // socket's entry went before those of sockets already answered, and its
    // reply showed the backend's address (ARCHITECTURE, "A full
    // LB4_REVNAT").
    let _ = F::revnat().get_ptr(rev_key);
    true
}

/// Shows the frontend the backend `addr`:`port` stands for on this socket,
/// in the hook's field.
#[inline(always)]
fn reverse<S: Field>(ctx: &SockAddrContext, addr: <S::F as Family>::Addr, port: u32) -> i32 {
    if let Some((frontend, frontend_port)) = reversed::<S::F>(ctx, &addr, port as u16) {
        let sa = ctx.sock_addr;
        // SAFETY: the field and user_port are writable in
        // recvmsg*/getpeername*.
        unsafe {
            S::store(sa, &frontend);
            (*sa).user_port = u32::from(frontend_port);
        }
        count::<<S::F as Family>::Addr>(At::SOCK_IN, Reason::Reversed);
    }
    // These hooks cannot refuse; they only rewrite what the application sees.
    ALLOW
}

/// The frontend a backend of family `F` stands for on this socket.
#[inline(always)]
fn reversed<F: SockFamily>(
    ctx: &SockAddrContext,
    addr: &F::Addr,
    port_be: u16,
) -> Option<(F::Addr, u16)> {
    // SAFETY: the context's socket is a full socket the hook holds.
    let mine = unsafe { LB_SOCK_REVNAT.get_ptr_mut(ctx) };
    if !mine.is_null() {
        // SAFETY: the storage lives as long as the socket (see remember).
        let e = unsafe { *mine };
        if e.family == F::TAG && e.backend_port_be == port_be && e.backend_be == F::wide(addr) {
            return Some((F::narrow(&e.frontend_be), e.frontend_port_be));
        }
    }
    // SAFETY: the helper is valid for sock_addr contexts.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let key = rev_key::<F>(cookie, addr, port_be);
    // During a migration, a socket the old programs translated after the
    // agent copied their map has its entry only in that map.
    let frontend = F::revnat().get_ptr(key).or_else(|| {
        F::revnat_prev()
            .get_value_ptr_mut(0, &key)
            .map(|p| p.cast_const())
    })?;
    // SAFETY: the value stays mapped while the program runs (RCU). An LRU
    // map may recycle the element if it evicts this very entry meanwhile;
    // the address shown would then be wrong, the connection unaffected.
    Some(unsafe { ((*frontend).addr_be, (*frontend).port_be) })
}
