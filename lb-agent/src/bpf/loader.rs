//! Loading the eBPF object, pinning its maps, and attaching the programs
//! with pinned links so that they outlive the agent.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use aya::{
    EbpfLoader,
    maps::MapData,
    programs::{CgroupAttachMode, CgroupSockAddr, links::FdLink},
};
use lb_common::{
    BACKENDS4_MAP, Backend4, REVNAT4_MAP, RevNat4Key, RevNat4Value, SERVICES4_MAP, Service4Key,
    ServiceValue,
};

use super::pins::Pins;

/// The eBPF object built from `lb-ebpf` by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));

/// (program function, link pin name).
const PROGRAMS: [(&str, &str); 4] = [
    ("lb_connect4", "connect4"),
    ("lb_sendmsg4", "sendmsg4"),
    ("lb_recvmsg4", "recvmsg4"),
    ("lb_getpeername4", "getpeername4"),
];

/// (map, key size, value size) as this build lays them out.
const MAPS: [(&str, usize, usize); 3] = [
    (
        SERVICES4_MAP,
        size_of::<Service4Key>(),
        size_of::<ServiceValue>(),
    ),
    (BACKENDS4_MAP, size_of::<u32>(), size_of::<Backend4>()),
    (
        REVNAT4_MAP,
        size_of::<RevNat4Key>(),
        size_of::<RevNat4Value>(),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("loading the eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("program {name}: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("program {name}: {source}")]
    Link {
        name: &'static str,
        source: aya::programs::links::LinkError,
    },
    #[error("pinning link {path}: {source}")]
    Pin {
        path: PathBuf,
        source: aya::pin::PinError,
    },
    #[error("program {0} missing from the eBPF object")]
    MissingProgram(&'static str),
    #[error(
        "pinned map {path} has key/value size {found:?}, this build needs {want:?}; \
         run `lb-agent cleanup` to replace it"
    )]
    IncompatibleMap {
        path: PathBuf,
        found: (u32, u32),
        want: (u32, u32),
    },
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LoaderError {
    let path = path.to_owned();
    move |source| LoaderError::Io { what, path, source }
}

/// Loads the programs against the pinned maps (creating them on first run)
/// and attaches them to `cgroup`.
///
/// Existing pinned maps are adopted as they are. Existing links are replaced
/// make-before-break: the new link is attached and pinned first, then renamed
/// over the old pin, which detaches the old program.
pub fn install(pins: &Pins, cgroup: &Path) -> Result<(), LoaderError> {
    for dir in [pins.maps_dir(), pins.links_dir()] {
        fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
    }
    check_pinned_maps(pins)?;

    let mut loader = EbpfLoader::new();
    for (name, _, _) in MAPS {
        loader.map_pin_path(name, pins.map(name));
    }
    let mut ebpf = loader.load(OBJECT)?;

    let cgroup_dir = fs::File::open(cgroup).map_err(io_err("opening cgroup", cgroup))?;
    for (name, link_name) in PROGRAMS {
        let prog_err = |source| LoaderError::Program { name, source };
        let program: &mut CgroupSockAddr = ebpf
            .program_mut(name)
            .ok_or(LoaderError::MissingProgram(name))?
            .try_into()
            .map_err(prog_err)?;
        program.load().map_err(prog_err)?;
        // BPF links take no attach flags (the kernel always attaches them as
        // multi), so old and new programs can overlap during a replace.
        let id = program
            .attach(&cgroup_dir, CgroupAttachMode::Single)
            .map_err(prog_err)?;
        let link: FdLink = program
            .take_link(id)
            .map_err(prog_err)?
            .try_into()
            .map_err(|source| LoaderError::Link { name, source })?;
        let final_path = pins.link(link_name);
        // bpffs rejects names containing a dot.
        let tmp_path = pins.link(&format!("{link_name}_new"));
        remove_if_present(&tmp_path)?;
        link.pin(&tmp_path).map_err(|source| LoaderError::Pin {
            path: tmp_path.clone(),
            source,
        })?;
        fs::rename(&tmp_path, &final_path).map_err(io_err("replacing link pin", &final_path))?;
    }
    Ok(())
}

/// Refuses to adopt pinned maps whose layout differs from this build's.
fn check_pinned_maps(pins: &Pins) -> Result<(), LoaderError> {
    for (name, key, value) in MAPS {
        let path = pins.map(name);
        if !path.exists() {
            continue;
        }
        let info = MapData::from_pin(&path)
            .and_then(|m| m.info())
            .map_err(|e| LoaderError::Io {
                what: "reading pinned map",
                path: path.clone(),
                source: io::Error::other(e),
            })?;
        let found = (info.key_size(), info.value_size());
        let want = (key as u32, value as u32);
        if found != want {
            return Err(LoaderError::IncompatibleMap { path, found, want });
        }
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<(), LoaderError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing", path)(e)),
        _ => Ok(()),
    }
}

/// What [`uninstall`] removed.
#[derive(Debug, Default)]
pub struct Removed {
    pub links: Vec<PathBuf>,
    pub maps: Vec<PathBuf>,
}

/// Detaches the programs (by unpinning their links) and removes the maps.
pub fn uninstall(pins: &Pins) -> Result<Removed, LoaderError> {
    let mut removed = Removed::default();
    // Links first: once they are gone nothing reads the maps.
    for (dir, list) in [
        (pins.links_dir(), &mut removed.links),
        (pins.maps_dir(), &mut removed.maps),
    ] {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err("reading", &dir)(e)),
        };
        for entry in entries {
            let path = entry.map_err(io_err("reading", &dir))?.path();
            remove_if_present(&path)?;
            list.push(path);
        }
        fs::remove_dir(&dir).map_err(io_err("removing", &dir))?;
    }
    match fs::remove_dir(pins.dir()) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing", pins.dir())(e)),
        _ => Ok(removed),
    }
}
