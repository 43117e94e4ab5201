//! What installing an earlier release's datapath (`layouts`)
//! shares: the frontends to program, and attaching the programs to the
//! cgroup through links pinned under `links/`, as every agent so far has.

use std::{fs, net::Ipv4Addr, path::Path};

use anyhow::Context as _;
use aya::{
    Ebpf,
    programs::{CgroupAttachMode, CgroupSockAddr, links::FdLink},
};

/// One frontend with its backends.
pub struct Frontend {
    pub vip: Ipv4Addr,
    pub port: u16,
    /// 6 (TCP) or 17 (UDP).
    pub proto: u8,
    /// 0: as seen from inside (the socket hooks); 1: from outside the node
    /// (the tc programs, since layout 4; eTP Cluster).
    pub scope: u8,
    pub backends: Vec<(Ipv4Addr, u16)>,
}

/// The programs and the names of their link pins, the same in layouts 1
/// and 2 (lb-agent's `TRANSLATING` and `REVERSING`): a newer agent finds
/// and replaces them by these names.
const PROGRAMS: [(&str, &str); 4] = [
    ("lb_connect4", "connect4"),
    ("lb_sendmsg4", "sendmsg4"),
    ("lb_recvmsg4", "recvmsg4"),
    ("lb_getpeername4", "getpeername4"),
];

/// Loads the programs of `ebpf` (the object of `layout`) and attaches them
/// to `cgroup`, each through a link pinned at `<pins>/links/<name>`.
pub fn attach(ebpf: &mut Ebpf, pins: &Path, cgroup: &Path, layout: &str) -> anyhow::Result<()> {
    let links = pins.join("links");
    fs::create_dir_all(&links)?;
    let cgroup_dir = fs::File::open(cgroup)?;
    for (function, link) in PROGRAMS {
        let program: &mut CgroupSockAddr = ebpf
            .program_mut(function)
            .with_context(|| format!("{function} in {layout}"))?
            .try_into()?;
        program.load()?;
        let id = program.attach(&cgroup_dir, CgroupAttachMode::Single)?;
        let fd_link: FdLink = program.take_link(id)?.try_into()?;
        fd_link.pin(links.join(link))?;
    }
    Ok(())
}
