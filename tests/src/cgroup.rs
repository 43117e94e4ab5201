//! A cgroup v2 directory for one test; the LB programs attach here, and
//! clients join it before entering their netns.

use std::{
    fs, io,
    os::fd::AsRawFd as _,
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

/// The socket hooks the agent attaches to, as `enum bpf_attach_type`
/// numbers them (`include/uapi/linux/bpf.h`), with its link pin names.
pub const SOCK_HOOKS: [(&str, u32); 8] = [
    ("connect4", 10),
    ("connect6", 11),
    ("sendmsg4", 14),
    ("sendmsg6", 15),
    ("recvmsg4", 19),
    ("recvmsg6", 20),
    ("getpeername4", 29),
    ("getpeername6", 30),
];

/// The prefix of `union bpf_attr` that `BPF_PROG_QUERY` reads and writes
/// (`attr->query`); the kernel zero-fills the rest.
#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

/// The ids of the programs attached to `cgroup` itself at `attach_type`
/// (an `enum bpf_attach_type`), in the order they run: what the kernel
/// runs there, whichever links or pins hold them.
pub fn attached_programs(cgroup: &Path, attach_type: u32) -> anyhow::Result<Vec<u32>> {
    const BPF_PROG_QUERY: libc::c_long = 16;
    let dir = fs::File::open(cgroup).with_context(|| format!("opening {}", cgroup.display()))?;
    let mut ids = [0u32; 64];
    let mut attr = QueryAttr {
        target_fd: dir.as_raw_fd() as u32,
        attach_type,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..QueryAttr::default()
    };
    // SAFETY: `attr` is a live `repr(C)` prefix of `bpf_attr.query` of the
    // size passed; the kernel writes at most `prog_cnt` ids into `ids`,
    // which outlives the call, and the count into `attr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_QUERY,
            std::ptr::from_mut(&mut attr),
            size_of::<QueryAttr>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error())
            .with_context(|| format!("BPF_PROG_QUERY {} type {attach_type}", cgroup.display()));
    }
    Ok(ids[..attr.prog_cnt as usize].to_vec())
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
