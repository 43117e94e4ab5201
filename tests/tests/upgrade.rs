//! Upgrades and migrations under continuous traffic, with the real agent:
//! from map layouts 1 and 2 (earlier releases'), to other map capacities,
//! and finishing a migration that an earlier agent left half done. Needs
//! root; fails loudly without it.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::Path,
    time::{Duration, Instant},
};

use aya::{
    maps::MapInfo,
    programs::links::{FdLink, PinnedLink},
};
use lb_common::{ALL_MAPS, BACKENDS4, FRONTENDS4, REVNAT4};
use lb_fixtures::{Object, Slice, Svc, yaml};
use lb_tests::{
    cgroup::{SOCK_HOOKS, attached_programs},
    install::Frontend,
    layouts::{Layout, layout},
    probe::{self, BenchReport},
    scenario::Bed,
};

const TO: &str = "10.96.100.1:80";
const DNS: &str = "10.96.0.10:53";

/// web (10.96.100.1:80/TCP) on `pods`, and kube-dns (10.96.0.10:53/UDP) on d1.
fn manifest(pods: &[&str]) -> String {
    yaml([
        Object::from(
            Svc::new("default", "web")
                .cluster_ip("10.96.100.1")
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "web-1")
            .service("web")
            .port("http", 8080, "TCP")
            .ready(pods)
            .into(),
        Svc::new("kube-system", "kube-dns")
            .cluster_ip("10.96.0.10")
            .port("dns", 53, "UDP")
            .into(),
        Slice::new("kube-system", "kube-dns-1")
            .service("kube-dns")
            .port("dns", 53, "UDP")
            .ready(&["10.42.2.1"])
            .into(),
    ])
}

/// Pods pa, pb, pc (TCP 8080) and d1 (UDP 53).
fn bed() -> anyhow::Result<Bed> {
    let mut bed = Bed::new()?;
    for (id, ip) in [
        ("pa", "10.42.0.1"),
        ("pb", "10.42.0.2"),
        ("pc", "10.42.0.3"),
    ] {
        bed.backend(id, ip.parse()?, &[8080], &[])?;
    }
    bed.backend("d1", "10.42.2.1".parse()?, &[], &[53])?;
    Ok(bed)
}

/// Traffic that runs across an upgrade at full rate: TCP short
/// connections and resolver-style UDP (a new connected socket per request),
/// two workers each. Every reply must come from the Service's address
/// (`getpeername()`, `recvfrom()`): one from a backend's own address is a
/// failure (`WrongPeer`), as it is to an application.
struct Traffic {
    tcp: std::thread::JoinHandle<anyhow::Result<BenchReport>>,
    udp: std::thread::JoinHandle<anyhow::Result<BenchReport>>,
}

impl Traffic {
    fn start(bed: &Bed, seconds: f64) -> anyhow::Result<Self> {
        let run = |to: &'static str, proto: &'static str, extra: &'static [&'static str]| {
            let (ns, cg) = (bed.client_ns.clone(), bed.cgroup.path().to_owned());
            std::thread::spawn(move || {
                let secs = seconds.to_string();
                let mut args = vec![proto, "--to", to, "-c", "2", "--seconds", &secs];
                args.extend(extra);
                probe::bench(&ns, &cg, &args)
            })
        };
        Ok(Self {
            tcp: run(TO, "bench-tcp", &[]),
            udp: run(DNS, "bench-udp", &["--socket-per-request"]),
        })
    }

    /// Waits for both clients; their reports.
    fn finish(self) -> anyhow::Result<(BenchReport, BenchReport)> {
        let tcp = self.tcp.join().expect("tcp client")?;
        let udp = self.udp.join().expect("udp client")?;
        Ok((tcp, udp))
    }
}

/// The file names pinned in `dir` (none if it does not exist).
fn pinned(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The pin names of the agent's map layout, whichever it is.
fn current_layout() -> BTreeSet<String> {
    ALL_MAPS.iter().map(|m| m.pin.to_owned()).collect()
}

/// Waits until `maps/` holds exactly the pins of the agent's layout and
/// `maps-next/` is gone: the migration is over.
fn wait_migrated(pins: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while pinned(&pins.join("maps")) != current_layout() || pins.join("maps-next").exists() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no migration: maps/ {:?}, maps-next/ {:?}",
            pinned(&pins.join("maps")),
            pinned(&pins.join("maps-next"))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn answering(bed: &Bed, n: u32) -> anyhow::Result<BTreeSet<String>> {
    let r = bed.tcp(TO, n)?;
    anyhow::ensure!(r.failed() == 0, "{r:?}");
    Ok(r.replies.keys().cloned().collect())
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn assert_no_failure(tcp: &BenchReport, udp: &BenchReport, what: &str) {
    eprintln!(
        "{what}: TCP {} connections ({:.0}/s), {} failed; UDP {} requests ({:.0}/s), {} failed",
        tcp.ok + tcp.failed,
        tcp.rate,
        tcp.failed,
        udp.ok + udp.failed,
        udp.rate,
        udp.failed
    );
    assert_eq!(tcp.failed, 0, "{what}: {:?}", tcp.errors);
    assert_eq!(udp.failed, 0, "{what}: {:?}", udp.errors);
    assert!(tcp.ok > 500, "{what}: too little TCP traffic: {tcp:?}");
    assert!(udp.ok > 500, "{what}: too little UDP traffic: {udp:?}");
}

/// The program id behind each of our link pins.
fn linked_programs(pins: &Path) -> anyhow::Result<BTreeMap<String, u32>> {
    let links = pins.join("links");
    pinned(&links)
        .into_iter()
        .map(|name| {
            let link = FdLink::from(PinnedLink::from_pin(links.join(&name))?);
            Ok((name, link.info()?.program_id()))
        })
        .collect()
}

/// What an earlier release had programmed: web on pa and pb, kube-dns on d1.
fn old_frontends() -> Vec<Frontend> {
    let ip = |s: &str| s.parse().expect("address");
    vec![
        Frontend {
            vip: ip("10.96.100.1"),
            port: 80,
            proto: 6,
            scope: 0,
            backends: vec![(ip("10.42.0.1"), 8080), (ip("10.42.0.2"), 8080)],
        },
        Frontend {
            vip: ip("10.96.0.10"),
            port: 53,
            proto: 17,
            scope: 0,
            backends: vec![(ip("10.42.2.1"), 53)],
        },
    ]
}

/// Installs an earlier `layout`, then starts the agent, whose source moves
/// web, under TCP and UDP traffic and with a connection held open across
/// the upgrade. No connection may fail.
fn upgrade_under_traffic(layout: &Layout) -> anyhow::Result<()> {
    let what = &format!("upgrade from layout {}", layout.version);
    let mut bed = bed()?;
    layout.install(bed.pins.path(), bed.cgroup.path(), &old_frontends())?;
    // The old layout serves, with a connection held open across the upgrade.
    assert_eq!(answering(&bed, 40)?, set(&["pa", "pb"]));
    let mut held = bed.hold(TO)?;
    assert_eq!(held.peer, TO);
    let held_by = held.request()?;
    let old_programs = linked_programs(bed.pins.path())?;
    assert_eq!(old_programs.len(), 4, "the IPv4 programs: {old_programs:?}");

    // The new agent's source moves web to pb and pc.
    bed.write_manifest(&manifest(&["10.42.0.2", "10.42.0.3"]))?;
    let traffic = Traffic::start(&bed, 4.0)?;
    std::thread::sleep(Duration::from_millis(500));
    bed.start_agent(&[])?;
    if let Err(e) = wait_migrated(bed.pins.path()) {
        return Err(e.context(bed.agent().log_text()));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (tcp, udp) = traffic.finish()?;
    assert_no_failure(&tcp, &udp, what);
    assert!(udp.replies.keys().all(|id| id == "d1"), "{:?}", udp.replies);

    // The old connection still works and still shows the Service: its
    // reverse-NAT entry is in the agent's map (carried over, or adopted),
    // read by the new getpeername.
    assert_eq!(held.peer_now()?, TO);
    assert_eq!(held.request()?, held_by);
    // The new agent's state is what answers, through the new programs.
    // Every old link is replaced, and the IPv6 programs (which the older
    // layouts did not have) are linked beside them.
    let new_programs = linked_programs(bed.pins.path())?;
    let mut want: Vec<&str> = old_programs.keys().map(String::as_str).collect();
    want.extend(["connect6", "getpeername6", "recvmsg6", "sendmsg6"]);
    want.sort_unstable();
    assert!(new_programs.keys().eq(want), "{new_programs:?}");
    for (link, old) in &old_programs {
        assert_ne!(new_programs[link], *old, "{link}: not replaced");
    }
    let before = bed.pins.stats()?.of("connect_translated");
    assert_eq!(answering(&bed, 60)?, set(&["pb", "pc"]));
    assert!(bed.pins.stats()?.of("connect_translated") >= before + 60);
    let r = bed.udp(DNS, 10, false)?;
    assert_eq!(r.peers.keys().collect::<Vec<_>>(), [DNS], "{r:?}");
    let dump = bed.pins.dump()?;
    assert!(
        dump.contains("10.42.0.3:8080") && !dump.contains("10.42.0.1:8080"),
        "{dump}"
    );
    Ok(())
}

#[test]
fn upgrading_from_layout_1_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(1))
}

#[test]
fn upgrading_from_layout_2_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(2))
}

#[test]
fn upgrading_from_layout_3_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(3))
}

#[test]
fn upgrading_from_layout_5_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(5))
}

#[test]
fn upgrading_from_layout_6_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(6))
}

#[test]
fn upgrading_from_layout_7_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(7))
}

#[test]
fn upgrading_from_layout_8_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(8))
}

#[test]
fn upgrading_from_layout_9_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(9))
}

#[test]
fn upgrading_from_layout_10_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(10))
}

#[test]
fn upgrading_from_layout_11_under_traffic_fails_no_connection() -> anyhow::Result<()> {
    upgrade_under_traffic(layout(11))
}

/// The programs attached to `cgroup` at each socket hook, by link name.
fn attached(cgroup: &Path) -> anyhow::Result<BTreeMap<String, Vec<u32>>> {
    SOCK_HOOKS
        .iter()
        .map(|(name, hook)| Ok((name.to_string(), attached_programs(cgroup, *hook)?)))
        .collect()
}

/// Another process holding old links open (a `bpftool`, a monitor, a
/// backup that opened the pins) keeps a link attached after its pin is
/// renamed over. The old programs must go all the same. Left attached to
/// the cgroup, they run before the new ones at the same hook, from the
/// old maps: the old translating programs send connections to the old
/// backends, and write reverse-NAT entries into the old map, which the new
/// reversing programs no longer read once the migration is over, so that
/// UDP replies show the backend's address. Upgrades from layout 11 holding
/// the links of `held`.
fn upgrade_with_links_held(held: &[&str]) -> anyhow::Result<()> {
    let mut bed = bed()?;
    layout(11).install(bed.pins.path(), bed.cgroup.path(), &old_frontends())?;
    let old_programs = linked_programs(bed.pins.path())?;
    let before = attached(bed.cgroup.path())?;
    for (link, id) in &old_programs {
        assert_eq!(before[link], [*id], "{link} before the upgrade: {before:?}");
    }
    let links = bed.pins.path().join("links");
    let holding: Vec<FdLink> = held
        .iter()
        .map(|name| Ok(FdLink::from(PinnedLink::from_pin(links.join(name))?)))
        .collect::<anyhow::Result<_>>()?;

    bed.write_manifest(&manifest(&["10.42.0.2", "10.42.0.3"]))?;
    let traffic = Traffic::start(&bed, 4.0)?;
    std::thread::sleep(Duration::from_millis(500));
    bed.start_agent(&[])?;
    if let Err(e) = wait_migrated(bed.pins.path()) {
        return Err(e.context(bed.agent().log_text()));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (tcp, udp) = traffic.finish()?;

    // New flows once the upgrade is over: UDP replies must show the
    // Service's address, and TCP reach the new agent's backends.
    let r = bed.udp(DNS, 20, false)?;
    let web = bed.tcp(TO, 40)?;
    let new_programs = linked_programs(bed.pins.path())?;
    let after = attached(bed.cgroup.path())?;
    eprintln!(
        "holding {held:?}: attached {after:?}, old {old_programs:?}; during the upgrade \
         UDP failures {:?}; after it, UDP replies from {:?}, TCP answers from {:?}",
        udp.errors, r.peers, web.replies
    );
    // Exactly the new agent's program at every hook, old links held or not.
    let want: BTreeMap<String, Vec<u32>> = new_programs
        .iter()
        .map(|(link, id)| (link.clone(), vec![*id]))
        .collect();
    assert_eq!(after, want, "old programs {old_programs:?}");
    assert_no_failure(&tcp, &udp, "upgrade from layout 11, old links held");
    assert_eq!(r.peers.keys().collect::<Vec<_>>(), [DNS], "{r:?}");
    assert_eq!(r.failed(), 0, "{r:?}");
    assert_eq!(web.failed(), 0, "{web:?}");
    assert_eq!(
        web.replies.keys().cloned().collect::<BTreeSet<_>>(),
        set(&["pb", "pc"])
    );
    drop(holding);
    Ok(())
}

#[test]
fn an_upgrade_detaches_the_old_programs_while_their_links_are_held_open() -> anyhow::Result<()> {
    upgrade_with_links_held(&["connect4", "sendmsg4", "recvmsg4", "getpeername4"])
}

#[test]
fn an_upgrade_detaches_the_old_translating_programs_while_their_links_are_held_open()
-> anyhow::Result<()> {
    upgrade_with_links_held(&["connect4", "sendmsg4"])
}

#[test]
fn a_capacity_change_migrates_the_maps_under_traffic() -> anyhow::Result<()> {
    let mut bed = bed()?;
    bed.write_manifest(&manifest(&["10.42.0.1", "10.42.0.2"]))?;
    bed.start_agent(&[])?;
    let maps = bed.pins.path().join("maps");
    let id_before = MapInfo::from_pin(maps.join(FRONTENDS4.pin))?.id();
    let mut held = bed.hold(TO)?;

    let traffic = Traffic::start(&bed, 4.0)?;
    std::thread::sleep(Duration::from_millis(500));
    assert!(bed.agent().terminate()?, "SIGTERM must exit cleanly");
    bed.start_agent(&["--bpf-lb-service-backend-map-max=4096"])?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while MapInfo::from_pin(maps.join(BACKENDS4.pin)).map_or(true, |m| m.max_entries() != 4096)
        || bed.pins.path().join("maps-next").exists()
    {
        anyhow::ensure!(Instant::now() < deadline, "the maps were not migrated");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (tcp, udp) = traffic.finish()?;
    assert_no_failure(&tcp, &udp, "capacity migration");

    // Every map is new, not only the one whose capacity changed.
    wait_migrated(bed.pins.path())?;
    assert_ne!(
        MapInfo::from_pin(maps.join(FRONTENDS4.pin))?.id(),
        id_before
    );
    assert_eq!(held.peer_now()?, TO);
    assert_eq!(answering(&bed, 40)?, set(&["pa", "pb"]));
    // The same capacities again adopt the maps: no further migration.
    let id = MapInfo::from_pin(maps.join(FRONTENDS4.pin))?.id();
    bed.agent().terminate()?;
    bed.start_agent(&["--bpf-lb-service-backend-map-max=4096"])?;
    assert_eq!(MapInfo::from_pin(maps.join(FRONTENDS4.pin))?.id(), id);
    Ok(())
}

#[test]
fn a_migration_cut_short_is_finished_or_undone_by_the_next_agent() -> anyhow::Result<()> {
    let mut bed = bed()?;
    bed.write_manifest(&manifest(&["10.42.0.1", "10.42.0.2"]))?;
    bed.start_agent(&[])?;
    let mut held = bed.hold(TO)?;
    bed.agent().terminate()?;
    let (maps, next) = (
        bed.pins.path().join("maps"),
        bed.pins.path().join("maps-next"),
    );

    // As if an agent died right after switching the programs to new maps:
    // they are all still in maps-next/.
    fs::create_dir_all(&next)?;
    for name in pinned(&maps) {
        fs::rename(maps.join(&name), next.join(&name))?;
    }
    let traffic = Traffic::start(&bed, 2.5)?;
    std::thread::sleep(Duration::from_millis(300));
    bed.start_agent(&[])?;
    wait_migrated(bed.pins.path())?;
    std::thread::sleep(Duration::from_millis(300));
    let (tcp, udp) = traffic.finish()?;
    assert_no_failure(&tcp, &udp, "finishing a switched migration");
    assert_eq!(held.peer_now()?, TO);

    // As if an agent died while building new maps it never switched to:
    // they go, and the maps in use stay.
    bed.agent().terminate()?;
    fs::create_dir_all(&next)?;
    layout(1).pin_unused_map("LB4_REVNAT", &next.join(REVNAT4.pin))?;
    let id = MapInfo::from_pin(maps.join(FRONTENDS4.pin))?.id();
    bed.start_agent(&[])?;
    assert!(!next.exists(), "{:?}", pinned(&next));
    assert_eq!(MapInfo::from_pin(maps.join(FRONTENDS4.pin))?.id(), id);
    assert_eq!(answering(&bed, 40)?, set(&["pa", "pb"]));
    Ok(())
}
