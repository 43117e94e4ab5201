//! `cargo xtask setup`: idempotent, and silent when nothing is missing.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

const APT_PACKAGES: [(&str, &str); 5] = [
    ("ip", "iproute2"),
    ("bpftool", "bpftool"),
    ("iptables", "iptables"),
    ("nft", "nftables"),
    // The bench empties the kube-proxy modes' conntrack tables between runs.
    ("conntrack", "conntrack"),
];

pub(crate) fn run() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("setup needs root (apt-get, mount, BPF); run as root");
    }
    rust_src()?;
    bpf_linker()?;
    cargo_fuzz()?;
    apt_packages()?;
    bpffs()?;
    lb_tests::cgroup::cgroup2_root()?;
    Ok(())
}

fn run_cmd(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    if Command::new("rustc")
        .args(["+nightly", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(run_cmd(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?.into());
    }
    eprintln!("setup: installing the nightly toolchain");
    run_cmd(Command::new("rustup").args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
    ]))?;
    Ok(run_cmd(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?.into())
}

fn rust_src() -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    if sysroot.join("lib/rustlib/src/rust/library/core").exists() {
        return Ok(());
    }
    eprintln!("setup: adding rust-src to nightly");
    run_cmd(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "--toolchain",
        "nightly",
    ]))?;
    Ok(())
}

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// No prebuilt bpf-linker can be fetched from the package registries, so build it against the
/// nightly toolchain's own libLLVM.
fn bpf_linker() -> anyhow::Result<()> {
    if on_path("bpf-linker") {
        return Ok(());
    }
    let lib_dir = nightly_sysroot()?.join("lib");
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
        "setup: building bpf-linker against {} (about a minute)",
        llvm.display()
    );
    let status = Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--no-default-features",
            "--features",
        ])
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
