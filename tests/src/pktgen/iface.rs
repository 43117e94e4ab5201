//! What the generator needs of an interface, asked of the calling thread's
//! network namespace (so [`crate::netns::within`] and `lbt --netns` both
//! see the namespace's devices, where /sys would show the root's).

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

/// `struct ifreq`: a name and a union, of which these calls use the
/// hardware address or a pointer.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: IfrData,
}

#[repr(C)]
union IfrData {
    hwaddr: libc::sockaddr,
    ptr: *mut libc::c_void,
    /// The union's full size (`struct ifmap`, its largest member).
    _size: [u8; 24],
}

impl IfReq {
    fn new(dev: &str) -> io::Result<Self> {
        if dev.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {dev:?}"),
            ));
        }
        let mut name = [0u8; libc::IFNAMSIZ];
        name[..dev.len()].copy_from_slice(dev.as_bytes());
        Ok(Self {
            name,
            data: IfrData { _size: [0; 24] },
        })
    }
}

/// A socket to address ioctls to.
fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl(req: libc::c_ulong, ifr: &mut IfReq) -> io::Result<()> {
    let sock = ctl_socket()?;
    // SAFETY: `ifr` is a live `struct ifreq` for the call; for
    // SIOCETHTOOL its pointer points to a live `struct ethtool_value`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), req, std::ptr::from_mut(ifr)) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The interface's index.
pub fn ifindex(dev: &str) -> io::Result<u32> {
    let name = CString::new(dev).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a NUL-terminated name, read only.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// The interface's MAC address.
pub fn mac(dev: &str) -> io::Result<[u8; 6]> {
    let mut ifr = IfReq::new(dev)?;
    ioctl(libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: SIOCGIFHWADDR filled the union's `hwaddr`.
    let data = unsafe { ifr.data.hwaddr }.sa_data;
    Ok(std::array::from_fn(|i| data[i] as u8))
}

/// Turns GRO on for the interface (`ethtool -K dev gro on`; the machine has
/// no ethtool). A veth takes the generator's frames only while it runs
/// NAPI, which it does with an XDP program or with GRO on (the generator's
/// `XDP_TX` is a redirect under `BPF_PROG_TEST_RUN`, which wakes GRO's
/// NAPI; a driver's `XDP_TX` does not); GRO lets the kernel's stack and tc
/// see those frames as any received packet.
pub fn gro_on(dev: &str) -> io::Result<()> {
    /// `struct ethtool_value` with `ETHTOOL_SGRO`.
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    const ETHTOOL_SGRO: u32 = 0x2c;
    let mut value = EthtoolValue {
        cmd: ETHTOOL_SGRO,
        data: 1,
    };
    let mut ifr = IfReq::new(dev)?;
    ifr.data.ptr = std::ptr::from_mut(&mut value).cast();
    ioctl(libc::SIOCETHTOOL, &mut ifr)
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}
