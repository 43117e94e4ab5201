//! The image `cargo xtask image` built (`cargo xtask test` builds it first),
//! run as manifests/daemonset.yaml runs it: its init container, then the
//! agent with the DaemonSet's command, env, volume mounts, capabilities and
//! security context (tests/src/container.rs translates each field), by the
//! Docker engine's containerd. The node it runs on is made here: its
//! network namespace (hostNetwork), a bpffs directory and a cgroup for the
//! host's, the stand-in apiserver listening inside that namespace. Last,
//! manifests/cleanup/'s container removes what the agent left. Needs
//! root; fails loudly without it or without the image.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail, ensure};
use lb_fixtures::{Node, Slice, Svc, json};
use lb_tests::{
    agent::{KUBE_NODE, PinDir},
    apiserver::ApiServer,
    cgroup::{SOCK_HOOKS, attached_programs},
    container::{self, Container, PodEnv, Spec},
    http, netns,
    scenario::Bed,
    unique,
};
use serde_json::Value;

const TO: &str = "10.96.100.1:80";

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The archive `cargo xtask image` wrote.
fn archive() -> anyhow::Result<PathBuf> {
    let path = workspace().join(format!(
        "target/image/lb-agent-{}.tar",
        env!("CARGO_PKG_VERSION")
    ));
    ensure!(
        path.exists(),
        "{} is missing: run `cargo xtask image` (`cargo xtask test` does)",
        path.display()
    );
    Ok(path)
}

fn yaml_file(path: &str) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(workspace().join(path))?;
    yaml_serde::from_str(&text).with_context(|| format!("parse {path}"))
}

/// A network namespace standing for the node's: only loopback, no route
/// out. Removed on drop.
struct NodeNetns(String);

impl NodeNetns {
    fn new() -> anyhow::Result<Self> {
        let name = unique("img");
        netns::ip(&["netns", "add", &name])?;
        let ns = Self(name);
        netns::ip(&["-n", &ns.0, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
}

impl Drop for NodeNetns {
    fn drop(&mut self) {
        let _ = netns::ip(&["netns", "del", &self.0]);
    }
}

/// Images imported into our containerd namespace; removed on drop.
struct Imported(Vec<String>);

impl Drop for Imported {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = container::ctr(&["images", "rm", name]);
        }
    }
}

/// The probes' `httpGet` (path, port) of container `c`, by probe.
fn probes(c: &Value) -> anyhow::Result<BTreeMap<&'static str, (String, u16)>> {
    let mut out = BTreeMap::new();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        let path = get["path"]
            .as_str()
            .with_context(|| format!("{probe} path"))?;
        let port = get["port"]
            .as_u64()
            .with_context(|| format!("{probe} port"))?;
        out.insert(probe, (path.to_owned(), u16::try_from(port)?));
    }
    Ok(out)
}

/// Waits until every probe answers 200 inside `ns` (the kubelet probes
/// the node's network: hostNetwork).
fn until_probes_pass(
    ns: &str,
    probes: &BTreeMap<&'static str, (String, u16)>,
    agent: &Container,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut failing = Vec::new();
        for (probe, (path, port)) in probes {
            let addr = format!("127.0.0.1:{port}").parse()?;
            let status = netns::within(ns, || Ok(http::get(addr, path).map(|(s, _)| s)))?;
            if !matches!(status, Ok(200)) {
                failing.push(format!("{probe} {path}: {status:?}"));
            }
        }
        if failing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("probes failing: {failing:?}\nagent log:\n{}", agent.log());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_image_runs_as_the_daemonset_says_survives_a_restart_and_cleans_up() -> anyhow::Result<()> {
    lb_tests::require_root();
    let archive = archive()?;
    let daemonset = yaml_file("manifests/daemonset.yaml")?;
    let pod = &daemonset["spec"]["template"]["spec"];
    let agent_container = pod["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "lb-agent")
        .context("container lb-agent")?;
    let config = yaml_file("manifests/configmap.yaml")?;

    let mut bed = Bed::new()?;
    bed.backend("pa", "10.42.0.1".parse()?, &[8080], &[])?;
    bed.backend("pb", "10.42.0.2".parse()?, &[8080], &[])?;
    let node = NodeNetns::new()?;
    let api = ApiServer::start_in(&node.0)?;
    api.apply(json(Node::new(KUBE_NODE)))?;
    api.apply(json(
        Svc::new("default", "web")
            .cluster_ip("10.96.100.1")
            .port("http", 80, "TCP"),
    ))?;
    api.apply(json(
        Slice::new("default", "web-a")
            .service("web")
            .port("http", 8080, "TCP")
            .ready(&["10.42.0.1", "10.42.0.2"]),
    ))?;
    let port = api.url().rsplit(':').next().context("port")?.to_owned();

    // The host's directories, made for this test: bpffs, the cgroup (the
    // Bed's, which its client pods run in), the ConfigMap's file.
    let name = unique("img");
    let bpffs = Path::new("/sys/fs/bpf").join(&name);
    std::fs::create_dir(&bpffs)?;
    let pins = PinDir::new(&format!("{name}/lb-agent"));
    let config_dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&config_dir)?;
    std::fs::write(
        config_dir.join("config.conf"),
        config["data"]["config.conf"]
            .as_str()
            .context("config.conf")?,
    )?;
    let log = config_dir.join("agent.log");

    let env = PodEnv {
        node_name: KUBE_NODE,
        config_maps: [
            (("lb-agent-apiserver", "host"), "127.0.0.1".to_owned()),
            (("lb-agent-apiserver", "port"), port.clone()),
        ]
        .into(),
        volumes: [
            ("bpffs", bpffs.clone()),
            ("cgroup2", bed.cgroup.path().to_owned()),
            ("config", config_dir.clone()),
            ("netns", PathBuf::from("/run/netns")),
        ]
        .into(),
        netns: &node.0,
    };
    let imported = Imported(container::import(&archive)?);
    let image = imported
        .0
        .iter()
        .find(|n| n.ends_with("/lb-agent:dev"))
        .with_context(|| format!("lb-agent:dev not in {:?}", imported.0))?
        .clone();

    // The init container: bpffs is there already, so it only checks.
    let init = Spec::from_pod(pod, "mount-bpffs", &env)?;
    let said = container::run_to_end(&image, &format!("{name}-init"), &init)?;
    eprintln!("init container: {}", said.trim());

    let mut spec = Spec::from_pod(pod, "lb-agent", &env)?;
    // The stand-in apiserver speaks plain HTTP and checks no token: the
    // address comes as --master instead of the service account's https.
    spec.argv.push(format!("--master=http://127.0.0.1:{port}"));
    let agent = Container::start(&image, &name, &spec, &log)?;
    let probes = probes(agent_container)?;
    until_probes_pass(&node.0, &probes, &agent)?;

    let (caps, no_new_privs, seccomp) = agent.status()?;
    assert_eq!(
        caps, spec.capabilities,
        "the agent's effective capabilities"
    );
    assert_eq!(no_new_privs, spec.no_new_privs, "no_new_privs");
    assert_eq!(seccomp, spec.seccomp, "seccomp filter");
    assert_eq!(
        caps,
        ["BPF", "NET_ADMIN", "PERFMON", "SYS_ADMIN", "SYS_PTRACE"]
            .map(str::to_owned)
            .into(),
        "the DaemonSet's capabilities changed: update README and docs/operating.md too"
    );

    bed.until_reached(TO, &["pa", "pb"])
        .with_context(|| agent.log())?;

    // kubelet's restart: SIGTERM, a new task, under traffic.
    let before = agent.pid()?.context("the agent runs")?;
    let churn = bed.churn(TO)?;
    std::thread::sleep(Duration::from_millis(300));
    agent.restart(Duration::from_secs(30))?;
    until_probes_pass(&node.0, &probes, &agent)?;
    assert_ne!(agent.pid()?, Some(before), "the agent was not restarted");
    std::thread::sleep(Duration::from_millis(300));
    let r = churn.finish()?;
    eprintln!(
        "container restart under traffic: {} connections, {} failed",
        r.ok() + r.failed(),
        r.failed()
    );
    assert_eq!(r.failed(), 0, "{r:?}\nagent log:\n{}", agent.log());
    assert!(r.ok() > 50, "{r:?}");
    bed.until_reached(TO, &["pa", "pb"])?;

    // Removal as docs/operating.md says: the agent's DaemonSet goes, then
    // manifests/cleanup/'s runs its `lb-agent cleanup` container on the node.
    agent.stop(Duration::from_secs(30))?;
    let removal = yaml_file("manifests/cleanup/daemonset.yaml")?;
    let cleanup = Spec::from_pod(&removal["spec"]["template"]["spec"], "cleanup", &env)?;
    let said = container::run_to_end(&image, &format!("{name}-cleanup"), &cleanup)?;
    eprintln!("cleanup: {}", said.trim());
    let left: Vec<_> = std::fs::read_dir(pins.path())
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "cleanup left pins: {left:?}");
    for (hook, attach_type) in SOCK_HOOKS {
        let progs = attached_programs(bed.cgroup.path(), attach_type)?;
        assert!(
            progs.is_empty(),
            "cleanup left programs attached to the cgroup at {hook}: {progs:?}"
        );
    }
    let links = netns::exec(&node.0, &["ip", "-d", "link", "show"])?;
    assert!(!links.contains("xdp"), "cleanup left XDP: {links}");
    let filters = netns::exec(&node.0, &["tc", "filter", "show", "dev", "lo", "ingress"])?;
    assert!(
        filters.trim().is_empty(),
        "cleanup left tc filters: {filters}"
    );

    drop(agent);
    drop(pins);
    std::fs::remove_dir(&bpffs)?;
    let _ = std::fs::remove_dir_all(&config_dir);
    Ok(())
}

#[test]
fn the_image_says_its_version_commit_and_map_layout() -> anyhow::Result<()> {
    lb_tests::require_root();
    archive()?;
    // `docker run` in a network namespace of its own with only loopback.
    let out = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "lb-agent:dev",
            "--version",
        ])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "docker run lb-agent:dev --version: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(workspace())
        .output()?;
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_owned();
    let want = format!(
        "lb-agent {} (commit {commit}, map layout {})",
        env!("CARGO_PKG_VERSION"),
        lb_common::LAYOUT_VERSION
    );
    assert_eq!(text.trim(), want);
    // From scratch: the agent, its libraries and the CA bundle; no shell.
    let shell = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "/bin/sh",
        ])
        .args(["lb-agent:dev", "-c", "true"])
        .output()?;
    assert!(!shell.status.success(), "the image has a shell");
    Ok(())
}
