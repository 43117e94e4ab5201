//! The cgroup v2 hierarchy the socket programs attach to: finding it, and
//! attaching them.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use aya::programs::{CgroupAttachMode, CgroupSockAddr, links::FdLink};

use super::{
    error::{Error, io_err},
    loader::{Program, pin_replacing},
    pins::Pins,
    programs::Programs,
};

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

/// Attaches `which` to `cgroup`, each replacing the one attached before
/// it make-before-break: the new link is attached and pinned first, then
/// renamed over the old pin, then the old link is detached (see
/// [`pin_replacing`]). BPF links take no attach flags (the kernel attaches
/// them as multi), so for a moment both run; either gives the same answer.
pub fn attach(
    programs: &mut Programs,
    pins: &Pins,
    cgroup: &Path,
    which: &[Program],
) -> Result<(), Error> {
    let links = pins.links_dir();
    fs::create_dir_all(&links).map_err(io_err("creating", &links))?;
    let cgroup_dir = fs::File::open(cgroup).map_err(io_err("opening cgroup", cgroup))?;
    for p in which {
        let name = p.function;
        let prog_err = |source| Error::Program { name, source };
        let program: &mut CgroupSockAddr = programs.get(name)?;
        let id = program
            .attach(&cgroup_dir, CgroupAttachMode::Single)
            .map_err(prog_err)?;
        let link: FdLink = program
            .take_link(id)
            .map_err(prog_err)?
            .try_into()
            .map_err(|source| Error::Link { name, source })?;
        pin_replacing(link, pins, p.link)?;
    }
    Ok(())
}
