//! A pod template's container run as Kubernetes would run it, by the Docker
//! engine's own containerd (`ctr`, the runtime kubelet drives through CRI):
//! its command and args with `$(VAR)` expanded, its env, its volume mounts
//! and its security context translated field by field. A field the
//! translation does not know fails the test instead of being dropped.
//!
//! Docker's daemon here (20.10) rejects `CAP_BPF` and `CAP_PERFMON` by name,
//! so `docker run` cannot give a container the DaemonSet's capabilities;
//! containerd can.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

/// The Docker engine's containerd.
const ADDRESS: &str = "/run/docker/containerd/containerd.sock";
/// Our containerd namespace: nothing of Docker's is touched.
const NAMESPACE: &str = "lb-tests";

/// Linux capabilities by number (linux/capability.h).
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// `ctr --address … --namespace lb-tests args…`; its stdout.
pub fn ctr(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ctr")
        .args(["--address", ADDRESS, "--namespace", NAMESPACE])
        .args(args)
        .output()
        .context("running ctr (containerd's client, Debian's containerd package)")?;
    if !out.status.success() {
        bail!(
            "ctr {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Imports a `docker save` archive; returns the image names it holds.
pub fn import(archive: &Path) -> anyhow::Result<Vec<String>> {
    let path = archive.to_str().context("archive path")?;
    ctr(&["images", "import", "--snapshotter", "native", path])?;
    let names = ctr(&["images", "ls", "-q"])?;
    Ok(names.lines().map(str::to_owned).collect())
}

/// What the pod's environment gives a container: the node it runs on,
/// ConfigMap values, and a host path for each volume.
pub struct PodEnv<'a> {
    pub node_name: &'a str,
    /// (ConfigMap, key) → value.
    pub config_maps: BTreeMap<(&'a str, &'a str), String>,
    /// Volume name → the host path the test made for it.
    pub volumes: BTreeMap<&'a str, PathBuf>,
    /// The network namespace that stands for the host's (hostNetwork).
    pub netns: &'a str,
}

/// One container of a pod template, translated for `ctr run`.
#[derive(Debug)]
pub struct Spec {
    pub argv: Vec<String>,
    pub flags: Vec<String>,
    /// The effective capabilities the container must end up with.
    pub capabilities: BTreeSet<String>,
    /// `allowPrivilegeEscalation: false`.
    pub no_new_privs: bool,
    /// `seccompProfile: RuntimeDefault`.
    pub seccomp: bool,
}

impl Spec {
    /// `name` (a container, or an init container) of pod spec `pod`.
    pub fn from_pod(pod: &Value, name: &str, env: &PodEnv<'_>) -> anyhow::Result<Self> {
        let container = ["containers", "initContainers"]
            .iter()
            .filter_map(|k| pod.get(*k).and_then(Value::as_array))
            .flatten()
            .find(|c| c["name"] == name)
            .with_context(|| format!("no container {name} in the pod spec"))?;
        let mut flags = Vec::new();
        for (field, value) in pod.as_object().context("pod spec")? {
            match (field.as_str(), value) {
                ("hostNetwork", Value::Bool(true)) => {
                    flags.push(format!("--with-ns=network:/run/netns/{}", env.netns));
                }
                // The host's PID namespace is this test's.
                ("hostPID", Value::Bool(true)) => {
                    flags.push(format!("--with-ns=pid:/proc/{}/ns/pid", std::process::id()));
                }
                ("hostNetwork" | "hostPID", _) => bail!("{field}: {value} is not translated"),
                // The scheduler's and kubelet's business, not the runtime's.
                (
                    "serviceAccountName"
                    | "dnsPolicy"
                    | "priorityClassName"
                    | "tolerations"
                    | "nodeSelector"
                    | "containers"
                    | "initContainers"
                    | "volumes"
                    | "terminationGracePeriodSeconds"
                    | "automountServiceAccountToken",
                    _,
                ) => {}
                _ => bail!("pod spec field {field} is not translated"),
            }
        }

        let vars = environment(container, env)?;
        for (k, v) in &vars {
            flags.push(format!("--env={k}={v}"));
        }
        let mut argv = Vec::new();
        for key in ["command", "args"] {
            for arg in container[key].as_array().into_iter().flatten() {
                argv.push(expand(arg.as_str().context("argument")?, &vars)?);
            }
        }
        if argv.is_empty() {
            bail!("container {name} has no command: the image's entrypoint is not translated");
        }
        flags.extend(mounts(container, pod, env)?);
        let security = Security::translate(&container["securityContext"])?;
        flags.extend(security.flags);
        Ok(Self {
            argv,
            flags,
            capabilities: security.capabilities,
            no_new_privs: security.no_new_privs,
            seccomp: security.seccomp,
        })
    }
}

/// The container's env: literal values, the node's name, ConfigMap keys.
fn environment(container: &Value, env: &PodEnv<'_>) -> anyhow::Result<Vec<(String, String)>> {
    let mut vars = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().context("env name")?.to_owned();
        let value = if let Some(v) = var["value"].as_str() {
            v.to_owned()
        } else if var["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName" {
            env.node_name.to_owned()
        } else if let Some(r) = var["valueFrom"]["configMapKeyRef"].as_object() {
            let map = r["name"].as_str().context("configMapKeyRef name")?;
            let key = r["key"].as_str().context("configMapKeyRef key")?;
            match env.config_maps.get(&(map, key)) {
                Some(v) => v.clone(),
                // Kubernetes refuses to start the container.
                None if r.get("optional") != Some(&Value::Bool(true)) => {
                    bail!("env {name}: ConfigMap {map} has no key {key}")
                }
                None => continue,
            }
        } else {
            bail!("env {name}: {var} is not translated");
        };
        vars.push((name, value));
    }
    Ok(vars)
}

/// Kubernetes' `$(VAR)` expansion of command and args.
fn expand(arg: &str, vars: &[(String, String)]) -> anyhow::Result<String> {
    let mut out = arg.to_owned();
    for (k, v) in vars {
        out = out.replace(&format!("$({k})"), v);
    }
    if out.contains("$(") {
        bail!("{arg}: a variable the container's env does not define");
    }
    Ok(out)
}

/// `--mount` flags: each volumeMount bound from the host path the test made
/// for its volume, read-only and propagation as the manifest says.
fn mounts(container: &Value, pod: &Value, env: &PodEnv<'_>) -> anyhow::Result<Vec<String>> {
    let mut flags = Vec::new();
    for m in container["volumeMounts"].as_array().into_iter().flatten() {
        let volume = m["name"].as_str().context("volumeMount name")?;
        if !pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["name"] == volume)
        {
            bail!("volumeMount {volume}: the pod has no such volume");
        }
        let src = env
            .volumes
            .get(volume)
            .with_context(|| format!("volume {volume}: the test gave it no host path"))?;
        let dst = m["mountPath"].as_str().context("mountPath")?;
        let mut options = vec!["rbind"];
        options.push(if m["readOnly"] == Value::Bool(true) {
            "ro"
        } else {
            "rw"
        });
        match m["mountPropagation"].as_str() {
            None | Some("None") => options.push("rprivate"),
            Some("HostToContainer") => options.push("rslave"),
            Some("Bidirectional") => options.push("rshared"),
            Some(other) => bail!("mountPropagation {other} is not translated"),
        }
        flags.push(format!(
            "--mount=type=bind,src={},dst={dst},options={}",
            src.display(),
            options.join(":")
        ));
    }
    Ok(flags)
}

/// A container's securityContext, as runtime flags and what they must give.
struct Security {
    flags: Vec<String>,
    capabilities: BTreeSet<String>,
    no_new_privs: bool,
    seccomp: bool,
}

impl Security {
    fn translate(context: &Value) -> anyhow::Result<Self> {
        // ctr's defaults: containerd's default capabilities, no_new_privs,
        // no seccomp, no AppArmor profile, root.
        let mut s = Self {
            flags: Vec::new(),
            capabilities: [
                "CHOWN",
                "DAC_OVERRIDE",
                "FSETID",
                "FOWNER",
                "MKNOD",
                "NET_RAW",
                "SETGID",
                "SETUID",
                "SETFCAP",
                "SETPCAP",
                "NET_BIND_SERVICE",
                "SYS_CHROOT",
                "KILL",
                "AUDIT_WRITE",
            ]
            .map(str::to_owned)
            .into(),
            no_new_privs: true,
            seccomp: false,
        };
        let Some(fields) = context.as_object() else {
            return Ok(s);
        };
        for (field, value) in fields {
            match (field.as_str(), value) {
                ("privileged", Value::Bool(true)) => {
                    s.flags.push("--privileged".into());
                    s.capabilities = CAPABILITIES.map(str::to_owned).into();
                }
                ("privileged", Value::Bool(false)) => {}
                ("allowPrivilegeEscalation", Value::Bool(false)) => s.no_new_privs = true,
                ("readOnlyRootFilesystem", Value::Bool(true)) => {
                    s.flags.push("--read-only".into());
                }
                ("runAsUser", Value::Number(n)) if n.as_u64() == Some(0) => {}
                ("capabilities", caps) => s.capabilities(caps)?,
                ("seccompProfile", p) if p["type"] == "RuntimeDefault" => {
                    s.flags.push("--seccomp".into());
                    s.seccomp = true;
                }
                // ctr applies no AppArmor profile unless asked.
                ("appArmorProfile", p) if p["type"] == "Unconfined" => {}
                // Labels only apply where SELinux is enforcing; it is not here
                // (checked), so the runtime ignores them as containerd does.
                ("seLinuxOptions", _) if !Path::new("/sys/fs/selinux/enforce").exists() => {}
                _ => bail!("securityContext.{field}: {value} is not translated"),
            }
        }
        Ok(s)
    }

    fn capabilities(&mut self, caps: &Value) -> anyhow::Result<()> {
        let names = |key: &str| -> anyhow::Result<BTreeSet<String>> {
            caps[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let c = c.as_str().context("capability")?;
                    if c != "ALL" && !CAPABILITIES.contains(&c) {
                        bail!("unknown capability {c}");
                    }
                    Ok(c.to_owned())
                })
                .collect()
        };
        let add = names("add")?;
        let drop = names("drop")?;
        // Kubernetes drops, then adds; ctr adds, then drops: so what is
        // added is never dropped.
        let dropped: BTreeSet<String> = if drop.contains("ALL") {
            CAPABILITIES.map(str::to_owned).into()
        } else {
            drop
        };
        for cap in dropped.difference(&add) {
            self.flags.push(format!("--cap-drop=CAP_{cap}"));
            self.capabilities.remove(cap);
        }
        for cap in &add {
            self.flags.push(format!("--cap-add=CAP_{cap}"));
            self.capabilities.insert(cap.clone());
        }
        Ok(())
    }
}

/// A container run from a [`Spec`], removed (task, container) on drop.
pub struct Container {
    pub id: String,
    log: PathBuf,
}

impl Container {
    /// `ctr run -d`: starts `spec` from `image` as container `id`; its
    /// output goes to `log`.
    pub fn start(image: &str, id: &str, spec: &Spec, log: &Path) -> anyhow::Result<Self> {
        let uri = format!("--log-uri=file://{}", log.display());
        let mut args = vec!["run", "-d", "--snapshotter", "native", uri.as_str()];
        args.extend(spec.flags.iter().map(String::as_str));
        args.extend([image, id]);
        args.extend(spec.argv.iter().map(String::as_str));
        ctr(&args)?;
        Ok(Self {
            id: id.to_owned(),
            log: log.to_owned(),
        })
    }

    /// The task's PID on the host, if it runs.
    pub fn pid(&self) -> anyhow::Result<Option<u32>> {
        let tasks = ctr(&["task", "ls"])?;
        Ok(tasks.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(self.id.as_str()))
                .then(|| f.next().and_then(|p| p.parse().ok()))
                .flatten()
                .filter(|_| l.contains("RUNNING"))
        }))
    }

    /// SIGTERM, as kubelet stops a container; waits for the task to exit
    /// (up to `grace`, then SIGKILL) and removes it. The container stays.
    pub fn stop(&self, grace: Duration) -> anyhow::Result<()> {
        ctr(&["task", "kill", "--signal", "SIGTERM", &self.id])?;
        let deadline = Instant::now() + grace;
        while self.pid()?.is_some() {
            if Instant::now() > deadline {
                ctr(&["task", "kill", "--signal", "SIGKILL", &self.id])?;
                std::thread::sleep(Duration::from_millis(200));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ctr(&["task", "rm", "--force", &self.id])?;
        Ok(())
    }

    /// A new task of the same container: kubelet's restart.
    pub fn restart(&self, grace: Duration) -> anyhow::Result<()> {
        self.stop(grace)?;
        let uri = format!("--log-uri=file://{}", self.log.display());
        ctr(&["task", "start", "-d", &uri, &self.id])?;
        Ok(())
    }

    /// What the container wrote, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The running task's `/proc/<pid>/status` fields: effective
    /// capabilities (by name), NoNewPrivs and Seccomp mode.
    pub fn status(&self) -> anyhow::Result<(BTreeSet<String>, bool, bool)> {
        let pid = self.pid()?.context("the task is not running")?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .with_context(|| format!("{name} in /proc/{pid}/status"))
        };
        let bits = u64::from_str_radix(field("CapEff:")?, 16)?;
        let caps = CAPABILITIES
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, c)| (*c).to_owned())
            .collect();
        Ok((
            caps,
            field("NoNewPrivs:")? == "1",
            field("Seccomp:")? == "2",
        ))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = ctr(&["task", "kill", "--signal", "SIGKILL", &self.id]);
        std::thread::sleep(Duration::from_millis(100));
        let _ = ctr(&["task", "rm", "--force", &self.id]);
        let _ = ctr(&["containers", "rm", &self.id]);
    }
}

/// Runs `spec` to completion (`ctr run --rm`), as an init container or a
/// Job's container runs; fails with its output unless it exits 0.
pub fn run_to_end(image: &str, id: &str, spec: &Spec) -> anyhow::Result<String> {
    let mut args = vec!["run", "--rm", "--snapshotter", "native"];
    args.extend(spec.flags.iter().map(String::as_str));
    args.extend([image, id]);
    args.extend(spec.argv.iter().map(String::as_str));
    let out = ctr(&args);
    // A failed run can leave the container behind.
    if out.is_err() {
        let _ = ctr(&["task", "rm", "--force", id]);
        let _ = ctr(&["containers", "rm", id]);
    }
    out
}
