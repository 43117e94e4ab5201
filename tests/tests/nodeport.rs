//! Traffic from outside the node through the tc programs, with real sockets
//! in network namespaces and two real `lb-agent`s, one in each node's
//! namespace (`lb_tests::two_nodes`). Needs root; fails loudly without it.

use std::{
    collections::BTreeSet,
    fs,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use aya::programs::{SchedClassifier, TcAttachType};
use lb_fixtures::{Slice, Svc, SvcPort, yaml};
use lb_tests::{
    agent,
    netns::{self, exec, ip},
    probe::{self, Held},
    two_nodes::{
        Bed, CLIENT, EXTERNAL_IP, HC_PORT, NODE1, NODE2, NodeBed, PROXY_IP, answers, node_objects,
        node_port_svc, p1, p2, slice,
    },
};

/// Nodes `node-1` and `node-2`, and Services with one endpoint on each node
/// (unless said otherwise): `cluster` (eTP Cluster, NodePort 30080 TCP and
/// UDP, the external IP), `local` (eTP Local, NodePort 30081), `lonely`
/// (a LoadBalancer with eTP Local, NodePort 30085, health check on
/// [`HC_PORT`], its one endpoint on node-1), the LoadBalancers `guarded`
/// (198.51.100.20, source ranges holding the client's address), `shut`
/// (198.51.100.21, ranges without it) and `proxied` ([`PROXY_IP`] with
/// `ipMode: Proxy`); and `empty` (NodePort 30082), without endpoints.
fn manifest() -> String {
    let both = || vec![p1(), p2()];
    let lb = |name: &str, vip: &str, node_port: i32, ip: &str, mode: &str| {
        Svc::new("default", name)
            .type_("LoadBalancer")
            .cluster_ip(vip)
            .with_port(SvcPort::new("http", 80, "TCP").node_port(node_port))
            .lb_ingress(ip, Some(mode))
    };
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        node_port_svc("cluster", "10.96.57.1", 30080)
            .external_ips(&[EXTERNAL_IP])
            .into(),
        slice("cluster", both()).into(),
        node_port_svc("local", "10.96.57.2", 30081)
            .external_traffic_policy("Local")
            .into(),
        slice("local", both()).into(),
        lb("lonely", "10.96.57.6", 30085, "198.51.100.40", "VIP")
            .external_traffic_policy("Local")
            .health_check_node_port(HC_PORT.into())
            .into(),
        slice("lonely", vec![p1()]).into(),
        lb("guarded", "10.96.57.4", 30083, "198.51.100.20", "VIP")
            .source_ranges(&["203.0.113.0/25"])
            .into(),
        slice("guarded", both()).into(),
        lb("shut", "10.96.57.5", 30084, "198.51.100.21", "VIP")
            .source_ranges(&["192.0.2.0/24"])
            .into(),
        slice("shut", both()).into(),
        lb("proxied", "10.96.57.7", 30086, PROXY_IP, "Proxy").into(),
        slice("proxied", both()).into(),
        node_port_svc("empty", "10.96.57.3", 30082).into(),
    ])
}

#[test]
fn nodeports_and_external_ips_reach_pods_on_both_nodes_from_outside() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let mut agent = bed.agent(&bed.node1)?;
    let _agent2 = bed.agent(&bed.node2)?;
    let node_port = format!("{NODE1}:30080");
    bed.wait_reachable(&node_port)?;

    // eTP Cluster: both pods; the pod on this node sees the client, the
    // one on node-2 sees node-1 (SNAT), so its answer comes back through
    // node-1, which gives it the NodePort's address again.
    let (p1_sees_client, p2_sees_node) = (format!("p1 from {CLIENT}"), format!("p2 from {NODE1}"));
    let both = BTreeSet::from([p1_sees_client.as_str(), p2_sees_node.as_str()]);
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "60", "--from"])?;
    assert_eq!(answers(&r, 60, &node_port), both);
    // A UDP socket is one flow, pinned to one backend: 16 sockets.
    let mut udp = BTreeSet::new();
    for _ in 0..16 {
        let r = bed.client(&["udp", "--to", &node_port, "-n", "3", "--from"])?;
        let got = answers(&r, 3, &node_port);
        assert_eq!(got.len(), 1, "one backend per flow: {r:?}");
        udp.extend(got.into_iter().map(str::to_owned));
    }
    let both_owned: BTreeSet<String> = both.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(udp, both_owned, "UDP replies come from the NodePort");
    let external = format!("{EXTERNAL_IP}:80");
    let r = bed.client(&["tcp", "--to", &external, "-n", "60", "--from"])?;
    assert_eq!(answers(&r, 60, &external), both);

    // eTP Local: only the pod on this node, and it sees the client.
    let local = format!("{NODE1}:30081");
    let r = bed.client(&["tcp", "--to", &local, "-n", "40", "--from"])?;
    let only_p1 = BTreeSet::from([p1_sees_client.as_str()]);
    assert_eq!(answers(&r, 40, &local), only_p1);
    let r = bed.client(&["udp", "--to", &local, "-n", "40", "--from"])?;
    assert_eq!(answers(&r, 40, &local), only_p1);

    // Path MTU: node-1 reaches p1 through a 1280-byte route, while the
    // client and p1 have 1500-byte links (so TCP's MSS does not help). The
    // "fragmentation needed" node-1 sends quotes the DNATed segment; only
    // translated back does the client's socket learn the path MTU.
    let n1 = bed.nodes.ns("n1");
    ip(&[
        "-n",
        &n1,
        "route",
        "replace",
        "10.42.1.0/24",
        "dev",
        "p1",
        "mtu",
        "1280",
    ])?;
    let r = bed.client(&["tcp", "--to", &local, "-n", "3", "--size", "20000"])?;
    assert_eq!(
        (r.ok(), r.failed()),
        (3, 0),
        "20 kB through a 1280-byte path: {r:?}"
    );

    // loadBalancerSourceRanges: the client's range gets in, others not
    // (dropped, as kube-proxy's firewall drops: the connect times out).
    let guarded = "198.51.100.20:80";
    let r = bed.client(&["tcp", "--to", guarded, "-n", "20", "--from"])?;
    assert_eq!(answers(&r, 20, guarded), both);
    let before = bed.node1.pins.stats()?.of("tc ipv4 drop_source_range");
    let r = bed.client(&["tcp", "--to", "198.51.100.21:80", "-n", "1"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    assert!(bed.node1.pins.stats()?.of("tc ipv4 drop_source_range") > before);
    let dump = bed.node1.pins.dump()?;
    assert!(
        dump.lines().any(|l| l.starts_with("TCP  198.51.100.21:80 ")
            && l.ends_with(" LoadBalancer source-ranges from-outside")),
        "{dump}"
    );

    // No endpoints: refused at once, as kube-proxy's REJECT does.
    let empty = format!("{NODE1}:30082");
    let r = bed.client(&["tcp", "--to", &empty, "-n", "3"])?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
    let r = bed.client(&["udp", "--to", &empty, "-n", "1", "--connected"])?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&1), "{r:?}");

    // Counted as new flows; listed as frontends seen from outside.
    let stats = bed.node1.pins.stats()?;
    assert!(stats.of("tc ipv4 new_flow") >= 160, "{stats:?}");
    let dump = bed.node1.pins.dump()?;
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("TCP  {NODE1}:30081 "))
                && l.ends_with(" NodePort eTP=Local from-outside")),
        "{dump}"
    );

    // Each flow is listed, both ways, and a SNATed one with its port.
    let ct = bed.node1.pins.conntrack()?;
    let inbound = format!(" -> {NODE1}:30081 backend 10.42.1.2:8080 ");
    assert!(
        ct.lines()
            .any(|l| l.starts_with("TCP  IN  ") && l.contains(&inbound)),
        "{ct}"
    );
    let snat = format!("10.42.2.2:8080 -> {NODE1}:");
    assert!(
        ct.lines().any(|l| l.starts_with("TCP  ")
            && l.contains(&snat)
            && l.contains(" client 203.0.113.2:")),
        "{ct}"
    );

    // An established connection outlives the agent: its programs and
    // conntrack stay pinned, and the next agent takes them over.
    let mut held = Held::open_in(&bed.nodes.ns("c"), None, &local)?;
    assert_eq!(held.request()?, "p1");
    agent.kill();
    assert_eq!(held.request()?, "p1", "the programs outlive the agent");
    let agent = bed.agent(&bed.node1)?;
    assert_eq!(held.request()?, "p1", "a new agent keeps the flow");
    drop(agent);
    assert_eq!(held.request()?, "p1");
    Ok(())
}

/// With Maglev, both nodes build the same table from the same endpoints and
/// seed, and hash a flow without its destination address: a client's flow
/// reaches the same pod through either node's NodePort, while its flows
/// still spread over both pods. The Service `local-random` opts out by
/// Cilium's annotation.
#[test]
fn with_maglev_a_flow_reaches_the_same_pod_through_either_node() -> anyhow::Result<()> {
    let opted_out = node_port_svc("local-random", "10.96.57.9", 30089)
        .annotation("service.cilium.io/lb-algorithm", "random");
    let manifest = format!(
        "{}{}",
        manifest(),
        yaml::<lb_fixtures::Object>([
            opted_out.into(),
            slice("local-random", vec![p1(), p2()]).into()
        ])
    );
    let bed = Bed::new(&manifest)?;
    let args = [
        "--bpf-lb-algorithm=maglev",
        "--bpf-lb-maglev-table-size=251",
    ];
    let _agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    for node in [NODE1, NODE2] {
        bed.wait_reachable(&format!("{node}:30080"))?;
    }
    let pod = |node: &str, sport: u16| -> anyhow::Result<String> {
        let to = format!("{node}:30080");
        let sport = sport.to_string();
        let r = bed.client(&["udp", "--to", &to, "-n", "2", "--sport", &sport])?;
        let got = answers(&r, 2, &to);
        anyhow::ensure!(got.len() == 1, "one pod per flow: {r:?}");
        Ok(got.into_iter().next().unwrap_or_default().to_owned())
    };
    let mut pods = BTreeSet::new();
    for sport in 41_000..41_024 {
        let (via1, via2) = (pod(NODE1, sport)?, pod(NODE2, sport)?);
        assert_eq!(via1, via2, "source port {sport}");
        pods.insert(via1);
    }
    assert_eq!(pods, BTreeSet::from(["p1".to_owned(), "p2".to_owned()]));

    let dump = bed.node1.pins.dump()?;
    let maglev = |addr: &str| {
        dump.lines().any(|l| {
            l.starts_with(&format!("UDP  {addr} "))
                && l.contains(" maglev ")
                && l.ends_with(" NodePort table 251 from-outside")
        })
    };
    assert!(maglev(&format!("{NODE1}:30080")), "{dump}");
    assert!(!maglev(&format!("{NODE1}:30089")), "opted out: {dump}");
    Ok(())
}

/// `--bpf-lb-source-range-all-types`: the ranges of `guarded` (which hold
/// the client) and of `shut` (which do not) guard their NodePorts too, on
/// both nodes' addresses; a Service without ranges stays open.
#[test]
fn with_source_ranges_of_all_types_node_ports_are_guarded_too() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let _agent1 = bed.agent_with(&bed.node1, &["--bpf-lb-source-range-all-types"])?;
    let _agent2 = bed.agent(&bed.node2)?;
    bed.wait_reachable(&format!("{NODE1}:30080"))?;

    let guarded = format!("{NODE1}:30083");
    let r = bed.client(&["tcp", "--to", &guarded, "-n", "20"])?;
    assert_eq!((r.ok(), r.failed()), (20, 0), "{r:?}");
    let before = bed.node1.pins.stats()?.of("tc ipv4 drop_source_range");
    let r = bed.client(&["tcp", "--to", &format!("{NODE1}:30084"), "-n", "1"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    let after = bed.node1.pins.stats()?.of("tc ipv4 drop_source_range");
    assert!(after > before, "{before} -> {after}");
    let dump = bed.node1.pins.dump()?;
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("TCP  {NODE1}:30084 "))
                && l.ends_with(" NodePort source-ranges from-outside")),
        "{dump}"
    );
    // Node-2's agent runs without the flag: its NodePort of `shut` is open.
    let r = bed.client(&["tcp", "--to", &format!("{NODE2}:30084"), "-n", "5"])?;
    assert_eq!((r.ok(), r.failed()), (5, 0), "{r:?}");
    let r = bed.client(&["tcp", "--to", &format!("{NODE1}:30080"), "-n", "5"])?;
    assert_eq!((r.ok(), r.failed()), (5, 0), "no ranges: open {r:?}");
    Ok(())
}

/// Endpoint weights per packet: the Service `weighted` has p1 in a slice
/// of weight 1 (ours) and p2 in one of weight 3 (Cilium's annotation), so
/// new flows from outside split about 1 : 3; p1's slice drained to weight
/// 0 takes no new flow while a connection held to it goes on.
#[test]
fn weighted_endpoints_share_new_flows_and_a_drained_one_keeps_its_connections() -> anyhow::Result<()>
{
    const TO: &str = "192.168.57.1:30087";
    let objects = |p1_weight: &str| {
        let [node1, node2] = node_objects();
        yaml::<lb_fixtures::Object>([
            node1,
            node2,
            node_port_svc("weighted", "10.96.57.10", 30087).into(),
            slice("weighted", vec![p1()])
                .annotation("lb-agent.io/weight", p1_weight)
                .into(),
            Slice::new("default", "weighted-2")
                .service("weighted")
                .port("http", 8080, "TCP")
                .port("dns", 5353, "UDP")
                .endpoints([p2()])
                .annotation("service.cilium.io/weight", "3")
                .into(),
        ])
    };
    let bed = Bed::new(&objects("1"))?;
    let _agent1 = bed.agent(&bed.node1)?;
    let _agent2 = bed.agent(&bed.node2)?;
    bed.wait_reachable(TO)?;

    let r = bed.client(&["tcp", "--to", TO, "-n", "400"])?;
    assert_eq!((r.ok(), r.failed()), (400, 0), "{r:?}");
    let p2 = f64::from(r.replies.get("p2").copied().unwrap_or(0)) / 400.0;
    eprintln!("weights 1 : 3 from outside: p2 took {p2:.3} of 400 new flows");
    // Binomial at 0.75 over 400: the standard deviation is 0.022.
    assert!((0.65..=0.85).contains(&p2), "{r:?}");
    let dump = bed.node1.pins.dump()?;
    assert!(
        dump.contains(" weight 1 (25.0%)") && dump.contains(" weight 3 (75.0%)"),
        "{dump}"
    );

    // A connection held to each pod, then p1 drained.
    let client = bed.nodes.ns("c");
    let mut held = Vec::new();
    for _ in 0..200 {
        let mut h = Held::open_in(&client, None, TO)?;
        let id = h.request()?;
        if !held.iter().any(|(got, _)| *got == id) {
            held.push((id, h));
        }
        if held.len() == 2 {
            break;
        }
    }
    assert_eq!(held.len(), 2, "no connection landed on one of the pods");
    bed.write_manifest(&objects("0"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = bed.client(&["tcp", "--to", TO, "-n", "40"])?;
        assert_eq!(r.failed(), 0, "{r:?}");
        if r.replies.keys().eq(["p2"]) {
            break;
        }
        assert!(Instant::now() < deadline, "p1 still takes new flows: {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = bed.client(&["tcp", "--to", TO, "-n", "100"])?;
    assert_eq!(r.replies.keys().collect::<Vec<_>>(), ["p2"], "{r:?}");
    for (id, h) in &mut held {
        for _ in 0..3 {
            assert_eq!(
                h.request()?,
                *id,
                "a held connection to {id} after the drain"
            );
        }
    }
    Ok(())
}

#[test]
fn each_node_translates_its_own_traffic_and_answers_its_own_health_checks() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let _agent1 = bed.agent(&bed.node1)?;
    let _agent2 = bed.agent(&bed.node2)?;
    let node_port = format!("{NODE2}:30080");
    bed.wait_reachable(&node_port)?;

    // eTP Cluster through node-2: the mirror image of node-1's answers.
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "60", "--from"])?;
    let (p1_sees_node2, p2_sees_client) = (format!("p1 from {NODE2}"), format!("p2 from {CLIENT}"));
    assert_eq!(
        answers(&r, 60, &node_port),
        BTreeSet::from([p1_sees_node2.as_str(), p2_sees_client.as_str()])
    );
    // eTP Local: each node sends the client to its own pod only.
    for (node, pod) in [(NODE1, "p1"), (NODE2, "p2")] {
        let local = format!("{node}:30081");
        let r = bed.client(&["tcp", "--to", &local, "-n", "20", "--from"])?;
        let seen = format!("{pod} from {CLIENT}");
        assert_eq!(answers(&r, 20, &local), BTreeSet::from([seen.as_str()]));
    }

    // `lonely` has its one endpoint on node-1: node-1's health check says
    // 200 with it, node-2's says 503 with none, and node-2 drops what a
    // load balancer that ignored that would still send it.
    let a = bed.health(NODE1, 200)?;
    assert!(a.body.contains("\"name\": \"lonely\""), "{a:?}");
    assert!(a.body.contains("\"localEndpoints\": 1,"), "{a:?}");
    assert!(a.body.contains("\"serviceProxyHealthy\": true"), "{a:?}");
    let a = bed.health(NODE2, 503)?;
    assert!(a.body.contains("\"localEndpoints\": 0,"), "{a:?}");
    let lonely = format!("{NODE1}:30085");
    let r = bed.client(&["tcp", "--to", &lonely, "-n", "5", "--from"])?;
    let seen = format!("p1 from {CLIENT}");
    assert_eq!(answers(&r, 5, &lonely), BTreeSet::from([seen.as_str()]));
    let before = bed
        .node2
        .pins
        .stats()?
        .of("tc ipv4 drop_no_local_endpoints");
    let r = bed.client(&["tcp", "--to", &format!("{NODE2}:30085"), "-n", "1"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    assert!(
        bed.node2
            .pins
            .stats()?
            .of("tc ipv4 drop_no_local_endpoints")
            > before
    );

    // ipMode Proxy: the load balancer's address is left alone, and reaches
    // whatever owns it (here `proxy` in p1, on the Service's port), not a
    // backend's target port.
    let proxied = format!("{PROXY_IP}:80");
    let r = bed.client(&["tcp", "--to", &proxied, "-n", "5", "--from"])?;
    let seen = format!("proxy from {CLIENT}");
    assert_eq!(answers(&r, 5, &proxied), BTreeSet::from([seen.as_str()]));
    let dump = bed.node1.pins.dump()?;
    assert!(!dump.contains(PROXY_IP), "{dump}");

    // A pod reaching its own Service's NodePort is translated at its
    // socket, to the cluster-wide endpoints, with no SNAT: both pods see it.
    let p1 = bed.nodes.ns("p1");
    let r = probe::client(
        &p1,
        bed.node1.cgroup.path(),
        &[
            "tcp",
            "--to",
            &format!("{NODE1}:30080"),
            "-n",
            "40",
            "--from",
        ],
    )?;
    assert_eq!(
        answers(&r, 40, &format!("{NODE1}:30080")),
        BTreeSet::from(["p1 from 10.42.1.2", "p2 from 10.42.1.2"])
    );
    Ok(())
}

/// The tc link pins of `node`'s agent.
fn tc_links(node: &NodeBed) -> anyhow::Result<BTreeSet<String>> {
    Ok(fs::read_dir(node.pins.path().join("links"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<BTreeSet<String>>>()?
        .into_iter()
        .filter(|name| name.starts_with("tc-"))
        .collect())
}

/// The names of the TCX programs on `device` in network namespace `ns`,
/// ingress then egress.
fn tcx_programs(ns: &str, device: &str) -> anyhow::Result<Vec<String>> {
    netns::within(ns, || {
        let mut names = Vec::new();
        for hook in [TcAttachType::Ingress, TcAttachType::Egress] {
            let (_, programs) = SchedClassifier::query_tcx(device, hook)?;
            names.extend(
                programs
                    .iter()
                    .map(|p| p.name_as_str().unwrap_or("?").to_owned()),
            );
        }
        Ok(names)
    })
}

#[test]
fn a_device_named_but_missing_holds_back_neither_the_agent_nor_the_other_devices()
-> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let mut agent = bed.agent_with(&bed.node1, &["--devices=eth0,late0"])?;
    let _agent2 = bed.agent(&bed.node2)?;
    let node_port = format!("{NODE1}:30080");
    bed.wait_reachable(&node_port)?;
    // eth0 has both programs: DNAT in, SNAT out to node-2's pod, and the
    // replies' frontend restored.
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "40", "--from"])?;
    let both = [format!("p1 from {CLIENT}"), format!("p2 from {NODE1}")];
    assert_eq!(
        answers(&r, 40, &node_port),
        both.iter().map(String::as_str).collect()
    );
    let eth0 = BTreeSet::from(["tc-in-eth0".to_owned(), "tc-out-eth0".to_owned()]);
    assert_eq!(tc_links(&bed.node1)?, eth0);
    assert_eq!(agent.metric("lbagent_tc_devices_unattached")?, 1.0);

    // The device appears: the agent finds it within a few seconds, without
    // any change from the apiserver.
    let n1 = bed.nodes.ns("n1");
    ip(&[
        "-n", &n1, "link", "add", "late0", "type", "veth", "peer", "late1",
    ])?;
    let mut all = eth0;
    all.extend(["tc-in-late0".to_owned(), "tc-out-late0".to_owned()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tc_links(&bed.node1)? != all {
        if Instant::now() > deadline {
            bail!(
                "late0 never got the tc programs: {:?}",
                tc_links(&bed.node1)?
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    agent.wait_metric("lbagent_tc_devices_unattached", 0.0)?;
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "20"])?;
    assert_eq!((r.ok(), r.failed()), (20, 0), "{r:?}");

    // Deleted and created again, it has none of our programs (the pins
    // stay, detached): the agent notices the new device and attaches again.
    let late0_programs = || tcx_programs(&n1, "late0");
    let has_both = |names: &[String]| names == ["lb_tc_ingress", "lb_tc_egress"];
    assert!(has_both(&late0_programs()?), "{:?}", late0_programs()?);
    ip(&["-n", &n1, "link", "del", "late0"])?;
    ip(&[
        "-n", &n1, "link", "add", "late0", "type", "veth", "peer", "late1",
    ])?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !has_both(&late0_programs()?) {
        if Instant::now() > deadline {
            bail!(
                "the new late0 never got the tc programs: {:?}",
                late0_programs()?
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    agent.wait_metric("lbagent_tc_devices_unattached", 0.0)?;
    Ok(())
}

/// The program ids of the tc filters (clsact) on node-1's eth0 at `hook`
/// that run `program`.
fn filters(bed: &Bed, hook: &str, program: &str) -> anyhow::Result<Vec<u32>> {
    let out = exec(
        &bed.nodes.ns("n1"),
        &["tc", "filter", "show", "dev", "eth0", hook],
    )?;
    // One line per filter: `... handle 0xb1 <name> direct-action ... id <id> name <name> ...`.
    out.lines()
        .filter(|l| l.contains(program))
        .map(|l| {
            let mut words = l.split_whitespace().skip_while(|w| *w != "id").skip(1);
            Ok(words.next().context("no program id")?.parse()?)
        })
        .collect()
}

#[test]
fn without_tcx_the_programs_are_clsact_filters_that_outlive_the_agent() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let no_tcx = ["--enable-tcx=false"];
    let mut agent = bed.agent_with(&bed.node1, &no_tcx)?;
    let _agent2 = bed.agent(&bed.node2)?;
    let node_port = format!("{NODE1}:30080");
    bed.wait_reachable(&node_port)?;
    // Both halves work: DNAT in, SNAT out to node-2's pod, both reversed.
    let both = [format!("p1 from {CLIENT}"), format!("p2 from {NODE1}")];
    let both: BTreeSet<&str> = both.iter().map(String::as_str).collect();
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "40", "--from"])?;
    assert_eq!(answers(&r, 40, &node_port), both);
    assert!(tc_links(&bed.node1)?.is_empty(), "no TCX link");
    let ours = || -> anyhow::Result<[u32; 2]> {
        let (i, e) = (
            filters(&bed, "ingress", "lb_tc_ingress")?,
            filters(&bed, "egress", "lb_tc_egress")?,
        );
        match (i.as_slice(), e.as_slice()) {
            ([i], [e]) => Ok([*i, *e]),
            _ => bail!("one filter per hook expected: {i:?} {e:?}"),
        }
    };
    let first = ours()?;

    // The filters outlive the agent, and the next one adopts them (the
    // same build) or replaces them in place (after a reload): an
    // established connection goes on throughout.
    let local = format!("{NODE1}:30081");
    let mut held = Held::open_in(&bed.nodes.ns("c"), None, &local)?;
    assert_eq!(held.request()?, "p1");
    agent.kill();
    assert_eq!(held.request()?, "p1", "the filters outlive the agent");
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "20", "--from"])?;
    assert_eq!(answers(&r, 20, &node_port), both);
    let agent = bed.agent_with(&bed.node1, &no_tcx)?;
    assert_eq!(held.request()?, "p1", "a new agent keeps the flow");
    assert_eq!(ours()?, first, "the same build adopts its programs");
    // Without the program pins, the next agent loads its own.
    drop(agent);
    fs::remove_dir_all(bed.node1.pins.path().join("programs"))?;
    let agent = bed.agent_with(&bed.node1, &no_tcx)?;
    assert_eq!(held.request()?, "p1", "a new agent keeps the flow");
    let second = ours()?;
    assert!(
        second[0] != first[0] && second[1] != first[1],
        "replaced by the new agent's programs: {first:?} -> {second:?}"
    );
    let r = bed.client(&["tcp", "--to", &node_port, "-n", "20", "--from"])?;
    assert_eq!(answers(&r, 20, &node_port), both);

    // An agent with TCX takes over: its links first, then the filters go,
    // and the held connection goes on through the links' programs.
    drop(agent);
    let agent = bed.agent(&bed.node1)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !filters(&bed, "ingress", "lb_tc_ingress")?.is_empty()
        || !filters(&bed, "egress", "lb_tc_egress")?.is_empty()
    {
        if Instant::now() > deadline {
            bail!("clsact filters left beside the TCX links");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        tcx_programs(&bed.nodes.ns("n1"), "eth0")?,
        ["lb_tc_ingress", "lb_tc_egress"]
    );
    assert_eq!(held.request()?, "p1", "the flow goes on through TCX");
    drop(agent);
    // Back to clsact, for the cleanup below.
    let agent = bed.agent_with(&bed.node1, &no_tcx)?;
    assert_eq!(
        tcx_programs(&bed.nodes.ns("n1"), "eth0")?,
        Vec::<String>::new()
    );

    // `lb-agent cleanup` in the node finds them without pins. Without
    // CAP_NET_ADMIN the kernel refuses to remove them: cleanup fails
    // rather than leaving them running unsaid.
    drop(agent);
    let bin = agent::agent_bin();
    let pins = bed.node1.pins.path().to_string_lossy().into_owned();
    let refused = exec(
        &bed.nodes.ns("n1"),
        &[
            "setpriv",
            "--bounding-set=-net_admin",
            "--inh-caps=-net_admin",
            &bin.to_string_lossy(),
            "cleanup",
            "--bpffs-dir",
            &pins,
        ],
    );
    assert!(
        refused.is_err(),
        "cleanup without CAP_NET_ADMIN: {refused:?}"
    );
    assert_eq!(ours()?.len(), 2, "the refused filters are still there");
    exec(
        &bed.nodes.ns("n1"),
        &[&bin.to_string_lossy(), "cleanup", "--bpffs-dir", &pins],
    )?;
    assert_eq!(
        filters(&bed, "ingress", "lb_tc_ingress")?,
        Vec::<u32>::new()
    );
    assert_eq!(filters(&bed, "egress", "lb_tc_egress")?, Vec::<u32>::new());
    Ok(())
}

#[test]
fn a_device_without_a_link_layer_header_gets_the_programs_for_it() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    // A TUN device, as WireGuard's: packets start with their IP header.
    let n1 = bed.nodes.ns("n1");
    ip(&["-n", &n1, "tuntap", "add", "tun0", "mode", "tun"])?;
    ip(&["-n", &n1, "link", "set", "tun0", "up"])?;
    let _agent = bed.agent_with(&bed.node1, &["--devices=eth0,tun0"])?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while tcx_programs(&n1, "tun0")? != ["lb_tc_l3_in", "lb_tc_l3_out"] {
        if Instant::now() > deadline {
            bail!("tun0 got {:?}", tcx_programs(&n1, "tun0")?);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        tcx_programs(&n1, "eth0")?,
        ["lb_tc_ingress", "lb_tc_egress"]
    );
    Ok(())
}
