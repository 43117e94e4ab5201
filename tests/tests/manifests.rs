//! `manifests/` and `manifests/cleanup/` as `kubectl apply -k` would send
//! them: they render, every object passes Kubernetes' schema strictly at
//! the oldest version they claim, and what an operator relies on is there
//! (the required apiserver ConfigMap, Linux nodes only, the cleanup
//! matching the agent). Unprivileged; needs `kubectl` and what `cargo
//! xtask setup` installs, and fails naming whichever is missing.

use std::{collections::BTreeSet, path::Path, process::Command};

use lb_tests::manifests::{self, MIN_KERNEL, MIN_KUBERNETES};
use yaml_serde::Value;

fn agent() -> anyhow::Result<Vec<Value>> {
    manifests::render(&manifests::dir())
}

fn cleanup() -> anyhow::Result<Vec<Value>> {
    manifests::render(&manifests::dir().join("cleanup"))
}

/// The one object of `kind` named `name`.
fn object<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<_> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{kind} {name}: {found:?}");
    found[0]
}

/// The container (or init container) `name` of a workload.
fn container<'a>(workload: &'a Value, name: &str) -> &'a Value {
    let spec = &workload["spec"]["template"]["spec"];
    let found: Vec<_> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[*k].as_sequence().into_iter().flatten())
        .filter(|c| c["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "container {name}: {found:?}");
    found[0]
}

/// Every container of every pod template in `docs`.
fn all_containers(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .flat_map(|d| {
            let spec = &d["spec"]["template"]["spec"];
            ["initContainers", "containers"]
                .into_iter()
                .flat_map(move |k| spec[k].as_sequence().into_iter().flatten())
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .into_iter()
        .flatten()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

/// A container's whole command line: `command` then `args`.
fn command_line(c: &Value) -> Vec<String> {
    let mut line = strings(&c["command"]);
    line.extend(strings(&c["args"]));
    line
}

/// The value of `--flag=` on a command line.
fn flag<'a>(line: &'a [String], flag: &str) -> &'a str {
    let prefix = format!("{flag}=");
    let found: Vec<_> = line
        .iter()
        .filter_map(|a| a.strip_prefix(&prefix))
        .collect();
    assert_eq!(found.len(), 1, "{flag} in {line:?}");
    found[0]
}

/// Where a container mounts `volume`.
fn mount_path(c: &Value, volume: &str) -> Option<String> {
    c["volumeMounts"]
        .as_sequence()?
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str())
        .map(str::to_owned)
}

/// The host directory a workload's `volume` is.
fn host_path(workload: &Value, volume: &str) -> Option<String> {
    workload["spec"]["template"]["spec"]["volumes"]
        .as_sequence()?
        .iter()
        .find(|v| v["name"] == volume)
        .and_then(|v| v["hostPath"]["path"].as_str())
        .map(str::to_owned)
}

/// The capabilities a container adds, after dropping ALL.
fn added_capabilities(c: &Value) -> BTreeSet<String> {
    let caps = &c["securityContext"]["capabilities"];
    assert_eq!(
        strings(&caps["drop"]),
        ["ALL"],
        "{}",
        c["name"].as_str().unwrap_or("?")
    );
    strings(&caps["add"]).into_iter().collect()
}

#[test]
fn the_apiserver_address_is_a_required_part_of_the_kustomization() -> anyhow::Result<()> {
    let docs = agent()?;
    let cm = object(&docs, "ConfigMap", "lb-agent-apiserver");
    assert_eq!(cm["metadata"]["namespace"], "kube-system");
    // Empty until the operator sets it: the agent then refuses to start
    // (lb_agent::source::apiserver) instead of using the ClusterIP.
    assert_eq!(cm["data"]["host"], "");
    assert!(
        cm["data"]["port"]
            .as_str()
            .is_some_and(|p| p.parse::<u16>().is_ok()),
        "{cm:?}"
    );

    let ds = object(&docs, "DaemonSet", "lb-agent");
    let env = &container(ds, "lb-agent")["env"];
    for (var, key) in [
        ("KUBERNETES_SERVICE_HOST", "host"),
        ("KUBERNETES_SERVICE_PORT", "port"),
    ] {
        let entry = env
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == var)
            .unwrap_or_else(|| panic!("no {var} in {env:?}"));
        let from = &entry["valueFrom"]["configMapKeyRef"];
        assert_eq!(from["name"], "lb-agent-apiserver", "{var}");
        assert_eq!(from["key"], key, "{var}");
        assert!(
            from["optional"].is_null() || from["optional"] == false,
            "{var} must be required: {from:?}"
        );
    }
    Ok(())
}

#[test]
fn the_agent_runs_on_every_linux_node_and_nowhere_else() -> anyhow::Result<()> {
    for (docs, name) in [(agent()?, "lb-agent"), (cleanup()?, "lb-agent-cleanup")] {
        let spec = &object(&docs, "DaemonSet", name)["spec"]["template"]["spec"];
        assert_eq!(spec["nodeSelector"]["kubernetes.io/os"], "linux", "{name}");
        let tolerations = spec["tolerations"]
            .as_sequence()
            .cloned()
            .unwrap_or_default();
        assert!(
            tolerations
                .iter()
                .any(|t| t["operator"] == "Exists" && t["key"].is_null() && t["effect"].is_null()),
            "{name} must tolerate every taint: {tolerations:?}"
        );
        assert_eq!(spec["hostNetwork"], true, "{name}");
    }
    Ok(())
}

#[test]
fn every_object_passes_the_schema_of_the_oldest_kubernetes_they_claim() -> anyhow::Result<()> {
    for dir in [manifests::dir(), manifests::dir().join("cleanup")] {
        let yaml = manifests::kustomize(&dir)?;
        if let Err(report) = manifests::validate(&yaml, MIN_KUBERNETES)? {
            panic!(
                "{} against Kubernetes {MIN_KUBERNETES}:\n{report}",
                dir.display()
            );
        }
    }
    Ok(())
}

/// 1.30 is the minimum because of `appArmorProfile`: the version before
/// does not know the field, so the claim is neither too low nor too high,
/// and the validator does reject unknown fields.
#[test]
fn the_kubernetes_before_the_claimed_minimum_rejects_them() -> anyhow::Result<()> {
    let (major, minor) = MIN_KUBERNETES.split_once('.').expect("MAJOR.MINOR");
    let before = format!("{major}.{}", minor.parse::<u32>()? - 1);
    for dir in [manifests::dir(), manifests::dir().join("cleanup")] {
        let yaml = manifests::kustomize(&dir)?;
        let report = manifests::validate(&yaml, &before)?
            .expect_err(&format!("{} passes against {before}", dir.display()));
        assert!(report.contains("appArmorProfile"), "{report}");
    }
    Ok(())
}

#[test]
fn the_stated_minimums_are_the_validated_ones() -> anyhow::Result<()> {
    let root = manifests::dir().join("..");
    for file in [
        "manifests/kustomization.yaml",
        "manifests/daemonset.yaml",
        "manifests/cleanup/kustomization.yaml",
        "manifests/cleanup/daemonset.yaml",
        "docs/operating.md",
    ] {
        let text = std::fs::read_to_string(root.join(file))?;
        for claim in [
            format!("Kubernetes >= {MIN_KUBERNETES}"),
            format!("Linux >= {MIN_KERNEL}"),
        ] {
            assert!(text.contains(&claim), "{file} does not say {claim:?}");
        }
    }
    Ok(())
}

#[test]
fn the_cleanup_undoes_what_the_agent_pinned_with_the_same_image_paths_and_flags()
-> anyhow::Result<()> {
    let (agent_docs, cleanup_docs) = (agent()?, cleanup()?);
    assert_eq!(cleanup_docs.len(), 1, "the cleanup is one DaemonSet");
    let ds = object(&agent_docs, "DaemonSet", "lb-agent");
    let cds = object(&cleanup_docs, "DaemonSet", "lb-agent-cleanup");
    let run = command_line(container(ds, "lb-agent"));
    let clean = container(cds, "cleanup");
    assert_eq!(
        command_line(clean),
        [
            "lb-agent".to_owned(),
            "cleanup".to_owned(),
            format!("--bpffs-dir={}", flag(&run, "--bpffs-dir")),
            format!("--cgroup-path={}", flag(&run, "--cgroup-path")),
        ]
    );
    // The directories those flags name are the host's, mounted the same way.
    for (volume, dir) in [
        ("bpffs", flag(&run, "--bpffs-dir")),
        ("cgroup2", flag(&run, "--cgroup-path")),
    ] {
        let at = mount_path(container(ds, "lb-agent"), volume).expect(volume);
        assert!(
            Path::new(dir).starts_with(&at),
            "{dir} is not on {volume} ({at})"
        );
        assert_eq!(mount_path(clean, volume).as_ref(), Some(&at), "{volume}");
        let host = host_path(ds, volume);
        assert!(host.is_some(), "the agent's {volume} is no hostPath");
        assert_eq!(host_path(cds, volume), host, "{volume}");
    }
    // One image for both, set in manifests/image/.
    let images: BTreeSet<_> = all_containers(&agent_docs)
        .into_iter()
        .chain(all_containers(&cleanup_docs))
        .map(|c| c["image"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(images.len(), 1, "{images:?}");
    // Never the agent's own pods' selector: deleting one leaves the other.
    assert_ne!(
        cds["spec"]["selector"], ds["spec"]["selector"],
        "the cleanup must not select the agent's pods"
    );
    Ok(())
}

/// The image has nothing but `lb-agent`, so every container runs it, with
/// a command line the built binary accepts (clap reads every flag before
/// `--help`, and fails on one it does not know).
#[test]
fn every_container_runs_a_command_line_the_agent_accepts() -> anyhow::Result<()> {
    let bin = lb_tests::agent::agent_bin();
    for c in all_containers(&agent()?)
        .into_iter()
        .chain(all_containers(&cleanup()?))
    {
        let line = command_line(c);
        assert_eq!(
            line.first().map(String::as_str),
            Some("lb-agent"),
            "{line:?}"
        );
        let out = Command::new(&bin).args(&line[1..]).arg("--help").output()?;
        assert!(
            out.status.success(),
            "`{}`: {}",
            line.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The security contexts grant exactly what docs/operating.md lists and
/// justifies, container by container.
#[test]
fn the_capabilities_are_the_ones_docs_operating_md_justifies() -> anyhow::Result<()> {
    let doc = std::fs::read_to_string(manifests::dir().join("../docs/operating.md"))?;
    let (for_agent, for_cleanup) = documented_capabilities(&doc);
    let agent_docs = agent()?;
    let cleanup_docs = cleanup()?;
    let ds = object(&agent_docs, "DaemonSet", "lb-agent");
    let cds = object(&cleanup_docs, "DaemonSet", "lb-agent-cleanup");
    assert_eq!(added_capabilities(container(ds, "lb-agent")), for_agent);
    assert_eq!(added_capabilities(container(cds, "cleanup")), for_cleanup);
    assert_eq!(added_capabilities(container(cds, "done")), BTreeSet::new());
    // The only privileged container is the one that mounts bpffs.
    for (docs, name) in [
        (&agent_docs, "lb-agent"),
        (&cleanup_docs, "lb-agent-cleanup"),
    ] {
        for c in all_containers(std::slice::from_ref(object(docs, "DaemonSet", name))) {
            let privileged = c["securityContext"]["privileged"] == true;
            assert_eq!(
                privileged,
                c["name"] == "mount-bpffs",
                "{name}/{:?}",
                c["name"]
            );
        }
    }
    Ok(())
}

/// The table under "## Privileges": rows `` | `CAP` | yes | no | why | ``,
/// the second column the agent's, the third the cleanup's.
fn documented_capabilities(doc: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Privileges"))
        .expect("docs/operating.md has a section ## Privileges");
    let (mut agent, mut cleanup) = (BTreeSet::new(), BTreeSet::new());
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<_> = row.split('|').map(str::trim).collect();
        let cap = cells[1].trim_matches('`').to_owned();
        for (cell, set) in [(cells[2], &mut agent), (cells[3], &mut cleanup)] {
            match cell {
                "yes" => {
                    set.insert(cap.clone());
                }
                "no" => {}
                other => panic!("{cap}: expected yes or no, found {other:?}"),
            }
        }
    }
    assert!(!agent.is_empty(), "no capability rows under ## Privileges");
    (agent, cleanup)
}
