//! The few `bpf(2)` commands the generator and the counter need, raw.
//!
//! Why raw: their programs are a dozen instructions, kept out of the
//! agent's object (`lb-ebpf`) on purpose, and aya loads programs only from
//! an ELF object. Building a second eBPF crate for them would cost the
//! test crate a nightly build; assembling them here (`super::progs`) costs
//! nothing. Each attr struct below is the prefix of the kernel's `union
//! bpf_attr` that its command reads (`include/uapi/linux/bpf.h`); the
//! kernel zero-fills the rest.

use std::{
    ffi::CStr,
    io,
    os::fd::{FromRawFd as _, OwnedFd, RawFd},
};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_LINK_CREATE: libc::c_long = 28;

const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_DRV_MODE`: native, never the generic (skb) fallback.
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst in the low nibble, src in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

/// `bpf(cmd, attr, sizeof attr)`; a new fd for the commands that make one.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, writable `repr(C)` prefix of `union
    // bpf_attr` for `cmd`, of the size passed; every pointer inside it
    // points to memory that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `fd` was just returned by the kernel as a new descriptor that
    // nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// Loads an XDP program; a verifier rejection carries the verifier's log.
pub fn load_xdp(name: &str, insns: &[Insn]) -> io::Result<OwnedFd> {
    const LICENSE: &CStr = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut prog_name = [0u8; 16];
    for (d, s) in prog_name.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: LICENSE.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name,
        expected_attach_type: BPF_XDP,
        ..ProgLoad::default()
    };
    bpf(BPF_PROG_LOAD, &mut attr).map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        io::Error::new(
            e.kind(),
            format!(
                "loading {name}: {e}: {}",
                String::from_utf8_lossy(&log[..end])
            ),
        )
    })
}

#[repr(C)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
}

/// A per-CPU array of one `u64`.
pub(super) fn percpu_u64() -> io::Result<OwnedFd> {
    let mut attr = MapCreate {
        map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
        key_size: 4,
        value_size: 8,
        max_entries: 1,
    };
    bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

#[repr(C)]
struct MapLookup {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// Entry 0 of a [`percpu_u64`] map: one value per possible CPU.
pub(super) fn read_percpu_u64(map: RawFd) -> io::Result<Vec<u64>> {
    let key = 0u32;
    let mut values = vec![0u64; possible_cpus()?];
    let mut attr = MapLookup {
        map_fd: map as u32,
        _pad: 0,
        key: std::ptr::from_ref(&key) as u64,
        value: values.as_mut_ptr() as u64,
        flags: 0,
    };
    bpf(BPF_MAP_LOOKUP_ELEM, &mut attr)?;
    Ok(values)
}

/// How many CPUs the kernel sizes per-CPU values for
/// (`/sys/devices/system/cpu/possible`, e.g. `0-1`).
fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {text:?}"));
    let mut max = 0usize;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next().ok_or_else(bad)?;
        max = max.max(last.parse::<usize>().map_err(|_| bad())?);
    }
    Ok(max + 1)
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// Attaches an XDP program natively to `ifindex` (in the calling thread's
/// network namespace) through a BPF link: closing the fd detaches it, so
/// nothing outlives the process.
pub(super) fn attach_xdp_native(prog: RawFd, ifindex: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreate {
        prog_fd: prog as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: XDP_FLAGS_DRV_MODE,
    };
    bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

#[repr(C)]
#[derive(Default)]
struct TestRun {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    /// Explicit, so that it is zero: the kernel rejects a non-zero byte
    /// past the fields it knows (`CHECK_ATTR`).
    _pad: u32,
}

/// `struct xdp_md` as `ctx_in`: `data_end` must be the frame's length; the
/// device the frame "arrived" on is what `XDP_TX` sends it out of.
#[repr(C)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// Runs an XDP program `repeat` times on live frames made from `frame`,
/// arriving on `ifindex` (in the calling thread's namespace): what it
/// returns `XDP_TX` for leaves through that device's `ndo_xdp_xmit`.
pub(super) fn run_live(prog: RawFd, frame: &[u8], ifindex: u32, repeat: u32) -> io::Result<()> {
    let ctx = XdpMd {
        data: 0,
        data_end: frame.len() as u32,
        data_meta: 0,
        ingress_ifindex: ifindex,
        rx_queue_index: 0,
        egress_ifindex: 0,
    };
    let mut attr = TestRun {
        prog_fd: prog as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        repeat,
        ctx_size_in: size_of::<XdpMd>() as u32,
        ctx_in: std::ptr::from_ref(&ctx) as u64,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        // The most frames the kernel sends per batch (NAPI's budget x4).
        batch_size: 256,
        ..TestRun::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut attr).map(drop)
}

/// Runs an XDP program once on a copy of `frame` (no device): its return
/// code and the frame as it left the program.
pub fn run_once(prog: RawFd, frame: &[u8]) -> io::Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; frame.len() + 256];
    let mut attr = TestRun {
        prog_fd: prog as u32,
        data_size_in: frame.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_size_out: out.len() as u32,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ..TestRun::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    out.truncate(attr.data_size_out as usize);
    Ok((attr.retval, out))
}
