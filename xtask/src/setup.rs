//! `cargo xtask setup`: idempotent, and silent when nothing is missing.

use std::{fs, path::Path, process::Command};

use anyhow::{Context as _, bail};

use crate::{cmd::run_cmd, toolchain};

const APT_PACKAGES: [(&str, &str); 7] = [
    ("ip", "iproute2"),
    ("bpftool", "bpftool"),
    ("iptables", "iptables"),
    ("nft", "nftables"),
    // The bench empties the kube-proxy modes' conntrack tables between runs.
    ("conntrack", "conntrack"),
    // `promtool check rules` / `test rules` on monitoring/ (tests/tests/monitoring.rs).
    ("promtool", "prometheus"),
    // The image test runs the DaemonSet's containers through the Docker
    // engine's containerd (tests/tests/image.rs).
    ("ctr", "containerd"),
];

pub(crate) fn run() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("setup needs root (apt-get, mount, BPF); run as root");
    }
    let pin = toolchain::Pin::read()?;
    let sysroot = toolchain::ensure(&pin.nightly)?;
    bpf_linker(&sysroot, &pin.bpf_linker.version)?;
    cargo_cyclonedx()?;
    cargo_fuzz()?;
    apt_packages()?;
    crate::validator::ensure()?;
    bpffs()?;
    lb_tests::cgroup::cgroup2_root()?;
    Ok(())
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// No prebuilt bpf-linker can be fetched from the package registries, so build the pinned
/// version against the pinned nightly's own libLLVM.
fn bpf_linker(sysroot: &Path, version: &str) -> anyhow::Result<()> {
    if toolchain::bpf_linker_version().as_deref() == Some(version) {
        return Ok(());
    }
    let lib_dir = sysroot.join("lib");
    let llvm = fs::read_dir(&lib_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so."))
        })
        .with_context(|| format!("no libLLVM.so.* in {}", lib_dir.display()))?;
    let name = llvm
        .file_name()
        .and_then(|n| n.to_str())
        .context("libLLVM name")?;
    // libLLVM.so.22.1-rust-... -> 22
    let major = name
        .trim_start_matches("libLLVM.so.")
        .split(['.', '-'])
        .next()
        .context("libLLVM version")?;
    // Outside target/ so that `cargo clean` cannot break the linker.
    let home = std::env::var_os("HOME").context("HOME unset")?;
    let prefix = Path::new(&home).join(".local/share/bpf-linker-llvm");
    let prefix_lib = prefix.join("lib");
    fs::create_dir_all(&prefix_lib)?;
    for link in [prefix_lib.join("libLLVM.so"), prefix_lib.join(name)] {
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&llvm, &link)?;
    }
    eprintln!(
        "setup: building bpf-linker {version} against {} (about a minute)",
        llvm.display()
    );
    let status = Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--locked",
            "--force",
            "--version",
            version,
        ])
        .args(["--no-default-features", "--features"])
        .arg(format!("llvm-{major}"))
        .env("LLVM_PREFIX", &prefix)
        .status()?;
    if !status.success() {
        bail!("cargo install bpf-linker failed");
    }
    Ok(())
}

/// cargo-fuzz, for `cargo xtask fuzz` (it builds with the nightly
/// toolchain that `nightly_sysroot` makes sure of).
fn cargo_fuzz() -> anyhow::Result<()> {
    if Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(());
    }
    eprintln!("setup: installing cargo-fuzz (about a minute)");
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz", "--locked"])
        .status()?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed");
    }
    Ok(())
}

/// The version of cargo-cyclonedx `cargo xtask release` makes the SBOM with.
const CARGO_CYCLONEDX: &str = "0.5.9";

/// cargo-cyclonedx, CycloneDX's own SBOM generator for cargo, for
/// `cargo xtask release`.
fn cargo_cyclonedx() -> anyhow::Result<()> {
    let installed = Command::new("cargo")
        .args(["cyclonedx", "--version"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(CARGO_CYCLONEDX));
    if installed {
        return Ok(());
    }
    eprintln!("setup: installing cargo-cyclonedx {CARGO_CYCLONEDX} (about two minutes)");
    let status = Command::new("cargo")
        .args(["install", "cargo-cyclonedx", "--locked", "--force"])
        .args(["--version", CARGO_CYCLONEDX])
        .status()?;
    if !status.success() {
        bail!("cargo install cargo-cyclonedx failed");
    }
    Ok(())
}

fn apt_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .filter(|(bin, _)| !on_path(bin) && !Path::new("/usr/sbin").join(bin).exists())
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: apt-get install {}", missing.join(" "));
    run_cmd(Command::new("apt-get").args(["update", "-qq"]))?;
    run_cmd(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    Ok(())
}

fn bpffs() -> anyhow::Result<()> {
    let mounts = fs::read_to_string("/proc/mounts")?;
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf") && l.contains(" bpf "))
    {
        return Ok(());
    }
    eprintln!("setup: mounting bpffs on /sys/fs/bpf");
    fs::create_dir_all("/sys/fs/bpf")?;
    run_cmd(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))?;
    Ok(())
}
