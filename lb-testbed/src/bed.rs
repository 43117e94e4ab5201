//! A bed for running the tc programs on crafted packets through
//! `BPF_PROG_TEST_RUN`: the agent's own eBPF object with small private
//! (unpinned) maps, filled as the agent fills them, and packet builders
//! and checkers. Shared by the tests and the per-packet cost bench.

use aya::{
    Ebpf, EbpfLoader,
    maps::{
        Array, ArrayOfMaps, HashMap, Map, MapData, PerCpuArray,
        lpm_trie::{Key, LpmTrie},
    },
    programs::{SchedClassifier, TestRun as _, TestRunOptions, Xdp},
};
use etherparse::{
    Icmpv4Header, Icmpv4Type, IpNumber, Ipv4Header, NetHeaders, PacketBuilder, PacketHeaders,
    TransportHeader, UdpHeader, icmpv4::DestUnreachableHeader,
};
use lb_agent::datapath::loader;
use lb_common::{
    Address, At, BACKEND_STATE_ACTIVE, Backend, Ct4Key, Ct4Value, Ct6Key, Ct6Value, DatapathConfig,
    DsrEndpointKey, FE_F_AFFINITY, FE_F_MAGLEV, FE_KIND_NODE_PORT, FrontendId, FrontendKey,
    FrontendState, MAGLEV_CHUNK, MaglevChunk, MaglevKey, Member, MemberKey, Nat4Key, Nat4Value,
    Nat6Key, Nat6Value, NodeNet, Reason, SCOPE_EXTERNAL, SCOPE_INTERNAL, SOURCE_RANGE_PREFIX,
    SOURCE_RANGE6_PREFIX, Slot, SlotKey, SourceRange, SpinLock, StatFamily, StatKey,
};

/// Writes the Maglev table of revision `rev` of frontend `fe_id`: entry
/// `i` names the frontend's backend `table[i]`, by the ids the bed gave
/// its backends.
fn write_table(
    map: &mut HashMap<MapData, MaglevKey, MaglevChunk>,
    fe_id: u32,
    rev: u16,
    table: &[u32],
) {
    for (chunk, entries) in table.chunks(MAGLEV_CHUNK).enumerate() {
        let mut value = MaglevChunk::default();
        for (slot, backend) in value.backend_ids.iter_mut().zip(entries) {
            *slot = fe_id * 100 + backend;
        }
        let key = MaglevKey {
            fe_id,
            rev,
            chunk: chunk as u16,
        };
        map.insert(key, value, 0).unwrap();
    }
}

/// What the programs return: pass on (TCX "next"), or drop.
pub const PASS: i32 = -1;
pub const DROP: i32 = 2;
/// `TC_ACT_REDIRECT`: sent on by `bpf_redirect`.
pub const REDIRECT: i32 = 7;

pub type Addr = ([u8; 4], u16);
/// An IPv6 address and port.
pub type Addr6 = ([u8; 16], u16);

pub const NODE: [u8; 4] = [192, 0, 2, 10];
pub const NODE_PORT: u16 = 30080;
pub const CLIENT: Addr = ([198, 51, 100, 7], 40000);
pub const LOCAL_POD: Addr = ([10, 1, 0, 5], 8080);
pub const REMOTE_POD: Addr = ([10, 2, 0, 9], 8080);

/// The IPv4 counter of `reason` at `at`.
pub const fn stat4(at: At, reason: Reason) -> StatKey {
    StatKey::new(at, StatFamily::V4, reason)
}

/// The IPv6 counter of `reason` at `at`.
pub const fn stat6(at: At, reason: Reason) -> StatKey {
    StatKey::new(at, StatFamily::V6, reason)
}

/// The agent's object with small private maps and its tc programs loaded.
pub struct Bed {
    ebpf: Ebpf,
    pub v4: Lb<[u8; 4]>,
    pub v6: Lb<[u8; 16]>,
    /// `LB_ADDRS`: a bit for every frontend's address.
    addrs: Array<MapData, u64>,
    config: Array<MapData, DatapathConfig>,
    stats: PerCpuArray<MapData, u64>,
    pub ct: HashMap<MapData, Ct4Key, Ct4Value>,
    pub nat: HashMap<MapData, Nat4Key, Nat4Value>,
    pub ct6: HashMap<MapData, Ct6Key, Ct6Value>,
    pub nat6: HashMap<MapData, Nat6Key, Nat6Value>,
    prev_ct: ArrayOfMaps<MapData, HashMap<MapData, Ct4Key, Ct4Value>>,
    prev_nat: ArrayOfMaps<MapData, HashMap<MapData, Nat4Key, Nat4Value>>,
    next_id: u32,
}

impl Drop for Bed {
    /// Every counter the programs counted is one the agent shows from the
    /// start: its reason is counted at that place ([`Reason::places`]).
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let shown: std::collections::BTreeSet<u32> =
            lb_common::counted_keys().map(StatKey::index).collect();
        for index in 0..lb_common::STATS_COUNT {
            let n: u64 = self.stats.get(&index, 0).unwrap().iter().sum();
            assert!(
                n == 0 || shown.contains(&index),
                "{:?} counted {n} times, at no place of its reason",
                StatKey::from_index(index)
            );
        }
    }
}

/// One family's load-balancing maps (`LB4_*` or `LB6_*`), written as the
/// agent writes them.
pub struct Lb<A: BedFamily> {
    frontends: HashMap<MapData, FrontendKey<A>, FrontendId>,
    states: Array<MapData, FrontendState<A>>,
    slots: HashMap<MapData, SlotKey, Slot>,
    pub backends: HashMap<MapData, u32, Backend<A>>,
    maglev: HashMap<MapData, MaglevKey, MaglevChunk>,
    members: HashMap<MapData, MemberKey, Member>,
    ranges: LpmTrie<MapData, SourceRange<A>, u32>,
    dsr_eps: HashMap<MapData, DsrEndpointKey<A>, u32>,
    node_nets: LpmTrie<MapData, A, NodeNet>,
}

impl<A: BedFamily> Lb<A> {
    /// The family's maps, taken out of the object.
    fn take(ebpf: &mut Ebpf) -> Self {
        let name = |map: &str| format!("LB{}_{map}", A::DIGIT);
        Self {
            frontends: take(ebpf, &name("FRONTENDS")),
            states: take(ebpf, &name("FE_STATE")),
            slots: take(ebpf, &name("SLOTS")),
            backends: take(ebpf, &name("BACKENDS")),
            maglev: take(ebpf, &name("MAGLEV")),
            members: take(ebpf, &name("MEMBERS")),
            ranges: take(ebpf, &name("SRC_RANGES")),
            dsr_eps: take(ebpf, &name("DSR_EPS")),
            node_nets: take(ebpf, &name("NODE_NETS")),
        }
    }
}

/// An address family of the bed: `[u8; 4]` or `[u8; 16]`, which picks its
/// maps and settings.
pub trait BedFamily: Address + aya::Pod {
    /// `4` or `6`, as the maps' names have it.
    const DIGIT: u8;
    /// Bits of a source-range key before the source address.
    const SOURCE_RANGE_PREFIX: u32;
    fn lb(bed: &mut Bed) -> &mut Lb<Self>;
    /// The address's bit in `LB_ADDRS`.
    fn bit(&self) -> (u32, u64);
    /// Sets the family's SNAT address in `cfg`.
    fn set_snat(cfg: &mut DatapathConfig, addr: Self);
}

impl BedFamily for [u8; 4] {
    const DIGIT: u8 = 4;
    const SOURCE_RANGE_PREFIX: u32 = SOURCE_RANGE_PREFIX;
    fn lb(bed: &mut Bed) -> &mut Lb<Self> {
        &mut bed.v4
    }
    fn bit(&self) -> (u32, u64) {
        lb_common::addr_bit4(*self)
    }
    fn set_snat(cfg: &mut DatapathConfig, addr: Self) {
        cfg.snat4_be = addr;
    }
}

impl BedFamily for [u8; 16] {
    const DIGIT: u8 = 6;
    const SOURCE_RANGE_PREFIX: u32 = SOURCE_RANGE6_PREFIX;
    fn lb(bed: &mut Bed) -> &mut Lb<Self> {
        &mut bed.v6
    }
    fn bit(&self) -> (u32, u64) {
        lb_common::addr_bit6(self)
    }
    fn set_snat(cfg: &mut DatapathConfig, addr: Self) {
        cfg.snat6_be = addr;
    }
}

fn take<T: TryFrom<Map>>(ebpf: &mut Ebpf, name: &str) -> T
where
    T::Error: std::fmt::Debug,
{
    let map = ebpf.take_map(name).expect("map in the object");
    T::try_from(map).expect("map of the expected type")
}

impl Bed {
    /// A bed whose conntrack holds 2048 flows.
    #[expect(
        clippy::new_without_default,
        reason = "every call loads the programs into the kernel: not a default value"
    )]
    pub fn new() -> Self {
        Self::with_flows(2048)
    }

    /// A bed whose conntrack holds `flows` flows (two entries each).
    pub fn with_flows(flows: u32) -> Self {
        let mut loader = EbpfLoader::new();
        for (map, size) in [
            ("LB4_FRONTENDS", 64),
            ("LB4_FE_STATE", 65),
            ("LB4_SLOTS", 256),
            ("LB4_BACKENDS", 256),
            ("LB4_MEMBERS", 256),
            ("LB4_AFFINITY", 256),
            ("LB4_MAGLEV", 64),
            ("LB6_MAGLEV", 64),
            ("LB4_REVNAT", 256),
            ("LB6_FRONTENDS", 64),
            ("LB6_FE_STATE", 65),
            ("LB6_SLOTS", 256),
            ("LB6_BACKENDS", 256),
            ("LB6_MEMBERS", 256),
            ("LB6_AFFINITY", 256),
            ("LB6_REVNAT", 256),
            ("LB4_CT", 2 * flows),
            ("LB4_NAT", flows),
            ("LB6_CT", 2 * flows),
            ("LB6_NAT", flows),
        ] {
            loader.map_max_entries(map, size);
        }
        let mut ebpf = loader
            .load(loader::object())
            .expect("loading the agent's eBPF object (needs root: CAP_BPF)");
        for name in [
            "lb_tc_ingress",
            "lb_tc_egress",
            "lb_tc_l3_in",
            "lb_tc_l3_out",
            "lb_tc_pod_in",
            "lb_tc_pod_out",
        ] {
            let prog: &mut SchedClassifier = ebpf
                .program_mut(name)
                .expect("program in the object")
                .try_into()
                .expect("a tc program");
            prog.load().expect("the verifier accepts the tc program");
        }
        Self {
            v4: Lb::take(&mut ebpf),
            v6: Lb::take(&mut ebpf),
            addrs: take(&mut ebpf, "LB_ADDRS"),
            config: take(&mut ebpf, "LB_CONFIG"),
            stats: take(&mut ebpf, "LB_STATS"),
            ct: take(&mut ebpf, "LB4_CT"),
            nat: take(&mut ebpf, "LB4_NAT"),
            ct6: take(&mut ebpf, "LB6_CT"),
            nat6: take(&mut ebpf, "LB6_NAT"),
            prev_ct: take(&mut ebpf, "LB4_CT_PREV"),
            prev_nat: take(&mut ebpf, "LB4_NAT_PREV"),
            ebpf,
            next_id: 1,
        }
    }

    /// Takes the map `name` out of the object, for a caller that reads or
    /// writes one the bed keeps no handle of.
    pub fn take_map<T: TryFrom<Map>>(&mut self, name: &str) -> T
    where
        T::Error: std::fmt::Debug,
    {
        take(&mut self.ebpf, name)
    }

    /// An external frontend `NODE:port/proto` with `backends`, written in
    /// the agent's order (backends, slots, state, then the key).
    pub fn frontend(&mut self, port: u16, proto: u8, flags: u16, backends: &[Addr]) {
        self.frontend_at((NODE, port), proto, flags, backends);
    }

    /// An external frontend `addr:port/proto` of either family with
    /// `backends`, written in the agent's order (backends, slots, state,
    /// then the key).
    pub fn frontend_at<A: BedFamily>(
        &mut self,
        at: (A, u16),
        proto: u8,
        flags: u16,
        backends: &[(A, u16)],
    ) {
        self.frontend_in(
            SCOPE_EXTERNAL,
            at,
            proto,
            flags | FE_KIND_NODE_PORT,
            backends,
        );
    }

    /// A cluster IP `addr:port/proto` (`SCOPE_INTERNAL`: the socket
    /// programs' and the pods' tc programs') with `backends`, and the
    /// address's wildcard, which stands for its undefined ports.
    pub fn cluster_ip_at<A: BedFamily>(
        &mut self,
        (addr, port): (A, u16),
        proto: u8,
        flags: u16,
        backends: &[(A, u16)],
    ) {
        self.frontend_in(SCOPE_INTERNAL, (addr, port), proto, flags, backends);
        let wildcard = FrontendKey {
            addr_be: addr,
            port_be: port.to_be(),
            proto,
            scope: SCOPE_INTERNAL,
        }
        .wildcard();
        let fe_id = self.next_id;
        self.next_id += 1;
        let lb = A::lb(self);
        let state = FrontendState {
            lock: SpinLock::default(),
            owner: wildcard,
            rev: 1,
            count: 0,
            flags: 0,
            _pad0: [0; 2],
            affinity_timeout: 0,
            maglev_size: 0,
        };
        lb.states.set(fe_id, state, 0).unwrap();
        let _ = lb.frontends.insert(wildcard, FrontendId { id: fe_id }, 0);
    }

    /// A frontend `addr:port/proto` of `scope` with `backends`, written in
    /// the agent's order (backends, slots, state, then the key).
    fn frontend_in<A: BedFamily>(
        &mut self,
        scope: u8,
        (addr, port): (A, u16),
        proto: u8,
        flags: u16,
        backends: &[(A, u16)],
    ) {
        let fe_id = self.next_id;
        self.next_id += 1;
        let key = FrontendKey {
            addr_be: addr,
            port_be: port.to_be(),
            proto,
            scope,
        };
        // The address's bit first, as the agent sets it.
        let (word, mask) = addr.bit();
        let bits = self.addrs.get(&word, 0).unwrap();
        self.addrs.set(word, bits | mask, 0).unwrap();
        let lb = A::lb(self);
        for (slot, (addr, port)) in backends.iter().enumerate() {
            let id = fe_id * 100 + slot as u32;
            let backend = Backend {
                addr_be: *addr,
                port_be: port.to_be(),
                proto,
                state: BACKEND_STATE_ACTIVE,
            };
            lb.backends.insert(id, backend, 0).unwrap();
            let slot = SlotKey {
                fe_id,
                rev: 1,
                slot: slot as u16,
            };
            lb.slots.insert(slot, Slot { backend_id: id }, 0).unwrap();
            if flags & FE_F_AFFINITY != 0 {
                let member = MemberKey {
                    fe_id,
                    rev: 1,
                    _pad0: [0; 2],
                    backend_id: id,
                };
                let at = Member {
                    slot: u32::from(slot.slot),
                };
                lb.members.insert(member, at, 0).unwrap();
            }
        }
        let state = FrontendState {
            lock: SpinLock::default(),
            owner: key,
            rev: 1,
            count: backends.len() as u16,
            flags,
            _pad0: [0; 2],
            // ClientIP's default, for frontends with affinity.
            affinity_timeout: if flags & FE_F_AFFINITY != 0 {
                10_800
            } else {
                0
            },
            maglev_size: 0,
        };
        lb.states.set(fe_id, state, 0).unwrap();
        lb.frontends
            .insert(key, FrontendId { id: fe_id }, 0)
            .unwrap();
    }

    /// Clears every bit of `LB_ADDRS`, as when the last frontend of each
    /// address went.
    pub fn clear_addrs(&mut self) {
        for word in 0..lb_common::ADDR_WORDS {
            self.addrs.set(word, 0, 0).unwrap();
        }
    }

    /// Gives the frontend `NODE:port/proto` a Maglev table ([`Self::maglev_at`]).
    pub fn maglev(&mut self, port: u16, proto: u8, table: &[u32], seed: u32) {
        self.maglev_at((NODE, port), proto, table, seed);
    }

    /// Gives the frontend `addr:port/proto` a Maglev table: entry `i` names
    /// its backend `table[i]` (an index into the frontend's backends), and
    /// flows are hashed with `seed`.
    pub fn maglev_at<A: BedFamily>(
        &mut self,
        (addr, port): (A, u16),
        proto: u8,
        table: &[u32],
        seed: u32,
    ) {
        let key = FrontendKey {
            addr_be: addr,
            port_be: port.to_be(),
            proto,
            scope: SCOPE_EXTERNAL,
        };
        let lb = A::lb(self);
        let fe_id = lb.frontends.get(&key, 0).unwrap().id;
        let mut state = lb.states.get(&fe_id, 0).unwrap();
        write_table(&mut lb.maglev, fe_id, state.rev, table);
        state.flags |= FE_F_MAGLEV;
        state.maglev_size = table.len() as u32;
        lb.states.set(fe_id, state, 0).unwrap();
        let cfg = DatapathConfig {
            maglev_seed: seed,
            ..self.config()
        };
        self.set_config(cfg);
    }

    /// Admits sources in `net/len` to the frontend `NODE:port/proto`
    /// ([`Self::admit_at`]).
    pub fn admit(&mut self, port: u16, proto: u8, net: [u8; 4], len: u32) {
        self.admit_at((NODE, port), proto, net, len);
    }

    /// Admits sources in `net/len` to the frontend `fe/proto`, as the agent
    /// writes `loadBalancerSourceRanges`.
    pub fn admit_at<A: BedFamily>(&mut self, fe: (A, u16), proto: u8, net: A, len: u32) {
        let data = SourceRange {
            addr_be: fe.0,
            port_be: fe.1.to_be(),
            proto,
            _pad0: 0,
            src_be: net,
        };
        let key = Key::new(A::SOURCE_RANGE_PREFIX + len, data);
        A::lb(self).ranges.insert(&key, 1, 0).unwrap();
    }

    /// Says that `endpoint` is on this node and an endpoint of the DSR
    /// frontend `frontend` (all-zero address: a NodePort), as the agent
    /// writes `LB4_DSR_EPS`.
    pub fn dsr_endpoint<A: BedFamily>(
        &mut self,
        frontend: (A, u16),
        endpoint: (A, u16),
        proto: u8,
    ) {
        let key = DsrEndpointKey {
            frontend_be: frontend.0,
            endpoint_be: endpoint.0,
            frontend_port_be: frontend.1.to_be(),
            endpoint_port_be: endpoint.1.to_be(),
            proto,
            _pad0: [0; 3],
        };
        A::lb(self).dsr_eps.insert(key, 1, 0).unwrap();
    }

    /// Says that `net/len` belongs to node number `node`, as the agent
    /// writes `LB4_NODE_NETS`.
    pub fn node_net<A: BedFamily>(&mut self, net: A, len: u32, node: u32) {
        A::lb(self)
            .node_nets
            .insert(&Key::new(len, net), NodeNet { node }, 0)
            .unwrap();
    }

    /// Seeds a flow of the kernel's from `client` to `to` as the agent
    /// does at a takeover from kube-proxy: the client's entry only, marked
    /// `CT_F_KERNEL`, with `seen` (the client's bits, the backend's), for
    /// `secs` more seconds.
    pub fn kernel_flow(&mut self, client: Addr, to: Addr, proto: u8, seen: (u8, u8), secs: u32) {
        let key = Ct4Key {
            saddr_be: client.0,
            daddr_be: to.0,
            sport_be: client.1.to_be(),
            dport_be: to.1.to_be(),
            proto,
            dir: lb_common::CT_DIR_IN,
            _pad0: [0; 2],
        };
        let value = Ct4Value {
            flags: lb_common::CT_F_KERNEL,
            seen_client: seen.0,
            seen_backend: seen.1,
            expires: lb_agent::datapath::conntrack::now() + secs,
            ..Ct4Value::default()
        };
        self.ct.insert(key, value, 0).unwrap();
    }

    /// SNATs flows of `addr`'s family to `addr`, ports `min..=max`.
    pub fn snat<A: BedFamily>(&mut self, addr: A, min: u16, max: u16) {
        let mut cfg = DatapathConfig {
            nat_port_min: min,
            nat_port_max: max,
            ..self.config()
        };
        A::set_snat(&mut cfg, addr);
        self.set_config(cfg);
    }

    pub fn config(&self) -> DatapathConfig {
        self.config.get(&0, 0).unwrap()
    }

    pub fn set_config(&mut self, cfg: DatapathConfig) {
        self.config.set(0, cfg, 0).unwrap();
    }

    /// Puts `old`'s conntrack and SNAT maps in this bed's previous-map
    /// slots and says so in the settings, as the agent does while it
    /// switches to new maps.
    pub fn migrating_from(&mut self, old: &Bed) {
        self.prev_ct.set(0, &old.ct, 0).unwrap();
        self.prev_nat.set(0, &old.nat, 0).unwrap();
        let cfg = DatapathConfig {
            flags: lb_common::CFG_F_PREV,
            ..self.config()
        };
        self.set_config(cfg);
    }

    fn program(&self, name: &str) -> &SchedClassifier {
        self.ebpf
            .program(name)
            .expect("program in the object")
            .try_into()
            .expect("a tc program")
    }

    /// Runs program `name` on `packet`: its verdict and the packet after it.
    pub fn run(&self, name: &str, packet: &[u8]) -> (i32, Vec<u8>) {
        self.run_on(name, packet, 0)
    }

    /// Runs program `name` on `packet` as if on device `ifindex` of the
    /// caller's network namespace (0: the loopback device), where its FIB
    /// lookups happen: its verdict and the packet after it.
    pub fn run_on(&self, name: &str, packet: &[u8], ifindex: u32) -> (i32, Vec<u8>) {
        self.try_run_on(name, packet, ifindex)
            .expect("BPF_PROG_TEST_RUN")
    }

    /// [`Self::run_on`], or the kernel's refusal to run the program on
    /// `packet`.
    pub fn try_run_on(
        &self,
        name: &str,
        packet: &[u8],
        ifindex: u32,
    ) -> Result<(i32, Vec<u8>), aya::programs::ProgramError> {
        let mut out = vec![0u8; packet.len() + 256];
        // `struct __sk_buff` up to its `ifindex` (offset 40), the rest 0.
        let mut skb = [0u8; 44];
        skb[40..].copy_from_slice(&ifindex.to_ne_bytes());
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(packet);
        opts.data_out = Some(&mut out);
        if ifindex != 0 {
            opts.ctx_in = Some(&skb);
        }
        let result = self.program(name).test_run(opts)?;
        out.truncate(result.data_size_out as usize);
        Ok((result.return_value as i32, out))
    }

    /// Runs program `name` on `packet` as on device `ifindex` (see
    /// [`Self::run_on`]) with the checksum a NIC computes over the whole
    /// packet (`BPF_F_TEST_SKB_CHECKSUM_COMPLETE`: the kernel sums the
    /// packet before the run and checks the skb's sum against the packet
    /// after it): its verdict and the packet after it, or the kernel's
    /// `EBADMSG` when the program changed bytes without updating the sum.
    pub fn run_summed(
        &self,
        name: &str,
        packet: &[u8],
        ifindex: u32,
    ) -> std::io::Result<(i32, Vec<u8>)> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        const BPF_PROG_TEST_RUN: libc::c_long = 10;
        const BPF_F_TEST_SKB_CHECKSUM_COMPLETE: u32 = 1 << 2;
        let fd = self.program(name).fd().expect("a loaded program");
        let mut out = vec![0u8; packet.len() + 256];
        let mut skb = [0u8; 44];
        skb[40..].copy_from_slice(&ifindex.to_ne_bytes());
        // `union bpf_attr`'s `test` member, as the kernel lays it out.
        #[repr(C)]
        #[derive(Default)]
        struct TestRun {
            prog_fd: u32,
            retval: u32,
            data_size_in: u32,
            data_size_out: u32,
            data_in: u64,
            data_out: u64,
            repeat: u32,
            duration: u32,
            ctx_size_in: u32,
            ctx_size_out: u32,
            ctx_in: u64,
            ctx_out: u64,
            flags: u32,
            cpu: u32,
            batch_size: u32,
            _pad: u32,
        }
        let mut attr = TestRun {
            prog_fd: fd.as_fd().as_raw_fd() as u32,
            data_size_in: packet.len() as u32,
            data_size_out: out.len() as u32,
            data_in: packet.as_ptr() as u64,
            data_out: out.as_mut_ptr() as u64,
            ctx_size_in: if ifindex == 0 { 0 } else { skb.len() as u32 },
            ctx_in: skb.as_ptr() as u64,
            flags: BPF_F_TEST_SKB_CHECKSUM_COMPLETE,
            ..TestRun::default()
        };
        // SAFETY: `attr` is a valid BPF_PROG_TEST_RUN attribute whose
        // buffers (`packet`, `out`, `skb`) live across the call, `out`
        // writable for the size given.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &raw mut attr,
                size_of::<TestRun>(),
            )
        };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
        out.truncate(attr.data_size_out as usize);
        Ok((attr.retval as i32, out))
    }

    /// Runs program `name` once on `packet`: the time the kernel measured
    /// around the program alone. (A `repeat` run would feed the program its
    /// own output, which a translating program has already rewritten.)
    pub fn time(&self, name: &str, packet: &[u8]) -> std::time::Duration {
        self.time_repeated(name, packet, 1)
    }

    /// Runs program `name` `repeat` times on `packet`, each run on what the
    /// one before left: the mean time per run, as the kernel measured it.
    pub fn time_repeated(&self, name: &str, packet: &[u8], repeat: u32) -> std::time::Duration {
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(packet);
        opts.repeat = repeat;
        let result = self
            .program(name)
            .test_run(opts)
            .expect("BPF_PROG_TEST_RUN");
        result.duration
    }

    /// Loads the XDP fast path (`lb_xdp`), which few tests run: its
    /// verification takes a while.
    pub fn load_xdp(&mut self) {
        let prog: &mut Xdp = self
            .ebpf
            .program_mut("lb_xdp")
            .expect("program in the object")
            .try_into()
            .expect("an XDP program");
        prog.load().expect("the verifier accepts the XDP program");
    }

    /// Tells `lb_xdp` the devices it runs on (it may redirect to them), as
    /// the agent writes them.
    pub fn xdp_devices(&mut self, ifindexes: &[u32]) {
        let mut list = [0u32; lb_common::XDP_DEVICES_MAX];
        list[..ifindexes.len()].copy_from_slice(ifindexes);
        let map = self
            .ebpf
            .map_mut(lb_common::XDP_DEVICES_SECTION)
            .expect("the programs' .bss");
        let mut array: Array<_, [u32; lb_common::XDP_DEVICES_MAX]> =
            Array::try_from(map).expect("an array");
        array.set(0, list, 0).unwrap();
    }

    /// How many flows the XDP fast path's cache holds, IPv4 and IPv6.
    pub fn xdp_flows(&self) -> (usize, usize) {
        let map = |name| self.ebpf.map(name).expect("the cache in the object");
        let v4 = |name| {
            let m: HashMap<_, lb_common::XdpFlow4Key, lb_common::XdpFlow4> =
                HashMap::try_from(map(name)).expect("a hash map");
            m.keys().count()
        };
        let v6 = |name| {
            let m: HashMap<_, lb_common::XdpFlow6Key, lb_common::XdpFlow6> =
                HashMap::try_from(map(name)).expect("a hash map");
            m.keys().count()
        };
        (v4("LB4_XDP_FLOWS"), v6("LB6_XDP_FLOWS"))
    }

    /// Moves the XDP flow cache's generation on, as the agent does on a
    /// route or neighbour change.
    pub fn bump_xdp_generation(&mut self) {
        let map = self
            .ebpf
            .map_mut("LB_XDP_GENERATION")
            .expect("the generation in the object");
        let mut array: Array<_, u32> = Array::try_from(map).expect("an array");
        let now = array.get(&0, 0).unwrap();
        array.set(0, now + 1, 0).unwrap();
    }

    /// Runs `lb_xdp` on `packet` as if it arrived on device `ifindex` of
    /// the caller's network namespace (where its FIB lookups happen): its
    /// action and the frame after it.
    pub fn xdp(&self, packet: &[u8], ifindex: u32) -> (u32, Vec<u8>) {
        self.try_xdp(packet, ifindex).expect("BPF_PROG_TEST_RUN")
    }

    /// [`Self::xdp`], or the kernel's refusal to run the program on
    /// `packet`.
    pub fn try_xdp(
        &self,
        packet: &[u8],
        ifindex: u32,
    ) -> Result<(u32, Vec<u8>), aya::programs::ProgramError> {
        let mut out = vec![0u8; packet.len() + 256];
        let result = self.run_xdp(packet, ifindex, Some(&mut out), 1)?;
        out.truncate(result.data_size_out as usize);
        Ok((result.return_value, out))
    }

    /// The kernel's mean time per run of `lb_xdp` on `packet` arriving on
    /// `ifindex`, `repeat` times over the same frame (which each run leaves
    /// as it rewrote it).
    pub fn time_xdp(&self, packet: &[u8], ifindex: u32, repeat: u32) -> std::time::Duration {
        self.run_xdp(packet, ifindex, None, repeat)
            .expect("BPF_PROG_TEST_RUN")
            .duration
    }

    fn run_xdp(
        &self,
        packet: &[u8],
        ifindex: u32,
        out: Option<&mut [u8]>,
        repeat: u32,
    ) -> Result<aya::programs::TestRunResult, aya::programs::ProgramError> {
        let prog: &Xdp = self
            .ebpf
            .program("lb_xdp")
            .expect("program in the object")
            .try_into()
            .expect("an XDP program");
        // `struct xdp_md`: data, data_end, data_meta, ingress_ifindex,
        // rx_queue_index, egress_ifindex.
        let mut md = Vec::with_capacity(24);
        for word in [0, packet.len() as u32, 0, ifindex, 0, 0] {
            md.extend(word.to_ne_bytes());
        }
        let mut opts = TestRunOptions::new();
        opts.data_in = Some(packet);
        opts.data_out = out;
        opts.ctx_in = Some(&md);
        opts.repeat = repeat;
        prog.test_run(opts)
    }

    pub fn ingress(&self, packet: &[u8]) -> (i32, Vec<u8>) {
        self.run("lb_tc_ingress", packet)
    }

    pub fn egress(&self, packet: &[u8]) -> (i32, Vec<u8>) {
        self.run("lb_tc_egress", packet)
    }

    /// Runs tc ingress as on device `ifindex` (see [`Self::run_on`]).
    pub fn ingress_on(&self, packet: &[u8], ifindex: u32) -> (i32, Vec<u8>) {
        self.run_on("lb_tc_ingress", packet, ifindex)
    }

    /// Runs tc egress as on device `ifindex` (see [`Self::run_on`]).
    pub fn egress_on(&self, packet: &[u8], ifindex: u32) -> (i32, Vec<u8>) {
        self.run_on("lb_tc_egress", packet, ifindex)
    }

    /// Runs the ingress program of a pod's host-side interface (the pod's
    /// packets).
    pub fn pod_in(&self, packet: &[u8]) -> (i32, Vec<u8>) {
        self.run("lb_tc_pod_in", packet)
    }

    /// Runs the egress program of a pod's host-side interface (packets to
    /// the pod).
    pub fn pod_out(&self, packet: &[u8]) -> (i32, Vec<u8>) {
        self.run("lb_tc_pod_out", packet)
    }

    /// Runs the ingress program of devices without a link-layer header on
    /// `packet` (an IP packet).
    pub fn ingress_l3(&self, packet: &[u8]) -> (i32, Vec<u8>) {
        self.run("lb_tc_l3_in", packet)
    }

    /// Counter `key`, summed over CPUs.
    pub fn stat(&self, key: StatKey) -> u64 {
        self.stats.get(&key.index(), 0).unwrap().iter().sum()
    }

    /// Pins the conntrack and SNAT maps under `dir` with their pin names,
    /// as the agent's `maps/` holds them.
    pub fn pin_conntrack(&self, dir: &std::path::Path) {
        use aya::maps::IterableMap as _;
        self.ct.map().pin(dir.join(lb_common::CT4.pin)).unwrap();
        self.nat.map().pin(dir.join(lb_common::NAT4.pin)).unwrap();
        self.ct6.map().pin(dir.join(lb_common::CT6.pin)).unwrap();
        self.nat6.map().pin(dir.join(lb_common::NAT6.pin)).unwrap();
        self.v4
            .backends
            .map()
            .pin(dir.join(lb_common::BACKENDS4.pin))
            .unwrap();
    }

    pub fn ct(&self) -> Vec<(Ct4Key, Ct4Value)> {
        self.ct.iter().map(Result::unwrap).collect()
    }

    pub fn nat(&self) -> Vec<(Nat4Key, Nat4Value)> {
        self.nat.iter().map(Result::unwrap).collect()
    }

    pub fn ct6(&self) -> Vec<(Ct6Key, Ct6Value)> {
        self.ct6.iter().map(Result::unwrap).collect()
    }

    pub fn nat6(&self) -> Vec<(Nat6Key, Nat6Value)> {
        self.nat6.iter().map(Result::unwrap).collect()
    }
}

/// TCP flags of a crafted segment.
#[derive(Clone, Copy)]
pub enum Tcp {
    Syn,
    SynAck,
    Ack,
    Fin,
    Rst,
}

pub fn tcp(src: Addr, dst: Addr, flags: Tcp) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src.0, dst.0, 64)
        .tcp(src.1, dst.1, 1000, 64_240);
    let builder = match flags {
        Tcp::Syn => builder.syn(),
        Tcp::SynAck => builder.syn().ack(1001),
        Tcp::Ack => builder.ack(1001),
        Tcp::Fin => builder.fin().ack(1001),
        Tcp::Rst => builder.rst(),
    };
    let payload = b"identity?";
    let mut out = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut out, payload).unwrap();
    out
}

pub fn udp(src: Addr, dst: Addr) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src.0, dst.0, 64)
        .udp(src.1, dst.1);
    let payload = b"identity?";
    let mut out = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut out, payload).unwrap();
    out
}

/// A UDP datagram of `len` payload bytes from `src` to `dst` with IP id
/// `id`, cut into IPv4 fragments of at most `mtu` bytes each, as Ethernet
/// frames: the first carries the UDP header.
pub fn udp_fragments(src: Addr, dst: Addr, id: u16, len: usize, mtu: usize) -> Vec<Vec<u8>> {
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut ip = Ipv4Header::new(0, 64, IpNumber::UDP, src.0, dst.0).unwrap();
    // A fragment never has don't fragment set.
    ip.dont_fragment = false;
    let udp = UdpHeader::with_ipv4_checksum(src.1, dst.1, &ip, &payload).unwrap();
    let mut datagram = udp.to_bytes().to_vec();
    datagram.extend(&payload);
    let per = (mtu - 20) / 8 * 8;
    datagram
        .chunks(per)
        .enumerate()
        .map(|(i, chunk)| {
            ip.identification = id;
            ip.fragment_offset = etherparse::IpFragOffset::try_new((i * per / 8) as u16).unwrap();
            ip.more_fragments = (i + 1) * per < datagram.len();
            ip.set_payload_len(chunk.len()).unwrap();
            ip.header_checksum = ip.calc_header_checksum();
            let mut frame = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
            frame.extend(ip.to_bytes());
            frame.extend(chunk);
            frame
        })
        .collect()
}

/// The IPv4 header of a frame: addresses, and whether it is a fragment
/// after the first; its checksum checked.
pub fn seen_ip(packet: &[u8]) -> ([u8; 4], [u8; 4], bool) {
    let (ip, _) = Ipv4Header::from_slice(&packet[14..]).expect("an IPv4 header");
    assert_ipv4_checksum(&ip, "IPv4 checksum");
    (ip.source, ip.destination, ip.fragment_offset.value() != 0)
}

/// A UDP datagram without a checksum (0), as IPv4 allows.
pub fn udp_no_checksum(src: Addr, dst: Addr) -> Vec<u8> {
    let mut out = udp(src, dst);
    let csum = 14 + 20 + 6;
    out[csum..csum + 2].copy_from_slice(&[0, 0]);
    out
}

/// The addresses of a packet the programs returned, after checking that
/// every checksum in it is right (a UDP checksum of 0 stays 0).
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub src: Addr,
    pub dst: Addr,
}

/// An Ethernet frame's headers and its IPv4 header, whose checksum is
/// checked.
fn ipv4_headers(packet: &[u8]) -> (PacketHeaders<'_>, Ipv4Header) {
    let headers = PacketHeaders::from_ethernet_slice(packet).expect("a valid packet");
    let Some(NetHeaders::Ipv4(ip, _)) = &headers.net else {
        panic!("not IPv4: {headers:?}");
    };
    let ip = ip.clone();
    assert_ipv4_checksum(&ip, "IPv4 checksum");
    (headers, ip)
}

fn assert_ipv4_checksum(ip: &Ipv4Header, what: &str) {
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "{what}");
}

pub fn seen(packet: &[u8]) -> Seen {
    let (headers, ip) = ipv4_headers(packet);
    let payload = headers.payload.slice();
    let (sport, dport) = match &headers.transport {
        Some(TransportHeader::Tcp(t)) => {
            let want = t.calc_checksum_ipv4(&ip, payload).unwrap();
            assert_eq!(t.checksum, want, "TCP checksum");
            (t.source_port, t.destination_port)
        }
        Some(TransportHeader::Udp(u)) => {
            if u.checksum != 0 {
                let want = u.calc_checksum_ipv4(&ip, payload).unwrap();
                assert_eq!(u.checksum, want, "UDP checksum");
            }
            (u.source_port, u.destination_port)
        }
        other => panic!("not TCP or UDP: {other:?}"),
    };
    Seen {
        src: (ip.source, sport),
        dst: (ip.destination, dport),
    }
}

pub fn flow(src: Addr, dst: Addr) -> Seen {
    Seen { src, dst }
}

/// An ICMP error from `src` to `dst` quoting `about` (an Ethernet frame of
/// ours; the quote is its IP packet, as Linux quotes as much as fits).
pub fn icmp_error(
    src: [u8; 4],
    dst: [u8; 4],
    kind: DestUnreachableHeader,
    about: &[u8],
) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(kind));
    let quote = &about[14..];
    let mut out = Vec::with_capacity(builder.size(quote.len()));
    builder.write(&mut out, quote).unwrap();
    out
}

pub const FRAG_NEEDED: DestUnreachableHeader =
    DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 };

/// An ICMP error's outer addresses and the flow its quote shows, after
/// checking the outer IPv4, ICMP and quoted IPv4 checksums.
pub fn seen_icmp(packet: &[u8]) -> ([u8; 4], [u8; 4], Seen) {
    let (headers, ip) = ipv4_headers(packet);
    let Some(TransportHeader::Icmpv4(icmp)) = &headers.transport else {
        panic!("not ICMP: {headers:?}");
    };
    let quote = headers.payload.slice();
    let want = Icmpv4Header::with_checksum(icmp.icmp_type.clone(), quote).checksum;
    assert_eq!(icmp.checksum, want, "ICMP checksum");
    let inner = PacketHeaders::from_ip_slice(quote).expect("a quoted packet");
    let Some(NetHeaders::Ipv4(inner_ip, _)) = &inner.net else {
        panic!("quote not IPv4: {inner:?}");
    };
    assert_ipv4_checksum(inner_ip, "quoted IPv4 checksum");
    let Some(TransportHeader::Tcp(t)) = &inner.transport else {
        panic!("quote not TCP: {inner:?}");
    };
    let flow = Seen {
        src: (inner_ip.source, t.source_port),
        dst: (inner_ip.destination, t.destination_port),
    };
    (ip.source, ip.destination, flow)
}

pub const FRONTEND: Addr = (NODE, NODE_PORT);

/// Runs `f` on CPU 0 only: `BPF_PROG_TEST_RUN` runs the program on the
/// calling CPU, and per-CPU state (the budget of unconfirmed flows) is
/// that CPU's.
pub fn on_one_cpu(f: impl FnOnce()) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside
    // it; sched_setaffinity(0) changes only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
    f();
}
