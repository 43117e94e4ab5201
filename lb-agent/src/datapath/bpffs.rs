//! `lb-agent mount-bpffs`: bpffs on the host's /sys/fs/bpf, so that pins
//! outlive the pod. The image has no shell or mount(8); this is the
//! DaemonSet's init container.

use std::{io, path::Path};

use rustix::{
    fs::statfs,
    mount::{MountFlags, mount},
};

/// `BPF_FS_MAGIC` from linux/magic.h: statfs(2)'s `f_type` on bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Why bpffs could not be made available.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("creating {dir}")]
    Create {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("statfs {dir}")]
    Stat {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("mount -t bpf bpf {dir}")]
    Mount {
        dir: String,
        #[source]
        source: io::Error,
    },
}

/// Whether `dir` is on bpffs.
pub fn is_bpffs(dir: &Path) -> Result<bool, MountError> {
    let st = statfs(dir).map_err(|e| MountError::Stat {
        dir: dir.display().to_string(),
        source: e.into(),
    })?;
    Ok(st.f_type == BPF_FS_MAGIC)
}

/// Mounts bpffs on `dir` (created if missing) unless it is on bpffs
/// already; returns whether it mounted.
pub fn mount_bpffs(dir: &Path) -> Result<bool, MountError> {
    std::fs::create_dir_all(dir).map_err(|source| MountError::Create {
        dir: dir.display().to_string(),
        source,
    })?;
    if is_bpffs(dir)? {
        return Ok(false);
    }
    mount("bpf", dir, "bpf", MountFlags::empty(), None).map_err(|e| MountError::Mount {
        dir: dir.display().to_string(),
        source: e.into(),
    })?;
    Ok(true)
}
