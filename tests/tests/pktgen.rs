//! The XDP packet generator and counter (`lb_tests::pktgen`): their
//! programs on crafted frames (`BPF_PROG_TEST_RUN`), and the generator
//! sending live frames over a veth to the counter. Needs root; fails loudly
//! without it. Prints the rate; asserts no speed.

use std::{
    collections::BTreeSet,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use lb_tests::{
    netns::{Namespaces, veth, within},
    pktgen::{
        BASE_PORT, Counter, Frame, Generator, Spec, XDP_DROP, XDP_PASS, XDP_TX, iface, programs,
        run_once,
    },
    require_root, unique,
};

fn spec(src: &str, dst: &str) -> Spec {
    Spec {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        len: 64,
        syn: false,
    }
}

fn families() -> [Spec; 2] {
    [
        spec("172.16.0.2", "172.16.0.1:30053"),
        spec("fd00::2", "[fd00::1]:30053"),
    ]
}

#[test]
fn the_generator_program_writes_valid_flows_over_its_ports() {
    require_root();
    use std::os::fd::AsRawFd as _;
    let syns = families().map(|s| Spec { syn: true, ..s });
    for s in families().into_iter().chain(syns) {
        let frame = Frame::new(&s).unwrap();
        let prog = programs::generator(&frame, 64).expect("the verifier takes it");
        let mut ports = BTreeSet::new();
        // A page that comes back with headers a stack rewrote (here all
        // zero) still leaves as a whole flow of the template.
        let mut scribbled = frame.bytes.clone();
        scribbled[..frame.word_at + 2].fill(0);
        for input in [&frame.bytes, &scribbled].into_iter().cycle().take(400) {
            let (ret, out) = run_once(prog.as_raw_fd(), input).unwrap();
            assert_eq!(ret as i32, XDP_TX);
            let port = u16::from_be_bytes([out[frame.sport_at], out[frame.sport_at + 1]]);
            assert!((BASE_PORT..BASE_PORT + 64).contains(&port), "port {port}");
            // Byte for byte the flow whose checksum the unit tests verify.
            assert_eq!(out, frame.flow(port - BASE_PORT), "{:?}", s.dst);
            ports.insert(port);
        }
        // 400 draws of 64 ports: missing more than half of them is as good
        // as impossible for a random source.
        assert!(ports.len() > 32, "only {} distinct ports", ports.len());
    }
}

#[test]
fn the_counter_counts_udp_and_passes_everything_else() {
    require_root();
    use std::os::fd::AsRawFd as _;
    let (prog, map) = programs::counter().expect("the verifier takes it");
    let run = |frame: &[u8]| run_once(prog.as_raw_fd(), frame).unwrap().0 as i32;
    for s in families() {
        assert_eq!(run(&Frame::new(&s).unwrap().bytes), XDP_DROP);
    }
    let udp6 = Frame::new(&families()[1]).unwrap().bytes;
    let mut icmp6 = udp6.clone();
    icmp6[14 + 6] = 58;
    let mut arp = udp6.clone();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    for other in [&icmp6[..], &arp[..], &udp6[..20]] {
        assert_eq!(run(other), XDP_PASS);
    }
    assert_eq!(programs::per_cpu(&map).unwrap().iter().sum::<u64>(), 2);
}

#[test]
fn live_frames_cross_a_veth_to_the_counter() {
    require_root();
    let mut namespaces = Namespaces::new(&unique("pkg"));
    let (a, b) = (namespaces.add("a").unwrap(), namespaces.add("b").unwrap());
    veth((&a, "eth0", None), (&b, "eth0", None)).unwrap();
    let counter = within(&b, || Ok(Counter::attach("eth0")?)).unwrap();
    let dst_mac = within(&b, || Ok(iface::mac("eth0")?)).unwrap();
    for (src, dst) in [("172.16.0.2", "172.16.0.1:53"), ("fd00::2", "[fd00::1]:53")] {
        let before: u64 = counter.per_cpu().unwrap().iter().sum();
        let (src, dst): (IpAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let sent = within(&a, || {
            let g = Generator::new("eth0", dst_mac, (src, dst), 64, 1024)?;
            Ok(g.run(10.0, Some(200_000))?)
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let got = counter.per_cpu().unwrap().iter().sum::<u64>() - before;
        eprintln!(
            "{dst}: sent {} frames in {:.3} s ({:.0}/s), counted {got}",
            sent.frames, sent.seconds, sent.rate
        );
        assert_eq!(sent.frames, 200_000);
        // The peer's ring may overflow under a burst, but most arrive and
        // nothing is counted twice.
        assert!(got <= sent.frames, "{got} counted of {} sent", sent.frames);
        assert!(
            got >= sent.frames / 2,
            "{got} counted of {} sent",
            sent.frames
        );
    }
}
