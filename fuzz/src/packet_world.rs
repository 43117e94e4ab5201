//! The world `packet_programs` runs frames in: the agent's eBPF object (tc
//! programs and XDP) on small private maps, filled as the agent fills them
//! (NodePorts with a local and a remote endpoint for both families, a
//! Maglev NodePort, an externalIP, DSR NodePorts, this node's endpoints of
//! DSR frontends balanced elsewhere, the node networks, SNAT ranges), and
//! flows of every kind made by traffic: the state every input starts from.
//!
//! The programs' FIB lookups happen in a network namespace of their own
//! (the tc tests' `fib_netns`), which the fuzzing thread enters for good:
//! only routes and neighbours, and `BPF_PROG_TEST_RUN` sends nothing.

use std::collections::{BTreeMap, BTreeSet};

use aya::{
    maps::{HashMap, IterableMap as _, MapData},
    programs::ProgramError,
};
use lb_agent::datapath::Reader;
use lb_common::{
    Ct4Key, Ct4Value, Ct6Key, Ct6Value, FE_F_DSR, Frag4Key, Frag4Value, Frag6Key, Nat4Key,
    Nat4Value, Nat6Key, Nat6Value, PROTO_TCP, PROTO_UDP,
};
use lb_testbed::{
    bed::{self, Bed, Tcp},
    fib_netns::fib_netns,
    packets6::{tcp6, udp6},
};

use crate::packet_frame::{Hook, Host, Port, Step, dsr_udp};

/// An address of either family (IPv4 in the first four bytes), a port and
/// a protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ep {
    pub v6: bool,
    pub addr: [u8; 16],
    pub port: u16,
    pub proto: u8,
}

impl Ep {
    pub fn v4(addr: [u8; 4], port: u16, proto: u8) -> Self {
        let mut a = [0; 16];
        a[..4].copy_from_slice(&addr);
        Self {
            v6: false,
            addr: a,
            port,
            proto,
        }
    }

    pub fn v6(addr: [u8; 16], port: u16, proto: u8) -> Self {
        Self {
            v6: true,
            addr,
            port,
            proto,
        }
    }
}

/// An endpoint on this node of a DSR frontend: the frontend (all-zero
/// address: a NodePort, on any node's address) and the endpoint.
#[derive(Clone, Copy, Debug)]
pub struct DsrEndpoint {
    pub frontend: Ep,
    pub endpoint: Ep,
}

/// What the agent programmed: the only addresses an entry may name.
#[derive(Debug, Default)]
pub struct Known {
    pub frontends: BTreeSet<Ep>,
    /// The frontends that forward by DSR.
    pub dsr_frontends: BTreeSet<Ep>,
    pub backends: BTreeSet<Ep>,
    pub dsr_endpoints: Vec<DsrEndpoint>,
    /// The SNAT addresses, IPv4 then IPv6 (port 0, protocol 0).
    pub snat: [Ep; 2],
}

/// The entries of the flow maps, as a map read lists them. (Not the
/// fragment maps, which are no flow's state: see `packet_check`.)
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    pub ct4: BTreeMap<Ct4Key, Ct4Value>,
    pub nat4: BTreeMap<Nat4Key, Nat4Value>,
    pub ct6: BTreeMap<Ct6Key, Ct6Value>,
    pub nat6: BTreeMap<Nat6Key, Nat6Value>,
}

/// What a program did with a frame.
#[derive(Debug)]
pub struct Outcome {
    pub verdict: i32,
    /// The frame after the program (XDP: behind any metadata it wrote).
    pub frame: Vec<u8>,
    /// XDP's metadata word, if it wrote one.
    pub meta: Option<u32>,
}

pub struct World {
    bed: Bed,
    frag4: HashMap<MapData, Frag4Key, Frag4Value>,
    frag6: HashMap<MapData, Frag6Key, Frag4Value>,
    readers: Readers,
    /// `x0`, `x1`, `x2` in the namespace.
    devices: [u32; 3],
    pub known: Known,
    /// The state every input starts from.
    pub start: State,
}

const NODE: Host = Host::Node;
const NODE_PORT: u16 = 30080;
const DSR_PORT: u16 = 30090;
const MAGLEV_PORT: u16 = 30070;
const SNAT_MIN: u16 = 61_000;
const SNAT_MAX: u16 = 61_015;
/// The largest frame `BPF_PROG_TEST_RUN` takes with room to grow.
pub const MAX_FRAME: usize = 1514;

impl World {
    /// Builds the world in a namespace of its own, which the calling
    /// thread enters for good.
    pub fn new() -> Self {
        let ns = fib_netns();
        let devices = [ns.ifindex("x0"), ns.ifindex("x1"), ns.ifindex("x2")];
        ns.enter();
        // Its name goes; the namespace lives while this thread is in it.
        drop(ns);

        // Room for the flows made at the start and what an input adds; a
        // small map is also a fast one to read whole.
        let mut bed = Bed::with_flows(64);
        bed.load_xdp();
        bed.xdp_devices(&[devices[0], devices[2]]);
        let mut known = Known::default();
        let node4 = NODE.v4();
        let node6 = NODE.v6();
        bed.snat(node4, SNAT_MIN, SNAT_MAX);
        bed.snat(node6, SNAT_MIN, SNAT_MAX);
        known.snat = [Ep::v4(node4, 0, 0), Ep::v6(node6, 0, 0)];

        let local4 = (Host::LocalPod.v4(), 8080);
        let remote4 = (Host::RemotePod.v4(), 8080);
        let third4 = (Host::ThirdPod.v4(), 8080);
        let local6 = (Host::LocalPod.v6(), 8080);
        let remote6 = (Host::RemotePod.v6(), 8080);
        for proto in [PROTO_TCP, PROTO_UDP] {
            let mut fe4 = |bed: &mut Bed, at: ([u8; 4], u16), flags: u16, eps: &[bed::Addr]| {
                bed.frontend_at(at, proto, flags, eps);
                let fe = Ep::v4(at.0, at.1, proto);
                known.frontends.insert(fe);
                if flags & FE_F_DSR != 0 {
                    known.dsr_frontends.insert(fe);
                }
                known
                    .backends
                    .extend(eps.iter().map(|&(a, p)| Ep::v4(a, p, proto)));
            };
            fe4(&mut bed, (node4, NODE_PORT), 0, &[local4, remote4]);
            fe4(&mut bed, (node4, DSR_PORT), FE_F_DSR, &[remote4, third4]);
            fe4(&mut bed, (Host::ExternalIp.v4(), 80), 0, &[remote4]);
            for (at, flags, eps) in [
                ((node6, NODE_PORT), 0, [local6, remote6]),
                ((node6, DSR_PORT), FE_F_DSR, [remote6, remote6]),
            ] {
                bed.frontend_at(at, proto, flags, &eps);
                let fe = Ep::v6(at.0, at.1, proto);
                known.frontends.insert(fe);
                if flags & FE_F_DSR != 0 {
                    known.dsr_frontends.insert(fe);
                }
                known
                    .backends
                    .extend(eps.iter().map(|&(a, p)| Ep::v6(a, p, proto)));
            }
            // This node holds `LocalPod` for DSR NodePorts balanced on
            // any node.
            bed.dsr_endpoint(([0; 4], DSR_PORT), local4, proto);
            bed.dsr_endpoint(([0; 16], DSR_PORT), local6, proto);
            known.dsr_endpoints.push(DsrEndpoint {
                frontend: Ep::v4([0; 4], DSR_PORT, proto),
                endpoint: Ep::v4(local4.0, local4.1, proto),
            });
            known.dsr_endpoints.push(DsrEndpoint {
                frontend: Ep::v6([0; 16], DSR_PORT, proto),
                endpoint: Ep::v6(local6.0, local6.1, proto),
            });
        }
        bed.frontend_at((node4, MAGLEV_PORT), PROTO_TCP, 0, &[local4, remote4]);
        let table: Vec<u32> = (0..251).map(|i| i % 2).collect();
        bed.maglev(MAGLEV_PORT, PROTO_TCP, &table, 0x5eed);
        known
            .frontends
            .insert(Ep::v4(node4, MAGLEV_PORT, PROTO_TCP));
        // The node networks: this node (1) and the remote pods' (2).
        bed.node_net(node4, 32, 1);
        bed.node_net([10, 1, 0, 0], 24, 1);
        bed.node_net(Host::OtherNode.v4(), 32, 2);
        bed.node_net([10, 2, 0, 0], 24, 2);
        bed.node_net(node6, 128, 1);
        bed.node_net(Host::LocalPod.v6(), 64, 1);
        bed.node_net(Host::RemotePod.v6(), 64, 2);

        let frag4: HashMap<MapData, Frag4Key, Frag4Value> = bed.take_map("LB4_FRAG");
        let frag6: HashMap<MapData, Frag6Key, Frag4Value> = bed.take_map("LB6_FRAG");
        let readers = Readers {
            ct4: reader(&bed.ct),
            nat4: reader(&bed.nat),
            ct6: reader(&bed.ct6),
            nat6: reader(&bed.nat6),
            frag4: reader(&frag4),
            frag6: reader(&frag6),
        };
        let mut world = Self {
            bed,
            frag4,
            frag6,
            readers,
            devices,
            known,
            start: State::default(),
        };
        world.make_flows();
        world.start = world.state();
        world
    }

    /// Flows of every kind, made by traffic as clients make them: through
    /// tc ingress, then what it forwards through tc egress.
    fn make_flows(&mut self) {
        let client = (Host::Client.v4(), 40000);
        let client6 = (Host::Client.v6(), 40000);
        let node4 = NODE.v4();
        let node6 = NODE.v6();
        let mut frames = Vec::new();
        for port in 40000..40002 {
            let c = (client.0, port);
            frames.push(bed::tcp(c, (node4, NODE_PORT), Tcp::Syn));
            frames.push(bed::udp(c, (node4, NODE_PORT)));
            frames.push(bed::tcp(c, (node4, DSR_PORT), Tcp::Syn));
            frames.push(bed::udp(c, (node4, MAGLEV_PORT)));
            frames.push(tcp6((client6.0, port), (node6, NODE_PORT), Tcp::Syn));
            frames.push(udp6((client6.0, port), (node6, DSR_PORT)));
        }
        frames.push(bed::udp(client, (Host::ExternalIp.v4(), 80)));
        // A flow balanced elsewhere to this node's DSR endpoint.
        for v6 in [false, true] {
            frames.push(dsr_udp(
                v6,
                Host::OtherClient,
                Host::LocalPod,
                Port::Pod,
                Host::OtherNode,
                Port::DsrNodePort,
            ));
        }
        for frame in frames {
            let step = Step {
                hook: Hook::Ingress,
                device: 0,
                frame,
            };
            let Ok(ingress) = self.run(&step) else {
                continue;
            };
            if ingress.frame != step.frame {
                let _ = self.run(&Step {
                    hook: Hook::Egress,
                    device: 0,
                    frame: ingress.frame,
                });
            }
        }
    }

    /// Runs one step: the program's verdict and the frame after it, or the
    /// kernel's refusal to run it.
    pub fn run(&self, step: &Step) -> Result<Outcome, ProgramError> {
        let ifindex = self.devices[usize::from(step.device) % 3];
        let frame = &step.frame;
        match step.hook {
            Hook::Ingress | Hook::Egress => {
                let name = if step.hook == Hook::Ingress {
                    "lb_tc_ingress"
                } else {
                    "lb_tc_egress"
                };
                let (verdict, frame) = self.bed.try_run_on(name, frame, ifindex)?;
                Ok(Outcome {
                    verdict,
                    frame,
                    meta: None,
                })
            }
            Hook::L3In | Hook::L3Out => {
                let name = if step.hook == Hook::L3In {
                    "lb_tc_l3_in"
                } else {
                    "lb_tc_l3_out"
                };
                // The kernel wants at least an Ethernet header's bytes.
                let (verdict, mut out) = self.bed.try_run_on(name, &frame[14..], ifindex)?;
                out.splice(0..0, frame[..14].iter().copied());
                Ok(Outcome {
                    verdict,
                    frame: out,
                    meta: None,
                })
            }
            Hook::Xdp => {
                let (verdict, out) = self.bed.try_xdp(frame, ifindex)?;
                // The run hands the frame back from its metadata on.
                let meta_len = out.len().saturating_sub(frame.len());
                let (meta, frame) = if meta_len == 4 && verdict == XDP_PASS {
                    let word = u32::from_ne_bytes(out[..4].try_into().unwrap_or_default());
                    (Some(word), out[4..].to_vec())
                } else {
                    (None, out)
                };
                Ok(Outcome {
                    verdict: verdict as i32,
                    frame,
                    meta,
                })
            }
        }
    }

    /// Whether `step` can run: `BPF_PROG_TEST_RUN` takes frames of an
    /// Ethernet header's length (for the L3 hooks, beyond it) up to a
    /// page less its head and tail room.
    pub fn runnable(step: &Step) -> bool {
        let min = match step.hook {
            Hook::L3In | Hook::L3Out => 28,
            _ => 14,
        };
        (min..=MAX_FRAME).contains(&step.frame.len())
    }

    /// The flow maps' entries now.
    pub fn state(&self) -> State {
        State {
            ct4: all(&self.readers.ct4),
            nat4: all(&self.readers.nat4),
            ct6: all(&self.readers.ct6),
            nat6: all(&self.readers.nat6),
        }
    }

    /// Makes the flows again (those made at the start expire: a SYN's
    /// after 60 s), as the state every input starts from.
    pub fn remake(&mut self) {
        let now = self.state();
        self.start = State::default();
        self.reset(&now);
        self.make_flows();
        self.start = self.state();
    }

    /// Puts the flow maps back as `self.start` holds them, given what they
    /// hold now.
    pub fn reset(&mut self, now: &State) {
        fn put<K: aya::Pod + Ord, V: aya::Pod + PartialEq>(
            map: &mut HashMap<MapData, K, V>,
            now: &BTreeMap<K, V>,
            want: &BTreeMap<K, V>,
        ) {
            for k in now.keys().filter(|k| !want.contains_key(k)) {
                let _ = map.remove(k);
            }
            for (k, v) in want.iter().filter(|(k, v)| now.get(k) != Some(v)) {
                let _ = map.insert(k, v, 0);
            }
        }
        let start = &self.start;
        put(&mut self.bed.ct, &now.ct4, &start.ct4);
        put(&mut self.bed.nat, &now.nat4, &start.nat4);
        put(&mut self.bed.ct6, &now.ct6, &start.ct6);
        put(&mut self.bed.nat6, &now.nat6, &start.nat6);
        // The start makes no fragments.
        let (frag4, frag6) = (all(&self.readers.frag4), all(&self.readers.frag6));
        put(&mut self.frag4, &frag4, &BTreeMap::new());
        put(&mut self.frag6, &frag6, &BTreeMap::new());
        // Flows went: the XDP flow cache's entries are stale, as the agent
        // says when it deletes flows.
        self.bed.bump_xdp_generation();
    }
}

/// Whole-map readers (`BPF_MAP_LOOKUP_BATCH`) of the maps every step
/// snapshots: a system call per map where aya's iterator makes two per
/// entry.
struct Readers {
    ct4: Reader<Ct4Key, Ct4Value>,
    nat4: Reader<Nat4Key, Nat4Value>,
    ct6: Reader<Ct6Key, Ct6Value>,
    nat6: Reader<Nat6Key, Nat6Value>,
    frag4: Reader<Frag4Key, Frag4Value>,
    frag6: Reader<Frag6Key, Frag4Value>,
}

fn reader<K: aya::Pod, V: aya::Pod>(map: &HashMap<MapData, K, V>) -> Reader<K, V> {
    Reader::new(map.map()).expect("a map of the bed's key and value types")
}

/// Every entry `reader` reads.
fn all<K: aya::Pod + Ord, V: aya::Pod>(reader: &Reader<K, V>) -> BTreeMap<K, V> {
    reader
        .entries()
        .expect("BPF_MAP_LOOKUP_BATCH")
        .into_iter()
        .collect()
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

/// XDP's actions.
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;
