//! The workspace xtask serves: where it is, the commit checked out, where
//! cargo builds, and running cargo in it. Every command leans on these, so
//! they sit below all of them.

use std::process::Command;

use anyhow::{Context as _, bail};

use crate::cmd;

/// The repository's root.
pub(crate) fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .canonicalize()
        .expect("the workspace root exists")
}

/// The commit checked out (`git rev-parse --short=12 HEAD`).
pub(crate) fn commit() -> anyhow::Result<String> {
    cmd::run_cmd(
        Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(workspace_root()),
    )
}

/// Where cargo puts what it builds: `$CARGO_TARGET_DIR` (relative to the
/// workspace) if set, else the workspace's `target/`.
pub(crate) fn target_dir() -> std::path::PathBuf {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// Runs cargo from the workspace root; fails if it fails.
pub(crate) fn cargo(args: &[&str]) -> anyhow::Result<()> {
    // `+toolchain` needs rustup's proxy, not the cargo binary that runs us.
    let cargo = match args.first() {
        Some(a) if a.starts_with('+') => "cargo".into(),
        _ => std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let status = Command::new(cargo)
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}
