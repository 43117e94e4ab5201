//! `manifests/` as a cluster would get it: rendered by `kubectl kustomize`
//! and validated offline against Kubernetes' OpenAPI schemas by
//! `kubernetes-validate` (PyPI), which `cargo xtask setup` installs into
//! [`validator_venv`]. Neither tool is ever skipped: a missing one fails
//! with what to install.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// The oldest Kubernetes the manifests are for (the securityContext field
/// `appArmorProfile`), as the manifests' and docs' comments state it.
pub const MIN_KUBERNETES: &str = "1.30";

/// The oldest kernel the agent runs on (`bpf_set_retval`), as stated there.
pub const MIN_KERNEL: &str = "5.18";

/// The `kubernetes-validate` release setup installs: its schemas cover
/// Kubernetes 1.25 to 1.37.
pub const KUBERNETES_VALIDATE_VERSION: &str = "1.37.0";

/// The workspace's `manifests/` directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// The virtualenv `kubernetes-validate` lives in, outside the work tree
/// (`$HOME/.local/share/lb-agent/venv`).
pub fn validator_venv() -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is unset")?;
    Ok(Path::new(&home).join(".local/share/lb-agent/venv"))
}

/// The `kubernetes-validate` executable in [`validator_venv`].
pub fn validator() -> anyhow::Result<PathBuf> {
    Ok(validator_venv()?.join("bin/kubernetes-validate"))
}

/// `kubectl kustomize <dir>`: the YAML `kubectl apply -k <dir>` would send.
pub fn kustomize(dir: &Path) -> anyhow::Result<String> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run `kubectl kustomize` ({e}): kubectl is missing. It comes with this \
                 machine's image (Debian package `kubectl` from Google's Cloud SDK repository, \
                 which no registry reachable here offers; Debian's `kubernetes-client` 1.20 \
                 predates the kustomize these manifests need): install kubectl >= 1.27 \
                 (kustomize v5) on PATH"
            )
        })?;
    if !out.status.success() {
        bail!(
            "kubectl kustomize {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).context("kubectl kustomize printed non-UTF-8")
}

/// The documents of a multi-document YAML stream.
pub fn documents(yaml: &str) -> anyhow::Result<Vec<yaml_serde::Value>> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|doc| <yaml_serde::Value as serde::Deserialize>::deserialize(doc).map_err(Into::into))
        .collect()
}

/// [`kustomize`] then [`documents`].
pub fn render(dir: &Path) -> anyhow::Result<Vec<yaml_serde::Value>> {
    documents(&kustomize(dir)?)
}

/// Validates every object of `yaml` against Kubernetes `version`'s schemas,
/// strictly: a field the schema does not have is an error. `Ok(Err(report))`
/// when some object is invalid; `Err` when the validator cannot run.
pub fn validate(yaml: &str, version: &str) -> anyhow::Result<Result<(), String>> {
    let bin = validator()?;
    let mut child = Command::new(&bin)
        .args(["--strict", "--quiet", "--kubernetes-version", version, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run {} ({e}): run `cargo xtask setup`, which installs \
                 kubernetes-validate {KUBERNETES_VALIDATE_VERSION} from PyPI there",
                bin.display()
            )
        })?;
    child
        .stdin
        .take()
        .context("validator stdin")?
        .write_all(yaml.as_bytes())?;
    let out = child.wait_with_output()?;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(if out.status.success() {
        Ok(())
    } else {
        Err(report)
    })
}
