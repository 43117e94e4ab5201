//! A cgroup v2 directory for one test; the LB programs attach here, and
//! clients join it before entering their netns.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

/// The cgroup2 mount, from /proc/mounts.
pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts")?;
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .context("no cgroup2 mount; run `cargo xtask setup`")
}

pub struct TestCgroup {
    path: PathBuf,
}

impl TestCgroup {
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let path = cgroup2_root()?.join(name);
        fs::create_dir(&path).with_context(|| format!("creating cgroup {}", path.display()))?;
        Ok(Self { path })
    }

    /// Takes over a cgroup left by another process, to remove it.
    pub(crate) fn adopt(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        // Kill stragglers (cgroup.kill exists since 5.14), then remove.
        let _ = fs::write(self.path.join("cgroup.kill"), "1");
        for _ in 0..50 {
            if fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove cgroup {}", self.path.display());
    }
}
