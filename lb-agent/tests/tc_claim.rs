//! Two CPUs claiming one dead SNAT port at once, through the tc egress
//! program (`BPF_PROG_TEST_RUN` runs it on the calling CPU): exactly one
//! may win it, in either family. A mapping's claim word does not hold all
//! of it (an IPv4 mapping's expiry, an IPv6 one's client address lie
//! outside), so a CPU reading the mapping between another's swap and its
//! last store could see the new owner with the old, dead time and claim
//! the port as well: `lb_common::NAT_F_CLAIMING` marks the claim until it
//! is whole, and the claim word is read before the rest. Needs root and
//! two CPUs; fails loudly without them.

use std::sync::{Barrier, Mutex};

use aya::{
    Pod,
    maps::{HashMap, IterableMap as _, Map, MapData},
};
use lb_agent::datapath::conntrack;
use lb_common::{
    CT_DIR_OUT, CtKey, CtValue, Nat4Key, Nat4Value, Nat6Key, Nat6Value, NatKey, NatValue, PROTO_TCP,
};
use lb_testbed::bed::*;
use lb_testbed::packets6::*;

/// Rounds of the race: each starts both CPUs on one dead port.
const ROUNDS: usize = 20_000;
/// The one SNAT port.
const PORT: u16 = 2000;

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside
    // it; sched_setaffinity(0) changes only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0,
            "pinning to CPU {cpu}"
        );
    }
}

/// Another handle on the hash map `map` (the bed's own is borrowed by the
/// CPUs racing through the programs).
fn handle<K: Pod, V: Pod>(map: &HashMap<MapData, K, V>) -> HashMap<MapData, K, V> {
    use std::os::fd::AsFd as _;
    let fd = map.map().fd().as_fd().try_clone_to_owned().unwrap();
    HashMap::try_from(Map::HashMap(MapData::from_fd(fd).unwrap())).unwrap()
}

/// The reply-side conntrack key of a flow from `client` to `backend`.
fn reply_key<A: Copy>(backend: (A, u16), client: (A, u16)) -> CtKey<A> {
    CtKey {
        saddr_be: backend.0,
        daddr_be: client.0,
        sport_be: backend.1.to_be(),
        dport_be: client.1.to_be(),
        proto: PROTO_TCP,
        dir: CT_DIR_OUT,
        _pad0: [0; 2],
    }
}

/// The SNAT mapping key of `node`'s port [`PORT`] towards `backend`.
fn nat_key<A: Copy>(backend: (A, u16), node: A) -> NatKey<A> {
    NatKey {
        saddr_be: backend.0,
        daddr_be: node,
        sport_be: backend.1.to_be(),
        dport_be: PORT.to_be(),
        proto: PROTO_TCP,
        _pad0: [0; 3],
    }
}

/// One family's maps and packets for the race.
struct Race<A: Pod> {
    ct: HashMap<MapData, CtKey<A>, CtValue<A>>,
    nat: HashMap<MapData, NatKey<A>, NatValue<A>>,
    nat_key: NatKey<A>,
    /// Another client's mapping of the port, dead a while.
    dead: NatValue<A>,
    /// Each flow's reply entry as its first packet left it: no port yet.
    fresh: [(CtKey<A>, CtValue<A>); 2],
    /// Each flow's DNATed first packet, waiting to leave.
    dnated: [Vec<u8>; 2],
    /// The source port of a packet that left.
    port: fn(&[u8]) -> u16,
}

/// Races both CPUs through `bed`'s egress program for [`ROUNDS`] rounds,
/// each on a fresh dead port; the rounds each CPU won alone, and the
/// rounds both did.
fn race<A: Pod>(bed: &Bed, mut r: Race<A>) -> ([usize; 2], usize)
where
    CtKey<A>: Pod,
    CtValue<A>: Pod,
    NatKey<A>: Pod,
    NatValue<A>: Pod,
{
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(
        cpus >= 2,
        "the race needs two CPUs, this machine has {cpus}"
    );
    let start = Barrier::new(3);
    let done = Barrier::new(3);
    let results = Mutex::new([(0, 0u16); 2]);
    let (mut winners, mut both) = ([0usize; 2], 0usize);
    let port = r.port;
    std::thread::scope(|s| {
        for cpu in 0..2 {
            let (start, done, results, dnated) = (&start, &done, &results, &r.dnated[cpu]);
            s.spawn(move || {
                pin(cpu);
                for _ in 0..ROUNDS {
                    start.wait();
                    let (verdict, out) = bed.egress(dnated);
                    let port = if verdict == PASS { port(&out) } else { 0 };
                    results.lock().unwrap()[cpu] = (verdict, port);
                    done.wait();
                }
            });
        }
        for _ in 0..ROUNDS {
            // Both flows without a port, the port dead: a claim each.
            r.nat.insert(r.nat_key, r.dead, 0).unwrap();
            for (key, value) in &r.fresh {
                r.ct.insert(key, value, 0).unwrap();
            }
            start.wait();
            done.wait();
            let r = *results.lock().unwrap();
            let won: Vec<bool> = r
                .iter()
                .map(|&(v, port)| v == PASS && port == PORT)
                .collect();
            match (won[0], won[1]) {
                (true, true) => both += 1,
                (true, false) => winners[0] += 1,
                (false, true) => winners[1] += 1,
                (false, false) => panic!("nobody won the dead port: {r:?}"),
            }
        }
    });
    println!(
        "{ROUNDS} rounds: CPU 0 won {}, CPU 1 won {}, both {both}",
        winners[0], winners[1]
    );
    (winners, both)
}

/// Asserts the race's outcome: never both, and each CPU won some rounds.
fn assert_one_winner((winners, both): ([usize; 2], usize)) {
    assert_eq!(both, 0, "rounds in which both CPUs took the port");
    assert!(
        winners.iter().all(|&w| w > 0),
        "the CPUs raced: {winners:?}"
    );
}

#[test]
fn two_cpus_claiming_one_dead_snat_port_at_once_never_both_win_it() {
    let mut bed = Bed::new();
    bed.snat(NODE, PORT, PORT);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let clients: [Addr; 2] = [(CLIENT.0, 41_000), (CLIENT.0, 41_001)];
    let dnated = clients.map(|c| {
        let (verdict, out) = bed.ingress(&tcp(c, FRONTEND, Tcp::Syn));
        assert_eq!(verdict, PASS);
        out
    });
    let fresh = clients.map(|c| {
        let key = reply_key(REMOTE_POD, c);
        (key, bed.ct.get(&key, 0).expect("the flow's reply entry"))
    });
    let r = Race {
        ct: handle(&bed.ct),
        nat: handle(&bed.nat),
        nat_key: nat_key(REMOTE_POD, NODE),
        dead: Nat4Value {
            addr_be: [203, 0, 113, 99],
            port_be: 1234u16.to_be(),
            flags: 0,
            expires: conntrack::now().wrapping_sub(5),
        },
        fresh,
        dnated,
        port: |p| seen(p).src.1,
    };
    assert_one_winner(race(&bed, r));
}

#[test]
fn two_cpus_claiming_one_dead_ipv6_snat_port_at_once_never_both_win_it() {
    let mut bed = Bed::new();
    bed.snat(NODE6, PORT, PORT);
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[REMOTE_POD6]);
    let clients: [Addr6; 2] = [(CLIENT6.0, 41_000), (CLIENT6.0, 41_001)];
    let dnated = clients.map(|c| {
        let (verdict, out) = bed.ingress(&tcp6(c, FRONTEND6, Tcp::Syn));
        assert_eq!(verdict, PASS);
        out
    });
    let fresh = clients.map(|c| {
        let key = reply_key(REMOTE_POD6, c);
        (key, bed.ct6.get(&key, 0).expect("the flow's reply entry"))
    });
    let r = Race {
        ct: handle(&bed.ct6),
        nat: handle(&bed.nat6),
        nat_key: nat_key(REMOTE_POD6, NODE6),
        dead: Nat6Value {
            addr_be: v6([0x2001, 0xdb8, 0xd, 0, 0, 0, 0, 99]),
            port_be: 1234u16.to_be(),
            flags: 0,
            expires: conntrack::now().wrapping_sub(5),
        },
        fresh,
        dnated,
        port: |p| seen6(p).src.1,
    };
    assert_one_winner(race(&bed, r));
}

#[test]
fn a_port_caught_between_its_claims_swap_and_its_expiry_is_taken_for_other_clients() {
    let mut bed = Bed::new();
    bed.snat(NODE, PORT, PORT);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let (a, b): (Addr, Addr) = ((CLIENT.0, 41_000), (CLIENT.0, 41_001));
    let nat_key: Nat4Key = nat_key(REMOTE_POD, NODE);
    // What another CPU's claim for `a` has written so far: its owner word,
    // swapped in with the claim flag, the old owner's expiry still dead.
    let caught = Nat4Value {
        addr_be: a.0,
        port_be: a.1.to_be(),
        flags: lb_common::NAT_F_CLAIMING,
        expires: conntrack::now().wrapping_sub(5),
    };
    bed.nat.insert(nat_key, caught, 0).unwrap();
    // `b` finds the port taken: its one port being `a`'s, it has none.
    let (verdict, dnated) = bed.ingress(&tcp(b, FRONTEND, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(
        bed.egress(&dnated).0,
        DROP,
        "another client took a claimed port"
    );
    assert_eq!(bed.nat.get(&nat_key, 0).unwrap(), caught, "untouched");
    // `a`'s own first packets on another CPU take the mapping as theirs.
    let (_, dnated) = bed.ingress(&tcp(a, FRONTEND, Tcp::Syn));
    let (verdict, out) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out).src, (NODE, PORT));
}

#[test]
fn an_ipv6_port_caught_between_its_claims_swap_and_its_address_is_nobody_elses() {
    let mut bed = Bed::new();
    bed.snat(NODE6, PORT, PORT);
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[REMOTE_POD6]);
    // The client `b`, whose address the port's old owner had, on the port
    // another CPU's claim for `a` has just swapped in: `a`'s port and
    // expiry with the claim flag, the old owner's address still in place.
    let b: Addr6 = (CLIENT6.0, 41_001);
    let a: Addr6 = (v6([0x2001, 0xdb8, 0xd, 0, 0, 0, 0, 7]), b.1);
    let nat_key: Nat6Key = nat_key(REMOTE_POD6, NODE6);
    let caught = Nat6Value {
        addr_be: b.0,
        port_be: a.1.to_be(),
        flags: lb_common::NAT_F_CLAIMING,
        expires: conntrack::now() + 60,
    };
    bed.nat6.insert(nat_key, caught, 0).unwrap();
    // `b` must not take the mapping for its own: its one port is `a`'s.
    let (verdict, dnated) = bed.ingress(&tcp6(b, FRONTEND6, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(
        bed.egress(&dnated).0,
        DROP,
        "another client took a claimed port"
    );
    assert_eq!(bed.nat6.get(&nat_key, 0).unwrap(), caught, "untouched");
}
