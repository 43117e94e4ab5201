//! `cargo xtask release`: what a release publishes, in `target/dist/`: the
//! agent binary, the image archive (`cargo xtask image`), a CycloneDX SBOM
//! and `SHA256SUMS`.
//!
//! The SBOM is cargo-cyclonedx's (CycloneDX's own generator) for the agent's
//! crates, with the Debian packages whose files the image carries added as
//! components.

use std::{fs, path::Path, process::Command};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::{cmd::run_cmd, image};

/// cargo-cyclonedx writes `<name>.json` into every workspace member's
/// directory; this name is only ever ours.
const SBOM_STEM: &str = "lb-agent-release-sbom";

pub(crate) fn run() -> anyhow::Result<()> {
    let image = image::build()?;
    let dist = crate::workspace::target_dir().join("dist");
    if dist.exists() {
        fs::remove_dir_all(&dist)?;
    }
    fs::create_dir_all(&dist)?;
    let version = image::version();
    let names = [
        format!("lb-agent-{version}-linux-{}", std::env::consts::ARCH),
        format!("lb-agent-{version}-image.tar"),
        format!("lb-agent-{version}.cdx.json"),
    ];
    fs::copy(&image.binary, dist.join(&names[0]))?;
    fs::copy(&image.archive, dist.join(&names[1]))?;
    let sbom = sbom(&image.host_files)?;
    fs::write(dist.join(&names[2]), serde_json::to_vec_pretty(&sbom)?)?;

    let sums = run_cmd(Command::new("sha256sum").args(&names).current_dir(&dist))?;
    fs::write(dist.join("SHA256SUMS"), format!("{sums}\n"))?;
    // Checked by another program than the one that wrote them.
    run_cmd(
        Command::new("sha256sum")
            .args(["--check", "--strict", "SHA256SUMS"])
            .current_dir(&dist),
    )?;
    eprintln!("xtask release: {}", dist.display());
    for name in names
        .iter()
        .chain(std::iter::once(&"SHA256SUMS".to_owned()))
    {
        let len = fs::metadata(dist.join(name))?.len();
        eprintln!("  {name} ({:.1} MiB)", len as f64 / (1024.0 * 1024.0));
    }
    Ok(())
}

/// The agent's crates (cargo-cyclonedx), plus the image's Debian packages.
fn sbom(host_files: &[std::path::PathBuf]) -> anyhow::Result<Value> {
    let root = crate::workspace::workspace_root();
    let status = Command::new("cargo")
        .args(["cyclonedx", "--quiet", "--manifest-path"])
        .arg(root.join("lb-agent/Cargo.toml"))
        .args([
            "--format",
            "json",
            "--spec-version",
            "1.5",
            "--no-build-deps",
        ])
        .args(["--override-filename", SBOM_STEM])
        .status()
        .context("cargo cyclonedx (run `cargo xtask setup`)")?;
    let written = workspace_members_with(&root, &format!("{SBOM_STEM}.json"))?;
    let agent = root.join("lb-agent").join(format!("{SBOM_STEM}.json"));
    let text = fs::read_to_string(&agent);
    for file in &written {
        fs::remove_file(file)?;
    }
    if !status.success() {
        bail!("cargo cyclonedx failed ({status})");
    }
    let mut bom: Value =
        serde_json::from_str(&text.with_context(|| format!("read {}", agent.display()))?)?;
    let components = bom
        .get_mut("components")
        .and_then(Value::as_array_mut)
        .context("the SBOM has no components")?;
    for needed in ["aya", "kube", "tokio"] {
        if !components.iter().any(|c| c["name"] == needed) {
            bail!("the SBOM lists no {needed}: cargo-cyclonedx missed the agent's crates");
        }
    }
    for (package, version) in debian_packages(host_files)? {
        components.push(json!({
            "type": "library",
            "bom-ref": format!("pkg:deb/debian/{package}@{version}"),
            "name": package,
            "version": version,
            "purl": format!("pkg:deb/debian/{package}@{version}?arch={}", dpkg_arch()?),
            "description": "Debian package; files of it are in the image",
        }));
    }
    Ok(bom)
}

/// `dir/*/name` for the repository's top-level directories.
fn workspace_members_with(root: &Path, name: &str) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root)? {
        let candidate = entry?.path().join(name);
        if candidate.is_file() {
            found.push(candidate);
        }
    }
    Ok(found)
}

/// The Debian package (and its version) owning each file, each package once.
fn debian_packages(files: &[std::path::PathBuf]) -> anyhow::Result<Vec<(String, String)>> {
    let mut packages = std::collections::BTreeMap::new();
    for file in files {
        let package = if file.as_path() == Path::new(image::CA_BUNDLE.0) {
            image::CA_BUNDLE.1.to_owned()
        } else {
            owning_package(file)?
        };
        if let std::collections::btree_map::Entry::Vacant(entry) = packages.entry(package) {
            let version =
                run_cmd(Command::new("dpkg-query").args(["-W", "-f", "${Version}", entry.key()]))?;
            entry.insert(version);
        }
    }
    Ok(packages.into_iter().collect())
}

/// The Debian package that installed `file`.
fn owning_package(file: &Path) -> anyhow::Result<String> {
    // dpkg knows merged-/usr files by either path; the real one first.
    let real = fs::canonicalize(file)?;
    let owner = [real.as_path(), file]
        .iter()
        .find_map(|p| run_cmd(Command::new("dpkg").arg("-S").arg(p)).ok())
        .with_context(|| format!("no Debian package owns {}", file.display()))?;
    // "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"
    Ok(owner
        .split(": ")
        .next()
        .and_then(|p| p.split(':').next())
        .context("dpkg -S output")?
        .to_owned())
}

fn dpkg_arch() -> anyhow::Result<String> {
    run_cmd(Command::new("dpkg").arg("--print-architecture"))
}
