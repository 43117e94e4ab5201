//! What test processes that died without running their `Drop`s left
//! behind (killed, or the machine restarted mid-run): pins, cgroups,
//! namespaces and temp directories named by [`crate::unique`] for a
//! process that no longer exists, at least ten minutes old. Removed on the
//! first [`crate::unique`] of every process, in the order a test bed drops
//! them.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{agent::PinDir, cgroup, netns};

pub(crate) fn sweep() {
    // Pins first: removing the pinned links detaches the programs.
    for path in dead(Path::new("/sys/fs/bpf")) {
        drop(PinDir::adopt(path));
    }
    if let Ok(root) = cgroup::cgroup2_root() {
        for path in dead(&root) {
            drop(cgroup::TestCgroup::adopt(path));
        }
    }
    // Deleting a namespace deletes its veth ends and routes with it.
    for path in dead(Path::new("/run/netns")) {
        if let Some(ns) = path.file_name().and_then(|n| n.to_str()) {
            let _ = netns::ip(&["netns", "del", ns]);
        }
    }
    for path in dead(&std::env::temp_dir()) {
        let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
    }
}

/// Entries younger than this are left alone: a run in another PID
/// namespace (a container sharing bpffs, netns and cgroups) would look
/// dead here, and no test bed lives this long.
const MIN_AGE: Duration = Duration::from_secs(10 * 60);

/// Entries of `dir` named by [`crate::unique`] for a process that is gone.
fn dead(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(owner)
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
                && fs::symlink_metadata(p)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= MIN_AGE))
        })
        .collect()
}

/// The pid in `lbt<pid><tag>…`; tags start with a letter.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("lbt")?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::owner;

    #[test]
    fn the_owner_is_the_pid_before_the_tag() {
        assert_eq!(owner("lbt20587b2-cl"), Some(20587));
        assert_eq!(owner("lbt20587plain3"), Some(20587));
        assert_eq!(owner("lbt20587"), None, "no tag: not a name of ours");
        assert_eq!(owner("lbtx1"), None);
        assert_eq!(owner("cilium"), None);
    }
}
