//! The datapath's error: what failed on which pin, path, program or
//! device, with the kernel's or aya's error kept as its source.

use std::{
    io,
    path::{Path, PathBuf},
};

use aya::{
    maps::MapError,
    pin::PinError,
    programs::{ProgramError, links::LinkError},
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory under the pins (or the cgroup) could not be
    /// read, created, renamed or removed, or a map command on a pin failed.
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The map pinned at `path` could not be opened or is not the map
    /// expected there.
    #[error("reading pinned map {path}")]
    Map {
        path: PathBuf,
        #[source]
        source: MapError,
    },
    #[error("loading the eBPF object")]
    Load(#[from] aya::EbpfError),
    #[error("reading the kernel's BTF")]
    KernelBtf(#[source] aya::BtfError),
    #[error("duplicating the descriptor of program {name}")]
    ProgramFd {
        name: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("program {0} missing from the eBPF object")]
    MissingProgram(&'static str),
    /// A map a pinned program uses could not be opened.
    #[error("opening map {id} of a pinned program")]
    ProgramMap {
        id: u32,
        #[source]
        source: MapError,
    },
    #[error("global section {0} missing from the eBPF object")]
    MissingGlobal(&'static str),
    /// A global of the programs (`section`) could not be written.
    #[error("writing the programs' global {section}")]
    Global {
        section: &'static str,
        #[source]
        source: MapError,
    },
    /// Loading or attaching a program failed.
    #[error("program {name}")]
    Program {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    /// A program's link could not be made a pinnable one.
    #[error("program {name}")]
    Link {
        name: &'static str,
        #[source]
        source: LinkError,
    },
    /// The link pinned at `path` (replaced or removed) could not be
    /// detached (`BPF_LINK_DETACH`).
    #[error("detaching the link pinned at {path}")]
    Detach {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("pinning {path}")]
    Pin {
        path: PathBuf,
        #[source]
        source: PinError,
    },
    #[error("device {device}")]
    Device {
        device: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "device {device} has link type {link_type}, which the tc programs cannot parse \
         (they take Ethernet devices and devices without a link-layer header: \
         WireGuard, IPIP, GRE, TUN); leave it out of --devices"
    )]
    LinkType { device: String, link_type: u16 },
    /// Devices the tc programs could not be attached to (missing, or
    /// refused by the kernel); every other device of the set got them.
    #[error("the tc programs are not attached to {devices:?}")]
    Devices {
        devices: Vec<String>,
        /// What failed on the first of them.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// `Ok` when no device failed, else [`Error::Devices`] naming every
    /// device of `failed`, with the first one's error.
    pub(super) fn per_device(failed: Vec<(String, Error)>) -> Result<(), Error> {
        let (devices, mut errors): (Vec<String>, Vec<Error>) = failed.into_iter().unzip();
        if errors.is_empty() {
            return Ok(());
        }
        Err(Error::Devices {
            devices,
            source: Box::new(errors.swap_remove(0)),
        })
    }
}

/// [`Error::Io`] for `what` on `path`.
pub(super) fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::Io { what, path, source }
}

/// [`Error::Map`] for the map pinned at `path`.
pub(super) fn map_err(path: &Path) -> impl FnOnce(MapError) -> Error {
    let path = path.to_owned();
    move |source| Error::Map { path, source }
}
