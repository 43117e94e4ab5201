//! A packet generator and a packet counter on XDP, for packets-per-second
//! benchmarks on veths (this kernel has no pktgen; `xdp-trafficgen` does
//! not load here).
//!
//! * [`Generator`]: run in a client's namespace, it sends UDP frames (or
//!   TCP SYNs, a SYN flood) out of the client's veth at full rate: `BPF_PROG_TEST_RUN` with
//!   `BPF_F_TEST_XDP_LIVE_FRAMES` runs a tiny XDP program on frames made
//!   from one template ([`Frame`]), "arriving" on the veth; the program
//!   picks a flow (a source port out of `flows`) and returns `XDP_TX`, so
//!   the frame leaves through the veth to its peer. One thread, one CPU.
//! * [`Counter`]: attached natively to a receiving veth, it counts UDP
//!   frames per CPU and drops them (ARP and neighbour discovery pass), so
//!   what is measured is frames delivered, not a socket's throughput.
//!
//! The peer of the generator's veth must run NAPI to take `XDP_TX`ed
//! frames: an XDP program (the counter) or GRO ([`iface::gro_on`]). GRO
//! does here because `BPF_PROG_TEST_RUN` sends an `XDP_TX`'d frame as a
//! redirect to the same device, which wakes the peer's NAPI; a driver's
//! `XDP_TX` (the agent's) needs an XDP program at the peer
//! (`crate::netns::xdp_pass`).
//! Both programs are assembled in [`progs`] and loaded with raw `bpf(2)`
//! ([`bpf`]): they stay out of the agent's object. Everything is held by
//! file descriptors: the counter's link detaches when it is dropped, or
//! when the process dies.

mod bpf;
mod frame;
pub mod iface;
mod progs;

use std::{
    io,
    net::{IpAddr, SocketAddr},
    os::fd::{AsRawFd as _, OwnedFd},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

pub use self::{
    bpf::{load_xdp, run_once},
    frame::{BALANCE, BASE_PORT, Frame, MAX_FLOWS, MAX_LEN, Spec, SpecError},
    progs::{XDP_DROP, XDP_PASS, XDP_TX},
};

/// Frames per `BPF_PROG_TEST_RUN` call: about 10 ms at this machine's
/// rates, so a run stops close to its deadline.
const CHUNK: u32 = 1 << 16;

/// What a generator run sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sent {
    /// Frames the program returned `XDP_TX` for (offered to the veth; its
    /// peer may still drop some when its ring is full).
    pub frames: u64,
    pub seconds: f64,
    /// `frames / seconds`.
    pub rate: f64,
}

/// The generator, loaded for one frame on one device.
pub struct Generator {
    prog: OwnedFd,
    frame: Frame,
    ifindex: u32,
}

impl Generator {
    /// UDP frames from `dev` (in the calling thread's namespace, its MAC
    /// the source) to `dst_mac`, `src` -> `dst`, `len` bytes each, over
    /// `flows` source ports (a power of two up to [`MAX_FLOWS`]).
    pub fn new(
        dev: &str,
        dst_mac: [u8; 6],
        ends: (IpAddr, SocketAddr),
        len: usize,
        flows: u32,
    ) -> io::Result<Self> {
        Self::with(dev, dst_mac, ends, len, flows, false)
    }

    /// [`Self::new`] for TCP SYNs, a SYN flood from `flows` source ports.
    pub fn syn(
        dev: &str,
        dst_mac: [u8; 6],
        ends: (IpAddr, SocketAddr),
        flows: u32,
    ) -> io::Result<Self> {
        Self::with(dev, dst_mac, ends, 0, flows, true)
    }

    fn with(
        dev: &str,
        dst_mac: [u8; 6],
        (src, dst): (IpAddr, SocketAddr),
        len: usize,
        flows: u32,
        syn: bool,
    ) -> io::Result<Self> {
        let spec = Spec {
            src_mac: iface::mac(dev)?,
            dst_mac,
            src,
            dst,
            len,
            syn,
        };
        let frame =
            Frame::new(&spec).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        if !flows.is_power_of_two() || flows > MAX_FLOWS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("flows {flows}: a power of two up to {MAX_FLOWS}"),
            ));
        }
        Ok(Self {
            prog: load_xdp("lbt_pktgen", &progs::generator(&frame, flows))?,
            frame,
            ifindex: iface::ifindex(dev)?,
        })
    }

    /// Sends `frames` frames as fast as one thread can.
    pub fn send(&self, frames: u32) -> io::Result<()> {
        bpf::run_live(
            self.prog.as_raw_fd(),
            &self.frame.bytes,
            self.ifindex,
            frames,
        )
    }

    /// Sends for `seconds`, or until `max` frames if that comes first.
    pub fn run(&self, seconds: f64, max: Option<u64>) -> io::Result<Sent> {
        let max = max.unwrap_or(u64::MAX);
        let deadline = Duration::from_secs_f64(seconds);
        let start = Instant::now();
        let mut frames = 0u64;
        while frames < max && start.elapsed() < deadline {
            let n = (max - frames).min(u64::from(CHUNK)) as u32;
            self.send(n)?;
            frames += u64::from(n);
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(Sent {
            frames,
            seconds,
            rate: frames as f64 / seconds,
        })
    }
}

/// Keeps the calling thread on `cpu`, so that a report can say which CPU
/// generated and which forwarded.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside
    // it (the macro bounds-checks `cpu`); sched_setaffinity(0) changes
    // only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The counter, attached natively to one device; detached on drop.
pub struct Counter {
    _link: OwnedFd,
    map: OwnedFd,
}

impl Counter {
    /// Attaches to `dev` in the calling thread's namespace.
    pub fn attach(dev: &str) -> io::Result<Self> {
        let map = bpf::percpu_u64()?;
        let prog = load_xdp("lbt_count", &progs::counter(map.as_raw_fd()))?;
        let link = bpf::attach_xdp_native(prog.as_raw_fd(), iface::ifindex(dev)?)?;
        Ok(Self { _link: link, map })
    }

    /// UDP frames counted so far, per CPU (index = CPU).
    pub fn per_cpu(&self) -> io::Result<Vec<u64>> {
        bpf::read_percpu_u64(self.map.as_raw_fd())
    }
}

/// The generator's and the counter's programs for tests that run them on
/// crafted frames (`BPF_PROG_TEST_RUN` without a device).
pub mod programs {
    use std::os::fd::OwnedFd;

    use super::{Frame, bpf, load_xdp, progs};

    /// The generator's program for `frame` over `flows` source ports.
    pub fn generator(frame: &Frame, flows: u32) -> std::io::Result<OwnedFd> {
        load_xdp("lbt_pktgen", &progs::generator(frame, flows))
    }

    /// The counter's program and its map (see [`per_cpu`]).
    pub fn counter() -> std::io::Result<(OwnedFd, OwnedFd)> {
        use std::os::fd::AsRawFd as _;
        let map = bpf::percpu_u64()?;
        let prog = load_xdp("lbt_count", &progs::counter(map.as_raw_fd()))?;
        Ok((prog, map))
    }

    /// A counter map's values per CPU.
    pub fn per_cpu(map: &OwnedFd) -> std::io::Result<Vec<u64>> {
        use std::os::fd::AsRawFd as _;
        bpf::read_percpu_u64(map.as_raw_fd())
    }
}
