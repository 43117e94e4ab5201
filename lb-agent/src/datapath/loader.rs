//! Loading the eBPF object against pinned maps, and attaching its programs
//! with pinned links so that they outlive the agent.

use std::{
    collections::VecDeque,
    fs, io,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    sync::Mutex,
    thread,
};

use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{CgroupSockAddrAttachType, Iter, Program as AyaProgram, links::FdLink},
};
use lb_common::ALL_MAPS;

use crate::sockets::UdpIter;

use super::{
    error::{Error, io_err},
    layout::Capacities,
    link_detach::OldLink,
    pins::Pins,
};

/// The eBPF object built from `lb-ebpf` by build.rs.
pub(super) static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ebpf"));

/// The eBPF object this agent loads (for tests that run its programs).
pub fn object() -> &'static [u8] {
    OBJECT
}

/// A program: its function in the object, its link's pin name, its hook.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    pub function: &'static str,
    pub link: &'static str,
    pub hook: CgroupSockAddrAttachType,
}

/// The programs that translate (they write reverse-NAT entries).
pub const TRANSLATING: [Program; 4] = [
    Program {
        function: "lb_connect4",
        link: "connect4",
        hook: CgroupSockAddrAttachType::Connect4,
    },
    Program {
        function: "lb_sendmsg4",
        link: "sendmsg4",
        hook: CgroupSockAddrAttachType::UDPSendMsg4,
    },
    Program {
        function: "lb_connect6",
        link: "connect6",
        hook: CgroupSockAddrAttachType::Connect6,
    },
    Program {
        function: "lb_sendmsg6",
        link: "sendmsg6",
        hook: CgroupSockAddrAttachType::UDPSendMsg6,
    },
];

/// The programs that read reverse-NAT entries.
pub const REVERSING: [Program; 4] = [
    Program {
        function: "lb_recvmsg4",
        link: "recvmsg4",
        hook: CgroupSockAddrAttachType::UDPRecvMsg4,
    },
    Program {
        function: "lb_getpeername4",
        link: "getpeername4",
        hook: CgroupSockAddrAttachType::GetPeerName4,
    },
    Program {
        function: "lb_recvmsg6",
        link: "recvmsg6",
        hook: CgroupSockAddrAttachType::UDPRecvMsg6,
    },
    Program {
        function: "lb_getpeername6",
        link: "getpeername6",
        hook: CgroupSockAddrAttachType::GetPeerName6,
    },
];

/// The hook of the socket program `function`.
pub fn sock_attach_type(function: &str) -> Option<CgroupSockAddrAttachType> {
    TRANSLATING
        .iter()
        .chain(&REVERSING)
        .find(|p| p.function == function)
        .map(|p| p.hook)
}

/// Loads the object with every map pinned in `maps_dir`: maps pinned there
/// already are used as they are, the others are created at `caps` and pinned.
pub fn load(maps_dir: &Path, caps: &Capacities) -> Result<Ebpf, Error> {
    fs::create_dir_all(maps_dir).map_err(io_err("creating", maps_dir))?;
    let mut loader = EbpfLoader::new();
    for spec in ALL_MAPS {
        loader.map_pin_path(spec.name, maps_dir.join(spec.pin));
        loader.map_max_entries(spec.name, caps.max_entries(&spec));
    }
    Ok(loader.load(OBJECT)?)
}

/// Loads the programs named in `names` (the kernel verifies each: most of
/// a cold start's program load), in that order, on two threads: they are
/// independent, the verifier runs concurrently for a privileged loader, and
/// meanwhile the other core is mostly idle (the lists are read ahead only
/// so far, see `EARLY_MAX`). Put the costliest first, so that the threads
/// finish together.
pub fn load_programs(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<(), Error> {
    let mut found: Vec<(&'static str, &mut AyaProgram)> = ebpf
        .programs_mut()
        .filter_map(|(name, p)| names.iter().find(|n| **n == name).map(|n| (*n, p)))
        .collect();
    found.sort_by_key(|(name, _)| names.iter().position(|n| n == name));
    if let Some(missing) = names.iter().find(|n| !found.iter().any(|(f, _)| f == *n)) {
        return Err(Error::MissingProgram(missing));
    }
    let queue = Mutex::new(VecDeque::from(found));
    let work = || -> Result<(), Error> {
        loop {
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
            let Some((name, program)) = next else {
                return Ok(());
            };
            let loaded = match program {
                AyaProgram::CgroupSockAddr(p) => p.load(),
                AyaProgram::SchedClassifier(p) => p.load(),
                _ => Err(aya::programs::ProgramError::UnexpectedProgramType),
            };
            loaded.map_err(|source| Error::Program { name, source })?;
        }
    };
    thread::scope(|s| {
        // Without a second thread, this one drains the queue alone.
        let other = thread::Builder::new()
            .name("bpf-load".into())
            .spawn_scoped(s, work)
            .ok();
        let mine = work();
        let theirs = other.map_or(Ok(()), |t| {
            t.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        mine.and(theirs)
    })
}

/// The UDP socket iterator's function in the object.
const UDP_ITER: &str = "lb_iter_udp";

/// Loads the UDP socket iterator (`lb_iter_udp`) if it is not yet, for the
/// stale-UDP reaper, which reads connected UDP sockets' storage through it.
/// Not with the other programs: it needs the kernel's BTF parsed (tens of
/// milliseconds), and only once a UDP frontend loses an endpoint.
pub fn udp_iter(ebpf: &mut Ebpf) -> Result<UdpIter, Error> {
    let name = UDP_ITER;
    let prog_err = |source| Error::Program { name, source };
    let iter: &mut Iter = ebpf
        .program_mut(name)
        .ok_or(Error::MissingProgram(name))?
        .try_into()
        .map_err(prog_err)?;
    if iter.fd().is_err() {
        let started = std::time::Instant::now();
        let btf = Btf::from_sys_fs().map_err(Error::KernelBtf)?;
        iter.load("udp", &btf).map_err(prog_err)?;
        tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "loaded the UDP socket iterator"
        );
    }
    let fd = iter.fd().map_err(prog_err)?;
    let owned = fd
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| Error::ProgramFd { name, source })?;
    Ok(UdpIter::new(owned))
}

/// Pins `link` as `links/<pin>`, replacing the link pinned there: the new
/// one is pinned beside it first, then renamed over it, so one of the two
/// is always attached; then the old link is detached
/// ([`BPF_LINK_DETACH`](super::link_detach)). Renaming over its pin only
/// drops the pin's reference: any process that holds the old link open
/// would keep the old program attached, running from the maps it was
/// loaded with.
pub fn pin_replacing(link: FdLink, pins: &Pins, pin: &str) -> Result<(), Error> {
    let final_path = pins.link(pin);
    // bpffs rejects names containing a dot.
    let tmp_path = pins.link(&format!("{pin}_new"));
    unpin_link(&tmp_path)?;
    // Opened before the rename: after it, the pin names the new link.
    let old = OldLink::open(&final_path).map_err(io_err("opening link pin", &final_path))?;
    link.pin(&tmp_path).map_err(|source| Error::Pin {
        path: tmp_path.clone(),
        source,
    })?;
    fs::rename(&tmp_path, &final_path).map_err(io_err("replacing link pin", &final_path))?;
    match old {
        Some(old) => old.detach().map_err(|source| Error::Detach {
            path: final_path,
            source,
        }),
        None => Ok(()),
    }
}

/// Removes the link pinned at `path`, if there is one, and detaches it,
/// whoever else holds it open.
pub fn unpin_link(path: &Path) -> Result<(), Error> {
    let Some(old) = OldLink::open(path).map_err(io_err("opening link pin", path))? else {
        return Ok(());
    };
    remove_if_present(path)?;
    old.detach().map_err(|source| Error::Detach {
        path: path.to_owned(),
        source,
    })
}

/// Removes the file at `path`, if there is one.
pub fn remove_if_present(path: &Path) -> Result<(), Error> {
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
    pub programs: Vec<PathBuf>,
}

/// Detaches the programs (unpinning and detaching their links) and removes
/// the maps, of this layout and any other, and the programs' pins.
pub fn uninstall(pins: &Pins) -> Result<Removed, Error> {
    let mut removed = Removed {
        programs: remove_pinned(pins)?,
        ..Removed::default()
    };
    // Links first: once they are gone nothing reads the maps.
    for (dir, is_link) in [
        (pins.links_dir(), true),
        (pins.maps_dir(), false),
        (pins.next_dir(), false),
    ] {
        let list = if is_link {
            &mut removed.links
        } else {
            &mut removed.maps
        };
        for path in read_dir(&dir)? {
            if is_link {
                unpin_link(&path)?;
            } else {
                remove_if_present(&path)?;
            }
            list.push(path);
        }
        remove_dir_if_present(&dir)?;
    }
    remove_dir_if_present(pins.dir())?;
    Ok(removed)
}

/// Removes the pinned programs of every build (the programs stay loaded
/// while a link holds them).
pub fn remove_pinned(pins: &Pins) -> Result<Vec<PathBuf>, Error> {
    let mut removed = Vec::new();
    let top = pins.programs_dir();
    for build in read_dir(&top)? {
        for program in read_dir(&build)? {
            remove_if_present(&program)?;
            removed.push(program);
        }
        remove_dir_if_present(&build)?;
    }
    remove_dir_if_present(&top)?;
    Ok(removed)
}

/// Removes the empty directory `dir`, if there is one.
fn remove_dir_if_present(dir: &Path) -> Result<(), Error> {
    match fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing", dir)(e)),
        _ => Ok(()),
    }
}

/// The entries of `dir`; none if it does not exist.
fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.path()).map_err(io_err("reading", dir)))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err("reading", dir)(e)),
    }
}
