//! The tools tests/tests/manifests.rs renders and validates `manifests/`
//! with: `kubectl` (from the machine image) and `kubernetes-validate`
//! (PyPI, in a virtualenv of its own). Part of `cargo xtask setup`:
//! idempotent, and silent when nothing is missing.

use std::process::Command;

use anyhow::{Context as _, bail};
use lb_tests::manifests::{KUBERNETES_VALIDATE_VERSION, validator, validator_venv};

/// Installs the pinned `kubernetes-validate` unless it is there; says so
/// when `kubectl` is missing, which no registry reachable here offers
/// (the manifests tests then fail, naming it).
pub(crate) fn ensure() -> anyhow::Result<()> {
    if !on_path("kubectl") {
        eprintln!(
            "setup: warning: kubectl is not on PATH and cannot be installed from the registries \
             here; tests/tests/manifests.rs will fail until it is (kubectl >= 1.27)"
        );
    }
    let bin = validator()?;
    let installed = Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == KUBERNETES_VALIDATE_VERSION);
    if installed {
        return Ok(());
    }
    let venv = validator_venv()?;
    eprintln!(
        "setup: installing kubernetes-validate {KUBERNETES_VALIDATE_VERSION} into {}",
        venv.display()
    );
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .context("running python3 -m venv")?;
    if !status.success() {
        bail!("python3 -m venv {} failed", venv.display());
    }
    let status = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!(
            "kubernetes-validate=={KUBERNETES_VALIDATE_VERSION}"
        ))
        .status()
        .context("running pip install kubernetes-validate")?;
    if !status.success() {
        bail!("pip install kubernetes-validate=={KUBERNETES_VALIDATE_VERSION} failed");
    }
    Ok(())
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}
