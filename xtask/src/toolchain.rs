//! The eBPF toolchain pinned in `ebpf-toolchain.toml`: a dated nightly
//! (with rust-src) linked as the rustup toolchain [`NAME`], and the
//! bpf-linker built against its libLLVM.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use serde::Deserialize;

/// The rustup toolchain every eBPF build uses (lb-agent/build.rs names it
/// too): a link to whichever installed toolchain is the pinned one.
pub(crate) const NAME: &str = "lb-nightly";

/// `ebpf-toolchain.toml`.
#[derive(Deserialize)]
pub(crate) struct Pin {
    pub(crate) nightly: Nightly,
    #[serde(rename = "bpf-linker")]
    pub(crate) bpf_linker: BpfLinker,
}

#[derive(Deserialize)]
pub(crate) struct Nightly {
    /// rustup's dated channel, e.g. `nightly-2026-05-20`.
    pub(crate) channel: String,
    /// What its `rustc -V` prints.
    pub(crate) rustc: String,
}

#[derive(Deserialize)]
pub(crate) struct BpfLinker {
    pub(crate) version: String,
}

impl Pin {
    pub(crate) fn read() -> anyhow::Result<Self> {
        let path = crate::workspace::workspace_root().join("ebpf-toolchain.toml");
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parse {}", path.display()))
    }
}

/// `rustc +toolchain -V`, or `None` if rustup has no such toolchain.
fn rustc_version(toolchain: &str) -> Option<String> {
    let out = Command::new("rustc")
        .arg(format!("+{toolchain}"))
        .arg("-V")
        // Asking must not download a toolchain.
        .env("RUSTUP_AUTO_INSTALL", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn sysroot(toolchain: &str) -> anyhow::Result<PathBuf> {
    Ok(crate::cmd::run_cmd(Command::new("rustc").args([
        &format!("+{toolchain}"),
        "--print",
        "sysroot",
    ]))?
    .into())
}

/// Makes [`NAME`] the pinned nightly, with rust-src; returns its sysroot.
pub(crate) fn ensure(pin: &Nightly) -> anyhow::Result<PathBuf> {
    if rustc_version(NAME).as_deref() == Some(pin.rustc.as_str()) {
        let root = sysroot(NAME)?;
        if has_rust_src(&root) {
            return Ok(root);
        }
    }
    // A preinstalled `nightly` that is the pinned build, or the dated
    // channel; failing both, rustup installs the dated channel.
    let source = match ["nightly", pin.channel.as_str()]
        .into_iter()
        .find(|t| rustc_version(t).as_deref() == Some(pin.rustc.as_str()))
    {
        Some(t) => t.to_owned(),
        None => {
            eprintln!(
                "setup: installing {} (pinned in ebpf-toolchain.toml)",
                pin.channel
            );
            crate::cmd::run_cmd(Command::new("rustup").args([
                "toolchain",
                "install",
                &pin.channel,
                "--profile",
                "minimal",
            ]))?;
            let got = rustc_version(&pin.channel);
            if got.as_deref() != Some(pin.rustc.as_str()) {
                bail!(
                    "{} is {got:?}, but ebpf-toolchain.toml pins {:?}",
                    pin.channel,
                    pin.rustc
                );
            }
            pin.channel.clone()
        }
    };
    let root = sysroot(&source)?;
    if !has_rust_src(&root) {
        eprintln!("setup: adding rust-src to {source}");
        crate::cmd::run_cmd(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            &source,
        ]))?;
    }
    eprintln!("setup: linking {source} ({}) as {NAME}", pin.rustc);
    // A link is replaced by removing it; the toolchain it names stays.
    let _ = Command::new("rustup")
        .args(["toolchain", "uninstall", NAME])
        .output();
    crate::cmd::run_cmd(
        Command::new("rustup")
            .args(["toolchain", "link", NAME])
            .arg(&root),
    )?;
    Ok(root)
}

fn has_rust_src(sysroot: &Path) -> bool {
    sysroot.join("lib/rustlib/src/rust/library/core").exists()
}

/// The installed bpf-linker's version, if any.
pub(crate) fn bpf_linker_version() -> Option<String> {
    let out = Command::new("bpf-linker").arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "bpf-linker 0.13.0"
    text.split_whitespace().nth(1).map(str::to_owned)
}
