//! The per-packet cost of the tc programs, as the kernel measures it around
//! the program (`BPF_PROG_TEST_RUN`), on crafted packets. Prints
//! nanoseconds per packet; asserts nothing. Needs root.
//!
//! `cargo bench -p lb-testbed --bench tc_cost [-- RUNS]`
//!
//! With `TC_COST_JSON=PATH` set, it also writes the figures to PATH as JSON
//! (`runs`; `repeat`: `id`, `case`, `ns`, `min`, `max`; `single`: `id`,
//! `case`, `p50`, `p99`, `mean`), which `cargo xtask bench` reads.
//!
//! Two methods:
//! * **repeat**: [`BATCHES`] runs of `RUNS` repetitions each, the kernel's
//!   mean of each; the median batch, and the spread (fastest and slowest
//!   batch) against which a change is judged. Each repetition sees what
//!   the one before left, so a translated packet must
//!   translate back: two frontends whose backends are each other make the
//!   DNAT (and the reverse NAT) ping-pong between two tracked flows, every
//!   run a conntrack hit with a full rewrite.
//! * **single**: `RUNS` runs of one packet each, for the first packet of a
//!   flow (a conntrack miss), which no repetition can repeat. Each run also
//!   pays the kernel's per-run timer overhead, shown by the single-run
//!   pass-through row.
//!
//! The first row is the floor: a two-instruction program that returns at
//! once, through the same repeat loop, so that what the loop itself costs
//! on this machine is not taken for the programs' work.

use std::time::Duration;

use lb_common::{FE_F_EXTERNAL_LOCAL, PROTO_TCP};
use lb_testbed::bed::{self, Bed, CLIENT, FRONTEND, NODE, NODE_PORT, Tcp, tcp};
use lb_testbed::fib_netns::fib_netns;
use lb_testbed::packets6::{CLIENT6, FRONTEND6, NODE6, tcp6, v6};
use serde_json::{Value, json};

/// Where to write the figures as JSON, besides printing them.
const JSON_ENV: &str = "TC_COST_JSON";
/// Runs of each repeat case: their spread shows what a difference of a few
/// nanoseconds is worth on this machine.
const BATCHES: usize = 5;
/// Repetitions per `BPF_PROG_TEST_RUN` of the XDP program when it
/// forwards: each run decrements the frame's TTL (set to 255 for these
/// runs, [`max_ttl`]), which must not run out within a call. As many as
/// that allows: the first run of each call finds the caches cold after
/// the system call, which fewer runs would share out among fewer.
const XDP_REPEAT: u32 = 250;
/// `XDP_TX`: the action of a frame sent back out of its device.
const XDP_TX: u32 = 3;
/// `XDP_PASS`: the frame goes up to the stack (and tc).
const XDP_PASS: u32 = 2;
/// `BPF_PROG_TYPE_SCHED_CLS` and `BPF_PROG_TYPE_XDP`, for the floors.
const PROG_TYPE_SCHED_CLS: u32 = 3;
const PROG_TYPE_XDP: u32 = 6;

fn main() {
    let runs: u32 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    // Both families' new flows, and XDP's.
    let mut bed = Bed::with_flows(2 * runs + 64);
    let pods: Vec<_> = (1..=16).map(|i| ([10, 1, 0, i], 8080)).collect();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &pods);
    // The ping-pong pair.
    let (a, b) = ((NODE, NODE_PORT + 1), ([10, 9, 0, 1], 8080));
    bed.frontend_at(a, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[b]);
    bed.frontend_at(b, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[a]);
    bed.ingress(&tcp(CLIENT, a, Tcp::Syn));
    bed.ingress(&tcp(CLIENT, b, Tcp::Syn));
    // IPv6: the same frontends and pair.
    let pods6: Vec<_> = (1..=16)
        .map(|i| (v6([0xfd42, 1, 0, 0, 0, 0, 0, i]), 8080))
        .collect();
    bed.frontend_at(FRONTEND6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &pods6);
    let (a6, b6) = (
        (NODE6, NODE_PORT + 1),
        (v6([0xfd42, 9, 0, 0, 0, 0, 0, 1]), 8080),
    );
    bed.frontend_at(a6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[b6]);
    bed.frontend_at(b6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[a6]);
    bed.ingress(&tcp6(CLIENT6, a6, Tcp::Syn));
    bed.ingress(&tcp6(CLIENT6, b6, Tcp::Syn));

    println!("tc per-packet cost, ns (BPF_PROG_TEST_RUN, kernel-measured), {runs} runs");
    println!(
        "{:<52} {:>8} {:>8} {:>8}",
        "case (repeat: mean, median of batches)", "ns", "min", "max"
    );
    let ack = tcp(CLIENT, a, Tcp::Ack);
    let reply = tcp(b, CLIENT, Tcp::Ack);
    let other = tcp(CLIENT, (NODE, 22), Tcp::Ack);
    let (ack6, reply6) = (tcp6(CLIENT6, a6, Tcp::Ack), tcp6(b6, CLIENT6, Tcp::Ack));
    let other6 = tcp6(CLIENT6, (NODE6, 22), Tcp::Ack);
    let mut repeat = Vec::new();
    let mut row = |id: &str, case: &str, batch: &mut dyn FnMut() -> u64| {
        let mut batches: Vec<u64> = (0..BATCHES).map(|_| batch()).collect();
        batches.sort_unstable();
        let (ns, min, max) = (batches[BATCHES / 2], batches[0], batches[BATCHES - 1]);
        println!("{case:<52} {ns:>8} {min:>8} {max:>8}");
        repeat.push(json!({ "id": id, "case": case, "ns": ns, "min": min, "max": max }));
    };
    row(
        "empty",
        "empty program (the repeat loop's floor)",
        &mut || u64::from(empty_program_ns(PROG_TYPE_SCHED_CLS, &ack, runs)),
    );
    for (id, case, prog, packet) in [
        (
            "ingress_hit",
            "ingress, conntrack hit (DNAT)",
            "lb_tc_ingress",
            &ack,
        ),
        (
            "egress_reply",
            "egress, reply (reverse NAT)",
            "lb_tc_egress",
            &reply,
        ),
        (
            "ingress_not_ours",
            "ingress, not ours (2 misses, passed on)",
            "lb_tc_ingress",
            &other,
        ),
        (
            "egress_not_ours",
            "egress, not ours (2 misses, passed on)",
            "lb_tc_egress",
            &other,
        ),
        (
            "ingress_hit6",
            "IPv6 ingress, conntrack hit (DNAT)",
            "lb_tc_ingress",
            &ack6,
        ),
        (
            "egress_reply6",
            "IPv6 egress, reply (reverse NAT)",
            "lb_tc_egress",
            &reply6,
        ),
        (
            "ingress_not_ours6",
            "IPv6 ingress, not ours (2 misses, passed on)",
            "lb_tc_ingress",
            &other6,
        ),
        (
            "egress_not_ours6",
            "IPv6 egress, not ours (2 misses, passed on)",
            "lb_tc_egress",
            &other6,
        ),
    ] {
        row(id, case, &mut || {
            bed.time_repeated(prog, packet, runs).as_nanos() as u64
        });
    }

    println!(
        "{:<52} {:>8} {:>8} {:>8}",
        "case (single runs)", "p50", "p99", "mean"
    );
    // Every run a new client address and port: a new flow.
    let new = (0..runs).map(|i| {
        let client = (
            [100, 64 + (i >> 16) as u8, (i >> 8) as u8, i as u8],
            1024 + (i % 60_000) as u16,
        );
        bed.time("lb_tc_ingress", &tcp(client, FRONTEND, Tcp::Syn))
    });
    let mut single = vec![report(
        "ingress_miss",
        "ingress, conntrack miss (new flow, 16 backends)",
        new,
    )];
    let new6 = (0..runs).map(|i| {
        let [hi, lo] = [(i >> 16) as u16, i as u16];
        let client = (
            v6([0x2001, 0xdb8, 0xc, 0, 0, 0, hi, lo]),
            1024 + (i % 60_000) as u16,
        );
        bed.time("lb_tc_ingress", &tcp6(client, FRONTEND6, Tcp::Syn))
    });
    single.push(report(
        "ingress_miss6",
        "IPv6 ingress, conntrack miss (new flow, 16 backends)",
        new6,
    ));
    let hit = (0..runs).map(|_| bed.time("lb_tc_ingress", &ack));
    single.push(report("ingress_hit", "ingress, conntrack hit (DNAT)", hit));
    let pass = (0..runs).map(|_| bed.time("lb_tc_ingress", &other));
    single.push(report(
        "ingress_not_ours",
        "ingress, not ours (per-run overhead reference)",
        pass,
    ));

    // The XDP fast path, in a namespace whose FIB sends 10.2.0.0/24,
    // 198.51.100.0/24 and fd42:2::/64 back out of `x0`, the device the
    // frames arrive on: each run a conntrack hit forwarded with XDP_TX.
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    bed.load_xdp();
    let (c, d) = (([198, 51, 100, 20], 80), ([10, 2, 0, 1], 8080));
    bed.frontend_at(c, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[d]);
    bed.frontend_at(d, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[c]);
    let (c6, d6) = (
        (v6([0xfd42, 2, 0, 0, 0, 0, 0, 0x20]), 80),
        (v6([0xfd42, 2, 0, 0, 0, 0, 0, 1]), 8080),
    );
    bed.frontend_at(c6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[d6]);
    bed.frontend_at(d6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[c6]);
    let far: Vec<_> = (1..=16).map(|i| ([10, 2, 0, i], 8080)).collect();
    let far_frontend = (NODE, NODE_PORT + 2);
    bed.frontend_at(far_frontend, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &far);
    // An `externalTrafficPolicy: Cluster` frontend: SNATed, its replies
    // translated back.
    bed.snat(NODE, 61_000, 61_010);
    let snat_frontend = (NODE, NODE_PORT + 3);
    let snat_backend = ([10, 2, 0, 9], 8080);
    bed.frontend_at(snat_frontend, PROTO_TCP, 0, &[snat_backend]);
    // A pod on this node (behind `x1`): XDP advances its flows and hands
    // them to tc.
    let local_frontend = (NODE, NODE_PORT + 4);
    bed.frontend_at(local_frontend, PROTO_TCP, 0, &[bed::LOCAL_POD]);
    let (xdp_rows, xdp_miss, xdp_singles) = ns.run(|| {
        for syn in [
            tcp(CLIENT, c, Tcp::Syn),
            tcp(CLIENT, d, Tcp::Syn),
            tcp6(CLIENT6, c6, Tcp::Syn),
            tcp6(CLIENT6, d6, Tcp::Syn),
        ] {
            assert_eq!(bed.xdp(&syn, x0).0, XDP_TX, "the pair is forwarded");
        }
        let forwarded = |packet: &[u8]| -> u64 {
            let calls = (runs / XDP_REPEAT).max(1);
            let total: u128 = (0..calls)
                .map(|_| bed.time_xdp(packet, x0, XDP_REPEAT).as_nanos())
                .sum();
            (total / u128::from(calls)) as u64
        };
        let cases: [(&str, &str, Vec<u8>, bool); 3] = [
            (
                "xdp_hit",
                "XDP, conntrack hit (DNAT, XDP_TX)",
                max_ttl(tcp(CLIENT, c, Tcp::Ack)),
                true,
            ),
            (
                "xdp_hit6",
                "IPv6 XDP, conntrack hit (DNAT, XDP_TX)",
                max_ttl(tcp6(CLIENT6, c6, Tcp::Ack)),
                true,
            ),
            (
                "xdp_not_ours",
                "XDP, not ours (XDP_PASS)",
                tcp(CLIENT, (NODE, 22), Tcp::Ack),
                false,
            ),
        ];
        let rows: Vec<(&str, &str, Vec<u64>)> = cases
            .iter()
            .map(|(id, case, packet, fwd)| {
                let batches = (0..BATCHES)
                    .map(|_| {
                        if *fwd {
                            forwarded(packet)
                        } else {
                            bed.time_xdp(packet, x0, runs).as_nanos() as u64
                        }
                    })
                    .collect();
                (*id, *case, batches)
            })
            .collect();
        // A SNATed flow and its replies, each packet a run of its own
        // (no repetition can translate them back): the flow made, its
        // halves sent once by the full path, then the cache's.
        let (_, out) = bed.xdp(&tcp(CLIENT, snat_frontend, Tcp::Syn), x0);
        let nat_port = bed::seen(&out).src.1;
        let ack = tcp(CLIENT, snat_frontend, Tcp::Ack);
        let reply = tcp(snat_backend, (NODE, nat_port), Tcp::Ack);
        for packet in [&ack, &reply] {
            assert_eq!(
                bed.xdp(packet, x0).0,
                XDP_TX,
                "the SNATed flow is forwarded"
            );
        }
        // Each run a packet of its own: a repeated run keeps the metadata
        // of the one before.
        assert_eq!(
            bed.xdp(&tcp(CLIENT, local_frontend, Tcp::Syn), x0).0,
            XDP_PASS
        );
        let local_ack = tcp(CLIENT, local_frontend, Tcp::Ack);
        let singles: Vec<(&str, &str, Vec<Duration>)> = [
            (
                "xdp_snat_hit",
                "XDP, SNATed flow hit (DNAT and SNAT, XDP_TX)",
                &ack,
            ),
            (
                "xdp_reply",
                "XDP, reply of a SNATed flow (both undone, XDP_TX)",
                &reply,
            ),
            (
                "xdp_handed",
                "XDP, conntrack hit handed to tc (local pod, XDP_PASS)",
                &local_ack,
            ),
            (
                "xdp_not_ours_single",
                "XDP, not ours (per-run overhead reference)",
                &tcp(CLIENT, (NODE, 22), Tcp::Ack),
            ),
        ]
        .into_iter()
        .map(|(id, case, packet)| {
            let times = (0..runs).map(|_| bed.time_xdp(packet, x0, 1)).collect();
            (id, case, times)
        })
        .collect();
        let miss: Vec<Duration> = (0..runs)
            .map(|i| {
                let client = (
                    [100, 64 + (i >> 16) as u8, (i >> 8) as u8, i as u8],
                    1024 + (i % 60_000) as u16,
                );
                bed.time_xdp(&tcp(client, far_frontend, Tcp::Syn), x0, 1)
            })
            .collect();
        (rows, miss, singles)
    });
    println!(
        "{:<52} {:>8} {:>8} {:>8}",
        "XDP (repeat: mean, median of batches)", "ns", "min", "max"
    );
    let floor = tcp(CLIENT, (NODE, 22), Tcp::Ack);
    let mut batches: Vec<u64> = (0..BATCHES)
        .map(|_| u64::from(empty_program_ns(PROG_TYPE_XDP, &floor, runs)))
        .collect();
    batches.sort_unstable();
    let case = "empty XDP program (the repeat loop's floor)";
    let (ns, min, max) = (batches[BATCHES / 2], batches[0], batches[BATCHES - 1]);
    println!("{case:<52} {ns:>8} {min:>8} {max:>8}");
    repeat.push(json!({ "id": "xdp_empty", "case": case, "ns": ns, "min": min, "max": max }));
    for (id, case, mut batches) in xdp_rows {
        batches.sort_unstable();
        let (ns, min, max) = (batches[BATCHES / 2], batches[0], batches[BATCHES - 1]);
        println!("{case:<52} {ns:>8} {min:>8} {max:>8}");
        repeat.push(json!({ "id": id, "case": case, "ns": ns, "min": min, "max": max }));
    }
    println!(
        "{:<52} {:>8} {:>8} {:>8}",
        "XDP (single runs)", "p50", "p99", "mean"
    );
    single.push(report(
        "xdp_miss",
        "XDP, conntrack miss (new flow, 16 remote backends)",
        xdp_miss.into_iter(),
    ));
    for (id, case, times) in xdp_singles {
        single.push(report(id, case, times.into_iter()));
    }

    if let Some(path) = std::env::var_os(JSON_ENV) {
        let all = json!({ "runs": runs, "repeat": repeat, "single": single });
        std::fs::write(&path, all.to_string())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

/// `frame` (Ethernet, IPv4 or IPv6) with a TTL (hop limit) of 255, the
/// IPv4 header checksum made again.
fn max_ttl(mut frame: Vec<u8>) -> Vec<u8> {
    const IP: usize = 14;
    if frame[IP] >> 4 == 6 {
        frame[IP + 7] = 255;
        return frame;
    }
    frame[IP + 8] = 255;
    frame[IP + 10..IP + 12].fill(0);
    let sum: u32 = frame[IP..IP + 20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    frame[IP + 10..IP + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    frame
}

/// Prints one single-runs row; returns it as JSON.
fn report(id: &str, case: &str, samples: impl Iterator<Item = Duration>) -> Value {
    let mut ns: Vec<u64> = samples.map(|d| d.as_nanos() as u64).collect();
    ns.sort_unstable();
    let pick = |p: f64| ns[((ns.len() - 1) as f64 * p) as usize];
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    println!(
        "{case:<52} {:>8} {:>8} {:>8.0}",
        pick(0.5),
        pick(0.99),
        mean
    );
    json!({ "id": id, "case": case, "p50": pick(0.5), "p99": pick(0.99), "mean": mean })
}

/// The kernel's mean time per run of a `return TC_ACT_UNSPEC` classifier on
/// `packet`, `repeat` times: loaded with raw bpf(2) calls, as aya loads only
/// ELF objects.
fn empty_program_ns(prog_type: u32, packet: &[u8], repeat: u32) -> u32 {
    // mov64 r0, 2 (XDP_PASS; for tc, a verdict the run only reports); exit
    let insns: [u64; 2] = [0x0000_0002_0000_00b7, 0x0000_0000_0000_0095];
    let license = c"GPL";
    // union bpf_attr for BPF_PROG_LOAD: prog_type, insn_cnt, insns, license.
    let mut load = [0u8; 128];
    load[0..4].copy_from_slice(&prog_type.to_ne_bytes());
    load[4..8].copy_from_slice(&2u32.to_ne_bytes());
    load[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    load[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    // SAFETY: bpf(2) reads `load` (128 bytes, zero past the fields set),
    // whose pointers name `insns` and `license`, alive across the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 5, load.as_ptr(), load.len()) };
    assert!(
        fd >= 0,
        "BPF_PROG_LOAD: {}",
        std::io::Error::last_os_error()
    );
    // BPF_PROG_TEST_RUN: prog_fd, retval, data_size_in, data_size_out,
    // data_in, data_out, repeat, duration (out).
    let mut run = [0u8; 128];
    run[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
    run[8..12].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
    run[16..24].copy_from_slice(&(packet.as_ptr() as u64).to_ne_bytes());
    run[32..36].copy_from_slice(&repeat.to_ne_bytes());
    // SAFETY: bpf(2) reads `run` and `packet`, alive across the call, and
    // writes its outputs into `run`; no data_out is asked for.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, 10, run.as_mut_ptr(), run.len()) };
    assert_eq!(
        rc,
        0,
        "BPF_PROG_TEST_RUN: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fd` is the program just loaded, closed once.
    unsafe { libc::close(fd as i32) };
    u32::from_ne_bytes(run[36..40].try_into().expect("4 bytes"))
}
