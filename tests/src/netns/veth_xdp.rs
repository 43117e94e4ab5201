//! What XDP on a veth needs of the bed around it: frames an XDP program
//! sends back out (`XDP_TX`) arrive at the peer only if the peer runs an
//! XDP program of its own ([`xdp_pass`]): GRO gives the peer NAPI too,
//! which takes redirected frames, but the kernel (6.18) wakes it for
//! `XDP_TX`'d ones only if the peer has an XDP program, and they stay in
//! its ring (the sender's `xdp_tx` counts them, then `xdp_tx_errors`); and
//! an XDP program sees a sender's partial checksum as it is (a veth hands
//! on `CHECKSUM_PARTIAL` packets, which a NIC never delivers), so senders
//! compute theirs in full ([`tx_checksum_off`]).

use std::os::fd::{FromRawFd as _, OwnedFd};

use anyhow::bail;

use super::within;

/// `SIOCETHTOOL`, and `ETHTOOL_STXCSUM` (set transmit checksumming).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_STXCSUM: u32 = 0x17;

/// Turns transmit checksum offload off on `dev` in namespace `ns`: its
/// packets leave with complete checksums.
pub fn tx_checksum_off(ns: &str, dev: &str) -> anyhow::Result<()> {
    within(ns, || {
        // struct ethtool_value { cmd, data }.
        let mut value = [ETHTOOL_STXCSUM, 0u32];
        // SAFETY: an all-zero ifreq is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(dev.as_bytes()) {
            *d = *s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = value.as_mut_ptr().cast();
        // SAFETY: a datagram socket of this thread's namespace.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        // SAFETY: just opened, ours alone.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: SIOCETHTOOL reads the ifreq and the ethtool_value it
        // points to, both alive across the call.
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                SIOCETHTOOL,
                &mut req,
            )
        };
        if rc != 0 {
            bail!(
                "ETHTOOL_STXCSUM off on {dev} in {ns}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    })
}

/// An XDP program that passes every frame, attached to a device by a BPF
/// link; detached when dropped.
pub struct XdpPass {
    _link: OwnedFd,
}

/// Attaches an `XDP_PASS` program to `dev` in namespace `ns` in driver
/// mode (raw bpf(2) calls: aya loads only ELF objects).
pub fn xdp_pass(ns: &str, dev: &str) -> anyhow::Result<XdpPass> {
    within(ns, || {
        let name = std::ffi::CString::new(dev)?;
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            bail!("no device {dev} in {ns}");
        }
        // mov64 r0, XDP_PASS (2); exit
        let insns: [u64; 2] = [0x0000_0002_0000_00b7, 0x0000_0000_0000_0095];
        let license = c"GPL";
        // union bpf_attr for BPF_PROG_LOAD: prog_type, insn_cnt, insns,
        // license.
        let mut load = [0u8; 128];
        load[0..4].copy_from_slice(&6u32.to_ne_bytes()); // BPF_PROG_TYPE_XDP
        load[4..8].copy_from_slice(&2u32.to_ne_bytes());
        load[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
        load[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
        // BPF_PROG_LOAD (5): bpf(2) reads `load`, whose pointers name
        // `insns` and `license`, alive across the call.
        // SAFETY: as said.
        let prog = unsafe { libc::syscall(libc::SYS_bpf, 5, load.as_ptr(), load.len()) };
        if prog < 0 {
            bail!("BPF_PROG_LOAD: {}", std::io::Error::last_os_error());
        }
        // SAFETY: a new fd, ours alone.
        let prog = unsafe { OwnedFd::from_raw_fd(prog as i32) };
        // BPF_LINK_CREATE (28): prog_fd, target_ifindex, attach_type
        // (BPF_XDP, 37), flags (XDP_FLAGS_DRV_MODE, 4).
        let mut link = [0u8; 128];
        let prog_fd = std::os::fd::AsRawFd::as_raw_fd(&prog) as u32;
        for (i, word) in [prog_fd, ifindex, 37, 4].into_iter().enumerate() {
            link[4 * i..4 * i + 4].copy_from_slice(&word.to_ne_bytes());
        }
        // SAFETY: bpf(2) reads `link`, alive across the call.
        let fd = unsafe { libc::syscall(libc::SYS_bpf, 28, link.as_ptr(), link.len()) };
        if fd < 0 {
            bail!(
                "BPF_LINK_CREATE (XDP on {dev} in {ns}): {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: a new fd, ours alone.
        let link = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(XdpPass { _link: link })
    })
}
