//! `cargo xtask run`: build the image and deploy `manifests/` to a kind cluster.
//!
//! Every prerequisite is checked before anything is built or changed, and
//! every kubectl call names the cluster's context, so that a different
//! current context is never touched.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

const IMAGE: &str = "lb-agent:dev";

/// Ports kube-proxy and lb-agent both bind on the host network.
const SHARED_PORTS: &str = "10256 (healthz) and 10249 (metrics)";

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The kind cluster to deploy to.
    #[arg(long, default_value = "kind")]
    cluster: String,
    /// Delete kube-proxy's DaemonSet first. Its iptables rules stay on the
    /// nodes until flushed or rebooted.
    #[arg(long)]
    remove_kube_proxy: bool,
}

pub(crate) fn run(args: &RunArgs) -> anyhow::Result<()> {
    prerequisites()?;
    let clusters = output(Command::new("kind").arg("get").arg("clusters"))?;
    if !clusters.lines().any(|c| c.trim() == args.cluster) {
        bail!(
            "no kind cluster named {:?} (found: {}); create one with \
             `kind create cluster --name {}`, or pick one with --cluster",
            args.cluster,
            if clusters.trim().is_empty() {
                "none"
            } else {
                clusters.trim()
            },
            args.cluster
        );
    }
    let kubectl = Kubectl {
        context: format!("kind-{}", args.cluster),
    };
    let contexts = output(Command::new("kubectl").args(["config", "get-contexts", "-o", "name"]))?;
    if !contexts.lines().any(|c| c.trim() == kubectl.context) {
        bail!(
            "kubectl has no context {:?}; run `kind export kubeconfig --name {}`",
            kubectl.context,
            args.cluster
        );
    }
    // Said before the long build, where it would scroll away.
    if !args.remove_kube_proxy
        && kubectl.succeeds(&["-n", "kube-system", "get", "daemonset", "kube-proxy"])
    {
        eprintln!(
            "xtask run: warning: kube-proxy is running. It binds ports {SHARED_PORTS} on every \
             node as lb-agent does, so lb-agent will not become ready beside it. Re-run with \
             --remove-kube-proxy, or use a cluster created with `networking.kubeProxyMode: none`."
        );
    }
    let root = crate::workspace::workspace_root();

    // Built here, from scratch: no registry is needed.
    crate::image::build()?;
    step(Command::new("kind").args(["load", "docker-image", IMAGE, "--name", &args.cluster]))?;

    // Before the agent starts: kube-proxy holds the host ports it needs.
    if args.remove_kube_proxy {
        remove_kube_proxy(&kubectl, &args.cluster)?;
    }

    let overlay = apiserver_overlay(&kubectl, &root)?;
    step(kubectl.cmd(&["apply", "-k"]).arg(&overlay))?;
    step(&mut kubectl.cmd(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "daemonset/lb-agent",
        "--timeout=180s",
    ]))?;
    eprintln!(
        "xtask run: lb-agent is running on every node of {:?}; \
         `kubectl --context {} -n kube-system logs ds/lb-agent` shows its log.",
        args.cluster, kubectl.context
    );
    Ok(())
}

/// Reports everything that is missing at once, before any change.
fn prerequisites() -> anyhow::Result<()> {
    let mut missing = Vec::new();
    match Command::new("docker").arg("info").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => missing.push(format!(
            "a running Docker engine: `docker info` failed: {}",
            last_line(&out.stderr)
        )),
        Err(e) => missing.push(format!("docker: cannot run `docker info` ({e})")),
    }
    for (bin, hint) in [
        (
            "kind",
            "https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
        ),
        ("kubectl", "https://kubernetes.io/docs/tasks/tools/"),
    ] {
        if !on_path(bin) {
            missing.push(format!("{bin}: not on PATH (install: {hint})"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    bail!(
        "cannot deploy, missing prerequisites (nothing was changed):\n  - {}",
        missing.join("\n  - ")
    )
}

/// Deletes kube-proxy's DaemonSet and says how to remove what it leaves behind.
fn remove_kube_proxy(kubectl: &Kubectl, cluster: &str) -> anyhow::Result<()> {
    eprintln!(
        "xtask run: deleting daemonset/kube-proxy. To get it back, re-create it \
         (e.g. `kubeadm init phase addon kube-proxy` on the control plane, or recreate the \
         kind cluster)."
    );
    step(&mut kubectl.cmd(&[
        "-n",
        "kube-system",
        "delete",
        "daemonset",
        "kube-proxy",
        "--ignore-not-found",
        "--wait=true",
    ]))?;
    eprintln!(
        "xtask run: kube-proxy's iptables rules (KUBE-* chains) stay on every node until \
         flushed or rebooted, and keep translating ClusterIPs next to lb-agent. Flush them \
         with:\n  for n in $(kind get nodes --name {cluster}); do docker exec \"$n\" sh -c \
         'iptables-save | grep -v KUBE | iptables-restore'; done"
    );
    Ok(())
}

/// Writes a kustomization over `manifests/` that fills ConfigMap
/// `lb-agent-apiserver` (`manifests/apiserver.yaml`, empty there) with the
/// kind apiserver's real address, so the agent does not depend on the
/// `kubernetes` ClusterIP being translated already; returns its directory.
fn apiserver_overlay(kubectl: &Kubectl, root: &Path) -> anyhow::Result<PathBuf> {
    let endpoint = kubectl.output(&[
        "-n",
        "default",
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=kubernetes",
        "-o",
        "jsonpath={.items[0].endpoints[0].addresses[0]} {.items[0].ports[0].port}",
    ])?;
    let (host, port) = endpoint
        .split_once(' ')
        .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        .with_context(|| {
            format!("no apiserver endpoint in the `kubernetes` Service: {endpoint:?}")
        })?;
    eprintln!("xtask run: apiserver for lb-agent: {host}:{port}");
    // Inside the workspace: kustomize takes a base by relative path.
    let dir = root.join("target/xtask-run");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join("kustomization.yaml");
    std::fs::write(&file, apiserver_kustomization(host, port))
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(dir)
}

/// A kustomization of `../../manifests` (from `target/xtask-run/`) with the
/// apiserver ConfigMap's two values replaced. `replace` fails if
/// `manifests/apiserver.yaml` ever loses a key, rather than adding one.
fn apiserver_kustomization(host: &str, port: &str) -> String {
    format!(
        "# Written by `cargo xtask run`.\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n\
         resources:\n  - ../../manifests\n\
         patches:\n\
         \x20 - target: {{kind: ConfigMap, name: lb-agent-apiserver}}\n\
         \x20   patch: |\n\
         \x20     - {{op: replace, path: /data/host, value: \"{host}\"}}\n\
         \x20     - {{op: replace, path: /data/port, value: \"{port}\"}}\n"
    )
}

struct Kubectl {
    context: String,
}

impl Kubectl {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--context").arg(&self.context).args(args);
        cmd
    }

    fn output(&self, args: &[&str]) -> anyhow::Result<String> {
        output(&mut self.cmd(args))
    }

    fn succeeds(&self, args: &[&str]) -> bool {
        self.cmd(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

/// Runs a step with its output shown; fails if it fails.
fn step(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("xtask run: {}", shown(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("running {}", shown(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", shown(cmd));
    }
    Ok(())
}

/// Runs a query; returns its trimmed stdout.
fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {}", shown(cmd)))?;
    if !out.status.success() {
        bail!("{} failed: {}", shown(cmd), last_line(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn shown(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned()
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| is_executable(&d.join(bin))))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    /// What `cargo xtask run` applies is `manifests/` with the apiserver's
    /// address in its one ConfigMap `lb-agent-apiserver`: not a second copy,
    /// and not the empty default.
    #[test]
    fn the_overlay_fills_in_the_manifests_own_apiserver_configmap() -> anyhow::Result<()> {
        // The same depth as target/xtask-run, which the relative base needs.
        let dir = crate::workspace::workspace_root().join("target/xtask-run-test");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("kustomization.yaml"),
            super::apiserver_kustomization("172.18.0.2", "6443"),
        )?;
        let overlay = lb_tests::manifests::render(&dir)?;
        let base = lb_tests::manifests::render(&lb_tests::manifests::dir())?;
        assert_eq!(overlay.len(), base.len(), "the same objects as manifests/");
        let maps: Vec<_> = overlay
            .iter()
            .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "lb-agent-apiserver")
            .collect();
        assert_eq!(maps.len(), 1, "{maps:?}");
        assert_eq!(maps[0]["data"]["host"], "172.18.0.2");
        assert_eq!(maps[0]["data"]["port"], "6443");
        Ok(())
    }
}
