//! Socket load balancing off for one pod: pod `p3` on node-2 is labelled
//! `lb-agent.io/socket-lb: disabled`, so node-2's agent leaves its sockets
//! alone and translates its packets at its interface (`lb_tc_pod_in`,
//! `lb_tc_pod_out`), while pod `p2`, on the same node and in the same
//! cgroup, keeps socket load balancing. Real sockets in network
//! namespaces (`lb_tests::two_nodes`: p3's veth as a CNI would make it)
//! and the real agent. Needs root; fails loudly without it.

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, SocketAddrV4, TcpListener},
    os::fd::AsRawFd as _,
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use lb_fixtures::{Object, Svc, SvcPort, yaml};
use lb_tests::{
    agent::Agent,
    netns::{exec, ip},
    probe::{self, Held, Report},
    two_nodes::{
        Bed, P3, P3_6, dual_stack, node_objects, node_port_svc, p1, p1_6, p2, p2_6, slice, slice6,
    },
};

/// The Service both pods reach: `web`, dual-stack, its endpoints p1 (on
/// node-1) and p2 (on node-2).
const VIP: &str = "10.96.58.1";
const VIP6: &str = "fd00:96::58:1";
/// `guarded`'s cluster IP.
const GUARDED: &str = "10.96.58.2";

/// Pod `name` on node-2 at `ips`, with `label` as its
/// `lb-agent.io/socket-lb` (none if empty).
fn pod(name: &str, ips: &[&str], label: &str) -> String {
    let labels = if label.is_empty() {
        String::new()
    } else {
        format!(", labels: {{lb-agent.io/socket-lb: {label}}}")
    };
    let listed: Vec<String> = ips.iter().map(|ip| format!("{{ip: \"{ip}\"}}")).collect();
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default{labels}}}\n\
         spec: {{nodeName: node-2, containers: [{{name: c, image: x}}]}}\n\
         status: {{podIP: \"{}\", podIPs: [{}]}}\n",
        ips[0],
        listed.join(", ")
    )
}

/// The Nodes, `web` and its slices, p2 (not opted out) and p3 with
/// `p3_label`.
fn manifest(p3_label: &str) -> String {
    let [node1, node2] = node_objects();
    let objects: Vec<Object> = vec![
        node1,
        node2,
        dual_stack(node_port_svc("web", VIP, 30090), VIP6).into(),
        slice("web", vec![p1(), p2()]).into(),
        slice6("web", vec![p1_6(), p2_6()]).into(),
        // `guarded`: a LoadBalancer whose ranges hold p2 (10.42.2.0/25)
        // but neither p3 (10.42.2.130) nor the nodes.
        Svc::new("default", "guarded")
            .type_("LoadBalancer")
            .cluster_ip(GUARDED)
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30091))
            .lb_ingress("198.51.100.50", Some("VIP"))
            .source_ranges(&["10.42.2.0/25"])
            .into(),
        slice("guarded", vec![p1(), p2()]).into(),
    ];
    format!(
        "{}{}{}",
        yaml(objects),
        pod("p2", &["10.42.2.2", "fd42:2::2"], ""),
        pod("p3", &[P3, P3_6], p3_label)
    )
}

/// The bed with p3 labelled `p3_label`. p2 reaches p3 through node-2, as
/// pods of one node do with any CNI: in the bed, p3's subnet lies within
/// p2's, which p2 would take for its own link.
fn bed(p3_label: &str) -> anyhow::Result<Bed> {
    let bed = Bed::new(&manifest(p3_label))?;
    let p2 = bed.nodes.ns("p2");
    ip(&[
        "-n",
        &p2,
        "route",
        "add",
        "10.42.2.128/25",
        "via",
        "10.42.2.1",
    ])?;
    ip(&[
        "-n",
        &p2,
        "-6",
        "route",
        "add",
        "fd42:2::1:0/112",
        "via",
        "fd42:2::1",
    ])?;
    Ok(bed)
}

/// Waits until `agent` serves `n` pods per packet.
fn wait_opted_out(agent: &mut Agent, n: f64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = agent.metric("lbagent_sock_lb_opted_out_pods")?;
        if now == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "lbagent_sock_lb_opted_out_pods is {now}, not {n}\n{}",
                agent.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The IPv4 connects node-2's socket programs translated so far.
fn connects_translated(bed: &Bed) -> anyhow::Result<u64> {
    Ok(bed
        .node2
        .pins
        .stats()?
        .of("sock egress ipv4 connect_translated"))
}

/// The backends `r` reached, after checking that all `n` requests were
/// answered and the client's socket showed `to` as its peer (where it
/// received from, and `getpeername` on a connected UDP socket).
fn reached<'a>(r: &'a Report, n: u32, to: &str) -> BTreeSet<&'a str> {
    assert_eq!((r.ok(), r.failed()), (n, 0), "{to}: {r:?}");
    let peers: BTreeSet<&str> = r
        .peers
        .keys()
        .map(|p| p.strip_prefix("getpeername ").unwrap_or(p))
        .collect();
    assert_eq!(peers, BTreeSet::from([to]), "getpeername shows {to}: {r:?}");
    r.replies.keys().map(String::as_str).collect()
}

#[test]
fn an_opted_out_pod_reaches_services_per_packet_and_sees_their_address() -> anyhow::Result<()> {
    let bed = bed("disabled")?;
    let _agent1 = bed.agent(&bed.node1)?;
    let mut agent = bed.agent(&bed.node2)?;
    wait_opted_out(&mut agent, 1.0)?;
    let (p3, p2ns) = (bed.nodes.ns("p3"), bed.nodes.ns("p2"));
    let cgroup = bed.node2.cgroup.path();
    let stats = || bed.node2.pins.stats();
    let before = stats()?;

    // TCP and UDP from p3: the cluster IP in getpeername and recvfrom, the
    // connects untouched at the socket, the packets translated at p3's
    // interface, to both endpoints.
    let web = format!("{VIP}:80");
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &web, "-n", "40"])?;
    assert_eq!(reached(&r, 40, &web), BTreeSet::from(["p1", "p2"]));
    // A UDP socket is one flow per packet, pinned to one backend: 16
    // sockets, unconnected and connected.
    let dns = format!("{VIP}:53");
    for connected in [false, true] {
        let mut seen = BTreeSet::new();
        for _ in 0..16 {
            let mut args = vec!["udp", "--to", &dns, "-n", "3"];
            if connected {
                args.push("--connected");
            }
            let r = probe::client(&p3, cgroup, &args)?;
            let got = reached(&r, 3, &dns);
            assert_eq!(got.len(), 1, "one backend per flow: {r:?}");
            seen.extend(got.into_iter().map(str::to_owned));
        }
        assert_eq!(seen, BTreeSet::from(["p1".to_owned(), "p2".to_owned()]));
    }
    // IPv6 alike.
    let web6 = format!("[{VIP6}]:80");
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &web6, "-n", "20"])?;
    assert_eq!(reached(&r, 20, &web6).len(), 2, "{r:?}");
    let after = stats()?;
    let delta = |labels: &str| after.of(labels) - before.of(labels);
    assert_eq!(delta("sock egress connect_translated"), 0, "p3's connects");
    assert_eq!(delta("sock egress sendmsg_translated"), 0, "p3's sends");
    assert!(delta("sock egress ipv4 passed_sock_opt_out") >= 40 + 2 * 16);
    assert!(delta("sock egress ipv6 passed_sock_opt_out") >= 20);
    assert!(delta("tc_pod ingress ipv4 new_flow") >= 40 + 2);
    assert!(delta("tc_pod ingress ipv6 new_flow") >= 20);
    assert_eq!(delta("refused_inconsistent"), 0);

    // p2, on the same node and in the same cgroup, keeps socket load
    // balancing: its connects are rewritten.
    let before = stats()?;
    let r = probe::client(&p2ns, cgroup, &["tcp", "--to", &web, "-n", "20"])?;
    assert_eq!(reached(&r, 20, &web), BTreeSet::from(["p1", "p2"]));
    let after = stats()?;
    assert_eq!(
        after.of("sock egress ipv4 connect_translated")
            - before.of("sock egress ipv4 connect_translated"),
        20
    );
    assert_eq!(
        after.of("tc_pod ingress new_flow"),
        before.of("tc_pod ingress new_flow")
    );

    // An undefined port of the cluster IP is refused at once, as at the
    // socket.
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &format!("{VIP}:81")])?;
    assert_eq!(r.ok(), 0, "{r:?}");
    assert!(r.errors.contains_key("ConnectionRefused"), "{r:?}");

    // The pods' programs are on p3's interface, and the listing names p3.
    let links = std::fs::read_dir(bed.node2.pins.path().join("links"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<anyhow::Result<BTreeSet<String>>>()?;
    assert!(
        links.contains("tc-pod-in-p3") && links.contains("tc-pod-out-p3"),
        "{links:?}"
    );
    let dump = bed.node2.pins.dump()?;
    assert!(
        dump.contains("pods' tc programs (per-packet Service translation) on: p3"),
        "{dump}"
    );
    assert!(
        dump.contains("socket load balancing off in 1 network namespaces"),
        "{dump}"
    );
    Ok(())
}

/// A proxy in namespace `ns` on `port`, as a sidecar's: each connection
/// redirected to it is answered with the original destination the
/// kernel's NAT kept (`SO_ORIGINAL_DST`), `orig <addr>`.
fn original_dst_proxy(ns: &str, port: u16) -> anyhow::Result<()> {
    let (ready, started) = mpsc::channel();
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        let listener = lb_test_netns::enter(&ns)
            .and_then(|()| TcpListener::bind(("0.0.0.0", port)).context("proxy bind"));
        let listener = match listener {
            Ok(l) => {
                let _ = ready.send(Ok(()));
                l
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let orig = original_dst(&conn).map_or_else(|e| format!("error {e}"), |a| a.to_string());
            let mut line = String::new();
            let _ = BufReader::new(&conn).read_line(&mut line);
            let _ = writeln!(conn, "orig {orig}");
        }
    });
    started.recv()?
}

/// `getsockopt(SOL_IP, SO_ORIGINAL_DST)` of an accepted connection.
fn original_dst(conn: &std::net::TcpStream) -> std::io::Result<SocketAddr> {
    const SO_ORIGINAL_DST: libc::c_int = 80;
    // SAFETY: an all-zero sockaddr_in is valid.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: the socket is open; the kernel writes at most `len` bytes
    // into `addr`, which outlives the call.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            std::ptr::from_mut(&mut addr).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(SocketAddr::V4(SocketAddrV4::new(
        u32::from_be(addr.sin_addr.s_addr).into(),
        u16::from_be(addr.sin_port),
    )))
}

#[test]
fn a_sidecar_in_an_opted_out_pod_reads_the_service_address_as_original_destination()
-> anyhow::Result<()> {
    let bed = bed("disabled")?;
    let mut agent = bed.agent(&bed.node2)?;
    wait_opted_out(&mut agent, 1.0)?;
    let cgroup = bed.node2.cgroup.path();
    let web = format!("{VIP}:80");
    // Istio's iptables mode: outbound TCP is redirected to the sidecar in
    // the pod, which reads where it was going.
    for pod in ["p3", "p2"] {
        let ns = bed.nodes.ns(pod);
        original_dst_proxy(&ns, 15001)?;
        exec(
            &ns,
            &[
                "iptables",
                "-t",
                "nat",
                "-A",
                "OUTPUT",
                "-p",
                "tcp",
                "-d",
                VIP,
                "--dport",
                "80",
                "-j",
                "REDIRECT",
                "--to-ports",
                "15001",
            ],
        )?;
    }
    let r = probe::client(
        &bed.nodes.ns("p3"),
        cgroup,
        &["tcp", "--to", &web, "-n", "5"],
    )?;
    assert_eq!(
        reached(&r, 5, &web),
        BTreeSet::from([format!("orig {web}").as_str()]),
        "the sidecar sees the cluster IP"
    );
    // Not opted out, p2's connect is rewritten before the redirect could
    // see it: the sidecar never learns the Service.
    let r = probe::client(
        &bed.nodes.ns("p2"),
        cgroup,
        &["tcp", "--to", &web, "-n", "5"],
    )?;
    let got = reached(&r, 5, &web);
    assert!(got.iter().all(|g| !g.starts_with("orig")), "{got:?}");
    Ok(())
}

#[test]
fn toggling_the_label_on_a_running_pod_moves_new_connections_and_keeps_held_ones()
-> anyhow::Result<()> {
    let bed = bed("disabled")?;
    let _agent1 = bed.agent(&bed.node1)?;
    let mut agent = bed.agent(&bed.node2)?;
    wait_opted_out(&mut agent, 1.0)?;
    let p3 = bed.nodes.ns("p3");
    let cgroup = bed.node2.cgroup.path();
    let web = format!("{VIP}:80");
    let translated = || connects_translated(&bed);

    // Held per packet, then p3 opts in again.
    let mut per_packet = Held::open(&p3, cgroup, &web)?;
    assert_eq!(per_packet.peer, web);
    let first = per_packet.request()?;
    bed.write_manifest(&manifest("enabled"))?;
    wait_opted_out(&mut agent, 0.0)?;
    let before = translated()?;
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &web, "-n", "10"])?;
    assert_eq!(reached(&r, 10, &web).len(), 2, "{r:?}");
    assert_eq!(
        translated()? - before,
        10,
        "new connects at the socket again"
    );
    // The connection p3 opened per packet goes on, to its backend.
    for _ in 0..5 {
        assert_eq!(per_packet.request()?, first);
    }
    assert_eq!(per_packet.peer_now()?, web);

    // Held at the socket, then p3 opts out again.
    let mut at_socket = Held::open(&p3, cgroup, &web)?;
    let backend = at_socket.request()?;
    bed.write_manifest(&manifest("disabled"))?;
    wait_opted_out(&mut agent, 1.0)?;
    let before = translated()?;
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &web, "-n", "10"])?;
    assert_eq!(reached(&r, 10, &web).len(), 2, "{r:?}");
    assert_eq!(translated()?, before, "new connects per packet");
    for _ in 0..5 {
        assert_eq!(at_socket.request()?, backend);
        assert_eq!(per_packet.request()?, first);
    }
    assert_eq!(at_socket.peer_now()?, web);
    Ok(())
}

#[test]
fn with_hostns_only_every_pod_goes_per_packet_and_the_node_keeps_its_sockets() -> anyhow::Result<()>
{
    let bed = bed("")?;
    let _agent1 = bed.agent(&bed.node1)?;
    let mut agent = bed.agent_with(&bed.node2, &["--bpf-lb-sock-hostns-only"])?;
    // p2 and p3, unlabelled both.
    wait_opted_out(&mut agent, 2.0)?;
    let cgroup = bed.node2.cgroup.path();
    let web = format!("{VIP}:80");
    let translated = || connects_translated(&bed);
    let before = translated()?;
    for pod in ["p2", "p3"] {
        let r = probe::client(
            &bed.nodes.ns(pod),
            cgroup,
            &["tcp", "--to", &web, "-n", "20"],
        )?;
        assert_eq!(reached(&r, 20, &web).len(), 2, "{pod}: {r:?}");
    }
    assert_eq!(translated()?, before, "no pod's connect at the socket");
    // The node's own sockets are balanced at the socket still.
    let r = probe::client(
        &bed.nodes.ns("n2"),
        cgroup,
        &["tcp", "--to", &web, "-n", "20"],
    )?;
    assert_eq!(reached(&r, 20, &web).len(), 2, "{r:?}");
    assert_eq!(translated()? - before, 20);
    Ok(())
}

#[test]
fn an_agent_restart_keeps_an_opted_out_pods_connections_and_its_path() -> anyhow::Result<()> {
    let bed = bed("disabled")?;
    let _agent1 = bed.agent(&bed.node1)?;
    let mut agent = bed.agent(&bed.node2)?;
    wait_opted_out(&mut agent, 1.0)?;
    let p3 = bed.nodes.ns("p3");
    let cgroup = bed.node2.cgroup.path();
    let web = format!("{VIP}:80");
    let mut held = Held::open(&p3, cgroup, &web)?;
    let backend = held.request()?;

    // The programs and maps outlive the agent.
    agent.kill();
    assert_eq!(held.request()?, backend);
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &web, "-n", "10"])?;
    assert_eq!(reached(&r, 10, &web).len(), 2, "without the agent: {r:?}");

    // A new agent adopts them: nothing is detached, nothing broken.
    let before = bed.node2.pins.stats()?.of("tc_pod ingress ipv4 new_flow");
    let mut agent = bed.agent(&bed.node2)?;
    wait_opted_out(&mut agent, 1.0)?;
    assert_eq!(held.request()?, backend);
    assert_eq!(held.peer_now()?, web);
    let r = probe::client(&p3, cgroup, &["tcp", "--to", &web, "-n", "10"])?;
    assert_eq!(reached(&r, 10, &web).len(), 2, "{r:?}");
    let after = bed.node2.pins.stats()?.of("tc_pod ingress ipv4 new_flow");
    assert!(
        after >= before + 10,
        "per packet still: {before} -> {after}"
    );
    Ok(())
}

#[test]
fn with_source_ranges_of_all_types_a_cluster_ip_is_guarded_from_pods_and_the_node()
-> anyhow::Result<()> {
    let bed = bed("")?;
    let _agent1 = bed.agent(&bed.node1)?;
    let mut agent = bed.agent_with(&bed.node2, &["--bpf-lb-source-range-all-types"])?;
    let cgroup = bed.node2.cgroup.path();
    let guarded = format!("{GUARDED}:80");
    let stats = || bed.node2.pins.stats();
    // p2, inside the ranges, gets in once the agent wrote where each
    // namespace sends from.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = probe::client(&bed.nodes.ns("p2"), cgroup, &["tcp", "--to", &guarded])?;
        if r.ok() == 1 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "p2 never got in: {r:?}\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = probe::client(
        &bed.nodes.ns("p2"),
        cgroup,
        &["tcp", "--to", &guarded, "-n", "20"],
    )?;
    assert_eq!(reached(&r, 20, &guarded), BTreeSet::from(["p1", "p2"]));
    // p3 and the node, outside them, are refused at the socket.
    let before = stats()?.of("sock egress ipv4 drop_source_range");
    for ns in ["p3", "n2"] {
        let r = probe::client(
            &bed.nodes.ns(ns),
            cgroup,
            &["tcp", "--to", &guarded, "-n", "3"],
        )?;
        assert_eq!(r.ok(), 0, "{ns}: {r:?}");
        assert!(r.errors.contains_key("PermissionDenied"), "{ns}: {r:?}");
    }
    assert_eq!(
        stats()?.of("sock egress ipv4 drop_source_range") - before,
        6
    );
    // A Service without ranges stays open to them.
    let web = format!("{VIP}:80");
    let r = probe::client(
        &bed.nodes.ns("p3"),
        cgroup,
        &["tcp", "--to", &web, "-n", "5"],
    )?;
    assert_eq!(r.ok(), 5, "{r:?}");
    let dump = bed.node2.pins.dump()?;
    assert!(dump.contains("sends from 10.42.2.130"), "{dump}");
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("#   TCP  {GUARDED}:80 "))
                && l.ends_with(" 10.42.2.0/25")),
        "{dump}"
    );

    // Opted out, p3 is checked per packet at its interface: dropped.
    bed.write_manifest(&manifest("disabled"))?;
    wait_opted_out(&mut agent, 1.0)?;
    let before = stats()?.of("tc_pod ingress ipv4 drop_source_range");
    let r = probe::client(&bed.nodes.ns("p3"), cgroup, &["tcp", "--to", &guarded])?;
    assert_eq!(r.ok(), 0, "{r:?}");
    assert!(stats()?.of("tc_pod ingress ipv4 drop_source_range") > before);
    Ok(())
}
