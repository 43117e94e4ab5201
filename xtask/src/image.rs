//! `cargo xtask image`: the agent's container image, made without a
//! registry. The agent is built here with the pinned toolchain
//! (`--release --locked`); the image holds it, the shared libraries `ldd`
//! names for it (Debian's, from this machine) and the CA bundle, nothing
//! else: no shell, no package manager. `docker import` turns that tree into
//! an image; `docker save` writes the archive `kind load image-archive` and
//! `ctr images import` take.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::cmd::run_cmd;

/// The repository both tags go to.
pub(crate) const REPOSITORY: &str = "lb-agent";

/// Where the agent lives in the image; on PATH, as the manifests'
/// `command: [lb-agent]` needs.
const AGENT_PATH: &str = "usr/local/bin/lb-agent";

/// Mount points the DaemonSet's volumes use, made in the image because its
/// root file system is read-only.
const MOUNT_POINTS: [&str; 5] = [
    "sys/fs/bpf",
    "run/lb-agent/cgroupv2",
    "etc/lb-agent",
    "var/run/netns",
    "tmp",
];

/// The CA bundle, and the Debian package whose script generates it (dpkg
/// owns no generated file).
pub(crate) const CA_BUNDLE: (&str, &str) =
    ("/etc/ssl/certs/ca-certificates.crt", "ca-certificates");

/// What `build` made.
pub(crate) struct Image {
    /// The release binary inside it.
    pub(crate) binary: PathBuf,
    /// `docker save` of both tags.
    pub(crate) archive: PathBuf,
    /// The files copied from this machine besides the agent (libraries, CA
    /// bundle), for the SBOM.
    pub(crate) host_files: Vec<PathBuf>,
}

pub(crate) fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

pub(crate) fn build() -> anyhow::Result<Image> {
    docker_ready()?;
    crate::workspace::cargo(&["build", "--release", "--locked", "--package", "lb-agent"])?;
    let binary = crate::workspace::target_dir().join("release/lb-agent");
    let out = crate::workspace::target_dir().join("image");
    let rootfs = out.join("rootfs");
    if rootfs.exists() {
        fs::remove_dir_all(&rootfs).with_context(|| format!("remove {}", rootfs.display()))?;
    }
    for dir in MOUNT_POINTS {
        fs::create_dir_all(rootfs.join(dir))?;
    }
    copy_into(&rootfs, &binary, Path::new(AGENT_PATH))?;
    let mut host_files = libraries(&binary)?;
    // For a kubeconfig whose apiserver has a certificate from a public CA
    // (in-cluster, the service account's ca.crt is used).
    host_files.push(PathBuf::from(CA_BUNDLE.0));
    for file in &host_files {
        copy_into(&rootfs, file, file.strip_prefix("/")?)?;
    }

    // Same tree, same tar: sorted, owned by root, dated at the epoch.
    let layer = out.join("rootfs.tar");
    run_cmd(
        Command::new("tar")
            .args([
                "--sort=name",
                "--mtime=@0",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "-C",
            ])
            .arg(&rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
    )?;

    let tag = format!("{REPOSITORY}:{}", version());
    let commit = crate::workspace::commit()?;
    let changes = [
        r#"ENTRYPOINT ["/usr/local/bin/lb-agent"]"#.to_owned(),
        r#"CMD ["run"]"#.to_owned(),
        "ENV PATH=/usr/local/bin:/usr/bin:/bin".to_owned(),
        format!("LABEL org.opencontainers.image.version={}", version()),
        format!("LABEL org.opencontainers.image.revision={commit}"),
        "LABEL org.opencontainers.image.licenses=Apache-2.0".to_owned(),
        "LABEL org.opencontainers.image.title=lb-agent".to_owned(),
    ];
    let mut import = Command::new("docker");
    import.arg("import");
    for change in &changes {
        import.arg("--change").arg(change);
    }
    run_cmd(import.arg(&layer).arg(&tag))?;
    let dev = format!("{REPOSITORY}:dev");
    run_cmd(Command::new("docker").args(["tag", &tag, &dev]))?;

    let archive = out.join(format!("{REPOSITORY}-{}.tar", version()));
    run_cmd(
        Command::new("docker")
            .args(["save", "-o"])
            .arg(&archive)
            .args([&tag, &dev]),
    )?;
    let size = fs::metadata(&layer)?.len();
    eprintln!(
        "xtask image: {tag} and {dev} ({:.1} MiB unpacked), archive {}",
        size as f64 / (1024.0 * 1024.0),
        archive.display()
    );
    Ok(Image {
        binary,
        archive,
        host_files,
    })
}

/// Fails early, naming what is missing, if no Docker engine answers.
fn docker_ready() -> anyhow::Result<()> {
    match Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => bail!(
            "`cargo xtask image` needs a running Docker engine: docker version: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => bail!("`cargo xtask image` needs docker on PATH: {e}"),
    }
}

/// The shared libraries `ldd` resolves for `binary`, the dynamic loader
/// included, as absolute paths on this machine.
fn libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let text = run_cmd(Command::new("ldd").arg(binary))?;
    let mut libs = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)",
        // "/lib64/ld-linux-x86-64.so.2 (0x...)", "linux-vdso.so.1 (0x...)".
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        match path {
            Some(p) if p.starts_with('/') => libs.push(PathBuf::from(p)),
            Some(p) if p.starts_with("linux-vdso") => {}
            _ => bail!("ldd {}: cannot read {line:?}", binary.display()),
        }
    }
    if libs.is_empty() {
        bail!("ldd {} named no libraries", binary.display());
    }
    Ok(libs)
}

/// Copies `src`'s contents (symbolic links followed) to `rootfs/dst`.
fn copy_into(rootfs: &Path, src: &Path, dst: &Path) -> anyhow::Result<()> {
    let to = rootfs.join(dst);
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::copy(src, &to).with_context(|| format!("copy {} to {}", src.display(), to.display()))?;
    Ok(())
}
