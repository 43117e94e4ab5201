//! Layout of the bpffs directory:
//!
//! * `<dir>/maps/<PIN>`: the maps the attached programs use; pin names carry
//!   the layout version (`LB4_FRONTENDS_V2`).
//! * `<dir>/maps-next/<PIN>`: a migration's new maps, until the programs
//!   switch to them and they move to `maps/`.
//! * `<dir>/links/<program>`: the pinned links that keep the programs
//!   attached (`<program>_new` while one is being replaced).
//! * `<dir>/programs/<build>/<function>`: the programs the last agent
//!   loaded, for a restart of the same build to adopt.

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

    /// The maps in use.
    pub fn maps_dir(&self) -> PathBuf {
        self.dir.join("maps")
    }

    /// A migration's maps, before the switch.
    pub fn next_dir(&self) -> PathBuf {
        self.dir.join("maps-next")
    }

    /// The programs the last agent loaded, by build.
    pub fn programs_dir(&self) -> PathBuf {
        self.dir.join("programs")
    }

    pub fn links_dir(&self) -> PathBuf {
        self.dir.join("links")
    }

    pub fn link(&self, program: &str) -> PathBuf {
        self.links_dir().join(program)
    }
}
