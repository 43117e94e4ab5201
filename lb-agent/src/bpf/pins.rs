//! Layout of the bpffs directory: `<dir>/maps/<MAP>` and `<dir>/links/<prog>`.

use std::path::{Path, PathBuf};

/// The default bpffs directory, one per node.
pub const DEFAULT_BPFFS_DIR: &str = "/sys/fs/bpf/lb-agent";

#[derive(Clone, Debug)]
pub struct Pins {
    dir: PathBuf,
}

impl Pins {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn maps_dir(&self) -> PathBuf {
        self.dir.join("maps")
    }

    pub fn links_dir(&self) -> PathBuf {
        self.dir.join("links")
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.maps_dir().join(name)
    }

    pub fn link(&self, program: &str) -> PathBuf {
        self.links_dir().join(program)
    }
}
