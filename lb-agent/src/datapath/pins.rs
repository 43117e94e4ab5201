//! Layout of the bpffs directory, owned here (no other module builds a
//! path under it):
//!
//! * `<dir>/maps/<PIN>`: the maps the attached programs use; pin names carry
//!   the layout version (`LB4_FRONTENDS_V2`).
//! * `<dir>/maps-next/<PIN>`: a migration's new maps, until the programs
//!   switch to them and they move to `maps/`.
//! * `<dir>/links/<program>`: the pinned links that keep the socket
//!   programs attached, and `<dir>/links/<hook prefix><device>` those of
//!   the tc and XDP programs on each device ([`DeviceHook`]); `<name>_new`
//!   while one is being replaced.
//! * `<dir>/programs/<build>/<function>`: the programs the last agent
//!   loaded, for a restart of the same build to adopt.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use lb_common::MapSpec;

use super::error::{Error, io_err};

/// The default bpffs directory, one per node.
pub const DEFAULT_BPFFS_DIR: &str = "/sys/fs/bpf/lb-agent";

/// A device's hook whose link is pinned by device name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceHook {
    TcIngress,
    TcEgress,
    Xdp,
    /// The pods' tc programs on a pod's host-side interface.
    PodIngress,
    PodEgress,
}

impl DeviceHook {
    /// Its pins' prefix.
    const fn prefix(self) -> &'static str {
        match self {
            Self::TcIngress => "tc-in-",
            Self::TcEgress => "tc-out-",
            Self::Xdp => "xdp-",
            Self::PodIngress => "tc-pod-in-",
            Self::PodEgress => "tc-pod-out-",
        }
    }

    /// The name of `device`'s link pin: bpffs refuses dots, which VLAN
    /// devices (`eth0.100`) have; `+` stands for them.
    pub fn pin_name(self, device: &str) -> String {
        format!("{}{}", self.prefix(), device.replace('.', "+"))
    }

    /// The device a pin name of this hook is for.
    pub fn device(self, pin_name: &str) -> Option<String> {
        pin_name
            .strip_prefix(self.prefix())
            .map(|part| part.replace('+', "."))
    }
}

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

    /// `spec`'s pin among the maps in use.
    pub fn map(&self, spec: &MapSpec) -> PathBuf {
        self.maps_dir().join(spec.pin)
    }

    /// A migration's maps, before the switch.
    pub fn next_dir(&self) -> PathBuf {
        self.dir.join("maps-next")
    }

    /// The programs the last agent loaded, by build.
    pub fn programs_dir(&self) -> PathBuf {
        self.dir.join("programs")
    }

    /// The programs of `build`.
    pub fn build_dir(&self, build: &str) -> PathBuf {
        self.programs_dir().join(build)
    }

    pub fn links_dir(&self) -> PathBuf {
        self.dir.join("links")
    }

    /// The link pinned as `name`.
    pub fn link(&self, name: &str) -> PathBuf {
        self.links_dir().join(name)
    }

    /// The link of `device`'s `hook`.
    pub fn device_link(&self, hook: DeviceHook, device: &str) -> PathBuf {
        self.link(&hook.pin_name(device))
    }

    /// The names of the links pinned for `hook` on any device.
    pub fn device_links(&self, hook: DeviceHook) -> Result<Vec<String>, Error> {
        let mut names = pinned(&self.links_dir())?;
        names.retain(|name| name.starts_with(hook.prefix()));
        Ok(names)
    }
}

/// The names pinned in `dir`, sorted; none if it does not exist.
pub fn pinned(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("reading", dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(
            entry
                .map_err(io_err("reading", dir))?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_link_pin_names_its_hook_and_device_without_dots() {
        let pins = Pins::new("/sys/fs/bpf/x");
        assert_eq!(
            pins.device_link(DeviceHook::TcIngress, "eth0.100"),
            Path::new("/sys/fs/bpf/x/links/tc-in-eth0+100")
        );
        assert_eq!(DeviceHook::Xdp.pin_name("eth0"), "xdp-eth0");
        assert_eq!(
            DeviceHook::TcEgress.device("tc-out-eth0+100").as_deref(),
            Some("eth0.100")
        );
        assert_eq!(DeviceHook::TcIngress.device("tc-out-eth0"), None);
    }
}
