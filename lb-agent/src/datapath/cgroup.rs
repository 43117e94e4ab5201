//! Finding the cgroup v2 hierarchy to attach to.

use std::{fs, io, path::PathBuf};

/// The cgroup2 mount point from `/proc/mounts` (`/sys/fs/cgroup` on most
/// nodes, `/sys/fs/cgroup/unified` on hybrid hosts).
pub fn cgroup2_mount() -> io::Result<PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts")?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_dev, path, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(path))
        })
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no cgroup2 mount in /proc/mounts"))
}
