//! Builds `lb-ebpf` for the BPF target and places the object in `OUT_DIR`,
//! and names the commit the agent is built from (`LB_AGENT_COMMIT`, for
//! `lb-agent --version`).

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

/// The rustup toolchain `cargo xtask setup` links to the nightly pinned in
/// ebpf-toolchain.toml (xtask's `toolchain::NAME`).
const EBPF_TOOLCHAIN: &str = "lb-nightly";

fn main() -> anyhow::Result<()> {
    commit();
    let ebpf_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lb-ebpf");
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    // lb-common is compiled into the eBPF object too.
    println!("cargo:rerun-if-changed=../lb-common/src");
    aya_build::build_ebpf(
        [Package {
            name: "lb-ebpf",
            root_dir,
            ..Package::default()
        }],
        Toolchain::Custom(EBPF_TOOLCHAIN),
    )
    .context(
        "building lb-ebpf (run `cargo xtask setup` if the lb-nightly toolchain, bpf-linker \
         or rust-src is missing)",
    )
}

/// `LB_AGENT_COMMIT`: the environment's value if set (a build from a source
/// archive), else `git rev-parse --short=12 HEAD`, else `unknown`.
fn commit() {
    println!("cargo:rerun-if-env-changed=LB_AGENT_COMMIT");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // HEAD names the branch; the branch's ref file (or packed-refs) moves on
    // each commit.
    // (A missing file would rerun this script, and rebuild the agent, on
    // every build.)
    for file in [".git/HEAD", ".git/packed-refs"] {
        let path = root.join(file);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    if let Ok(head) = std::fs::read_to_string(root.join(".git/HEAD"))
        && let Some(branch) = head.trim().strip_prefix("ref: ")
    {
        println!(
            "cargo:rerun-if-changed={}",
            root.join(".git").join(branch).display()
        );
    }
    let commit = std::env::var("LB_AGENT_COMMIT").ok().or_else(|| {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(&root)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    println!(
        "cargo:rustc-env=LB_AGENT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
