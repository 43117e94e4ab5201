//! The tc programs on the node's external devices: TCX links pinned under
//! `links/` as `tc-in-<device>` and `tc-out-<device>`, so that they outlive
//! the agent, replaced make-before-break like the socket programs (the new
//! link is pinned, then renamed over the old pin, then the old link is
//! detached), and removed (unpinned and detached) for devices no longer
//! wanted.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
};

use aya::{
    programs::{
        LinkOrder, SchedClassifier, TcAttachType,
        links::FdLink,
        tc::{
            NlOptions, SchedClassifierLink, TcAttachOptions, TcError, TcHandle, qdisc_add_clsact,
            qdisc_detach_program,
        },
    },
    util::KernelVersion,
};
use rustix::net::{AddressFamily, SocketType, netdevice::name_to_index, socket};

use super::{
    error::{Error, io_err},
    loader::{pin_replacing, unpin_link},
    pins::{DeviceHook, Pins},
    programs::Programs,
};

/// A tc program: its function in the object for Ethernet devices and for
/// devices without a link-layer header (empty: none), its hook, its links'
/// pins.
type Row = (&'static str, &'static str, TcAttachType, DeviceHook);

/// The tc programs of the node's devices.
const PROGRAMS: [Row; 2] = [
    (
        "lb_tc_ingress",
        "lb_tc_l3_in",
        TcAttachType::Ingress,
        DeviceHook::TcIngress,
    ),
    (
        "lb_tc_egress",
        "lb_tc_l3_out",
        TcAttachType::Egress,
        DeviceHook::TcEgress,
    ),
];

/// The tc programs' functions, the costliest to verify first (ingress
/// holds the new-flow path).
pub const FUNCTIONS: [&str; 4] = [PROGRAMS[0].0, PROGRAMS[0].1, PROGRAMS[1].0, PROGRAMS[1].1];

/// The tc programs of pods' host-side interfaces (Ethernet only: veth).
const POD_PROGRAMS: [Row; 2] = [
    (
        "lb_tc_pod_in",
        "",
        TcAttachType::Ingress,
        DeviceHook::PodIngress,
    ),
    (
        "lb_tc_pod_out",
        "",
        TcAttachType::Egress,
        DeviceHook::PodEgress,
    ),
];

/// The pods' programs' functions.
pub const POD_FUNCTIONS: [&str; 2] = [POD_PROGRAMS[0].0, POD_PROGRAMS[1].0];

/// `ARPHRD_ETHER`: a device whose packets start with an Ethernet header.
pub(super) const ARPHRD_ETHER: u16 = 1;
/// Link types whose packets start with the IP header: `ARPHRD_NONE` (TUN,
/// WireGuard), `ARPHRD_TUNNEL` (IPIP), `ARPHRD_TUNNEL6`, `ARPHRD_SIT`,
/// `ARPHRD_IPGRE`, `ARPHRD_IP6GRE`, `ARPHRD_PPP`, `ARPHRD_RAWIP`.
const ARPHRD_L3: [u16; 8] = [65534, 768, 769, 776, 778, 823, 512, 519];

/// The program of a `PROGRAMS` row for `device`: the Ethernet one, the
/// one without a link-layer header, or an error naming a link type the
/// programs cannot parse.
fn program_for(row: &Row, device: &str) -> Result<&'static str, Error> {
    match link_type(device)? {
        ARPHRD_ETHER => Ok(row.0),
        t if ARPHRD_L3.contains(&t) && !row.1.is_empty() => Ok(row.1),
        link_type => Err(Error::LinkType {
            device: device.to_owned(),
            link_type,
        }),
    }
}

/// `device`'s link type (`ARPHRD_*`), as `SIOCGIFHWADDR` reports it in
/// this network namespace.
pub(super) fn link_type(device: &str) -> Result<u16, Error> {
    let req = device_ioctl(device, libc::SIOCGIFHWADDR, |_| {})?;
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr.sa_family })
}

/// `ETHTOOL_GDRVINFO`: a device's driver information.
const ETHTOOL_GDRVINFO: u32 = 0x03;

/// `struct ethtool_drvinfo` (`linux/ethtool.h`, 196 bytes), which
/// `ETHTOOL_GDRVINFO` fills.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    /// `version` to `regdump_len`, unread.
    _rest: [u8; 160],
}

/// `device`'s driver, as `ethtool -i` names it (`veth`, `virtio_net`,
/// `mlx5_core`, ...): `SIOCETHTOOL` with `ETHTOOL_GDRVINFO`, in this
/// network namespace. A device without driver information (`lo`) is an
/// error.
pub(super) fn driver(device: &str) -> Result<String, Error> {
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        _rest: [0; 160],
    };
    let data: *mut libc::c_char = std::ptr::from_mut(&mut info).cast();
    device_ioctl(device, libc::SIOCETHTOOL, |req| {
        req.ifr_ifru.ifru_data = data;
    })?;
    Ok(c_field(&info.driver).to_owned())
}

/// A NUL-padded C string field, up to its first NUL (all of it if it has
/// none); invalid UTF-8 is an empty name.
fn c_field(field: &[u8]) -> &str {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).unwrap_or_default()
}

/// Runs the `SIOC*` ioctl `request` on `device`, on a datagram socket of
/// this network namespace, with an `ifreq` naming the device that `fill`
/// completes first (whatever it points to must outlive the call); the
/// `ifreq` as the kernel left it.
fn device_ioctl(
    device: &str,
    request: libc::c_ulong,
    fill: impl FnOnce(&mut libc::ifreq),
) -> Result<libc::ifreq, Error> {
    let io = |source| Error::Device {
        device: device.to_owned(),
        source,
    };
    let name = device.as_bytes();
    if name.len() >= libc::IFNAMSIZ {
        return Err(io(std::io::Error::from_raw_os_error(libc::ENODEV)));
    }
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).map_err(io)?;
    // SAFETY: an all-zero ifreq is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    fill(&mut req);
    // SAFETY: the ioctls given here read the name (and what `fill` pointed
    // the union at, alive across the call, as its caller keeps it) and
    // write the ifreq they are given, which outlives the call.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&socket), request, &mut req) };
    if r != 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    Ok(req)
}

/// The devices our tc links are pinned for (an earlier agent's, at start).
pub fn linked_devices(pins: &Pins) -> Result<BTreeSet<String>, Error> {
    let hook = PROGRAMS[0].3;
    Ok(pins
        .device_links(hook)?
        .iter()
        .filter_map(|pin| hook.device(pin))
        .collect())
}

/// How the tc programs are attached to a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcHook {
    /// TCX links, pinned under `links/` (kernel 6.6+).
    Tcx,
    /// cls_bpf filters in direct-action mode on a clsact qdisc, at a fixed
    /// priority and handle: they stay when the agent exits, and a new
    /// agent replaces them in one netlink request.
    Clsact,
}

impl TcHook {
    /// TCX where the kernel has it and `enable_tcx` allows it, else clsact.
    pub fn choose(enable_tcx: bool) -> Self {
        // An unreadable version is taken for an old kernel: clsact works
        // everywhere.
        let tcx = KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0));
        if enable_tcx && tcx {
            Self::Tcx
        } else {
            Self::Clsact
        }
    }
}

/// Our clsact filters' priority and handle: fixed, so that a new agent
/// finds an earlier one's filters to replace.
const CLSACT_PRIORITY: u16 = 1;
const CLSACT_HANDLE: TcHandle = TcHandle::new(0, 0xb1);

/// Attaches both tc programs to every device of `devices` with `hook`
/// (replacing an earlier agent's there) that does not have them yet
/// (`attached`: the devices this agent attached them to, with their index
/// then: a device deleted and created again has a new one), and detaches
/// them from devices we attached before (TCX pins, and this agent's clsact
/// filters) that are not in `devices` any more. A device that fails keeps
/// whatever it had and does not hold the others back: [`Error::Devices`]
/// names it.
pub fn attach(
    programs: &mut Programs,
    pins: &Pins,
    hook: TcHook,
    devices: &BTreeSet<String>,
    attached: &mut BTreeMap<String, u32>,
) -> Result<(), Error> {
    attach_rows(&PROGRAMS, programs, pins, hook, devices, attached)
}

/// [`attach`] for the pods' programs on pods' host-side interfaces.
pub fn attach_pods(
    programs: &mut Programs,
    pins: &Pins,
    hook: TcHook,
    devices: &BTreeSet<String>,
    attached: &mut BTreeMap<String, u32>,
) -> Result<(), Error> {
    attach_rows(&POD_PROGRAMS, programs, pins, hook, devices, attached)
}

/// [`attach`] for the programs of `rows`.
fn attach_rows(
    rows: &[Row; 2],
    programs: &mut Programs,
    pins: &Pins,
    hook: TcHook,
    devices: &BTreeSet<String>,
    attached: &mut BTreeMap<String, u32>,
) -> Result<(), Error> {
    let links = pins.links_dir();
    fs::create_dir_all(&links).map_err(io_err("creating", &links))?;
    let mut failed = Vec::new();
    // A program attaches once per hook: a second TCX attach of the same
    // program fails (EEXIST).
    let new: Vec<(&String, u32)> = devices
        .iter()
        .map(|d| (d, if_index(d)))
        .filter(|(d, index)| attached.get(*d) != Some(index))
        .collect();
    for (device, index) in new {
        // Egress first: alone it translates only flows ingress recorded,
        // so no device ever DNATs a flow whose replies it cannot reverse.
        let done = rows.iter().rev().try_for_each(|row| {
            let name = program_for(row, device)?;
            let (_, _, attach_type, link_pins) = *row;
            match hook {
                TcHook::Tcx => {
                    attach_tcx(programs, pins, name, attach_type, device, link_pins)?;
                    // Filters an earlier agent attached with clsact go once
                    // the links run.
                    for n in [row.0, row.1].into_iter().filter(|n| !n.is_empty()) {
                        let _ = qdisc_detach_program(device, attach_type, n);
                    }
                    Ok(())
                }
                TcHook::Clsact => attach_clsact(programs, name, attach_type, device),
            }
        });
        match done {
            Ok(()) => {
                attached.insert(device.clone(), index);
            }
            Err(e) => failed.push((device.clone(), e)),
        }
    }
    for (device, _) in attached.extract_if(.., |d, _| !devices.contains(d)) {
        if hook == TcHook::Clsact {
            detach_clsact(rows, &device);
        }
    }
    let wanted: BTreeSet<String> = match hook {
        TcHook::Tcx => rows
            .iter()
            .flat_map(|&(_, _, _, pins)| devices.iter().map(move |d| pins.pin_name(d)))
            .collect(),
        TcHook::Clsact => BTreeSet::new(),
    };
    for pin in linked_rows(rows, pins)? {
        if !wanted.contains(&pin) {
            unpin_link(&pins.link(&pin))?;
        }
    }
    Error::per_device(failed)
}

/// Attaches the loaded program `name` to `device`'s `hook` with a TCX
/// link, pinned make-before-break as `link_pins`' pin of `device`.
fn attach_tcx(
    programs: &mut Programs,
    pins: &Pins,
    name: &'static str,
    hook: TcAttachType,
    device: &str,
    link_pins: DeviceHook,
) -> Result<(), Error> {
    let prog_err = |source| Error::Program { name, source };
    let program: &mut SchedClassifier = programs.get(name)?;
    let pin = link_pins.pin_name(device);
    // An adopted program may be on the device already, through the link
    // pinned there: TCX refuses it a second time (EEXIST), and it is
    // what a new link would attach.
    let ours = program.info().map_err(prog_err)?.id();
    if pins.link(&pin).exists()
        && SchedClassifier::query_tcx(device, hook)
            .is_ok_and(|(_, on)| on.iter().any(|p| p.id() == ours))
    {
        return Ok(());
    }
    let id = program
        .attach_with_options(
            device,
            hook,
            TcAttachOptions::TcxOrder(LinkOrder::default()),
        )
        .map_err(prog_err)?;
    let link: FdLink = program
        .take_link(id)
        .map_err(prog_err)?
        .try_into()
        .map_err(|source| Error::Link { name, source })?;
    pin_replacing(link, pins, &pin)
}

/// Attaches the loaded program `name` to `device`'s `hook` as our clsact
/// filter: replacing the one there in place (an earlier agent's), else
/// created, with the qdisc if the device has none.
fn attach_clsact(
    programs: &mut Programs,
    name: &'static str,
    hook: TcAttachType,
    device: &str,
) -> Result<(), Error> {
    let prog_err = |source| Error::Program { name, source };
    let program: &mut SchedClassifier = programs.get(name)?;
    let ours = SchedClassifierLink::attached(device, hook, CLSACT_PRIORITY, CLSACT_HANDLE, None)
        .map_err(|e| prog_err(TcError::IoError(e).into()))?;
    let id = match program.attach_to_link(ours) {
        Ok(id) => id,
        // None there yet. An existing qdisc is fine; any other failure to
        // add one shows as the attach's.
        Err(_) => {
            let _ = qdisc_add_clsact(device);
            program
                .attach_with_options(
                    device,
                    hook,
                    TcAttachOptions::Netlink(NlOptions {
                        priority: CLSACT_PRIORITY,
                        handle: CLSACT_HANDLE,
                        ..NlOptions::default()
                    }),
                )
                .map_err(prog_err)?
        }
    };
    // The filter stays when the agent exits, as a pinned link does: a
    // dropped link would detach it.
    std::mem::forget(program.take_link(id).map_err(prog_err)?);
    Ok(())
}

/// Removes our clsact filters of `rows` from `device`, if it has any.
fn detach_clsact(rows: &[Row], device: &str) {
    for (eth, l3, hook, _) in rows {
        for name in [*eth, *l3].into_iter().filter(|n| !n.is_empty()) {
            // Not found (or no qdisc, or no device) leaves nothing to remove.
            let _ = qdisc_detach_program(device, *hook, name);
        }
    }
}

/// What [`detach_clsact_everywhere`] did.
#[derive(Debug, Default)]
pub struct ClsactCleanup {
    /// The interfaces that had filters of ours, now removed.
    pub removed: Vec<String>,
    /// Filters of ours the kernel refused to remove (`EPERM` without
    /// CAP_NET_ADMIN), by interface: they still run.
    pub refused: Vec<(String, std::io::Error)>,
}

/// Removes our clsact filters from every interface of this network
/// namespace (`lb-agent cleanup`: an earlier agent's devices are not
/// recorded anywhere else).
pub fn detach_clsact_everywhere() -> ClsactCleanup {
    let mut done = ClsactCleanup::default();
    for device in interface_names() {
        let mut found = 0;
        for (name, hook) in PROGRAMS
            .iter()
            .chain(&POD_PROGRAMS)
            .flat_map(|(eth, l3, hook, _)| [(*eth, *hook), (*l3, *hook)])
            .filter(|(name, _)| !name.is_empty())
        {
            match qdisc_detach_program(&device, hook, name) {
                Ok(()) => found += 1,
                // Listing needs no privilege, removing does: a refusal means
                // the filter is there and stays.
                Err(TcError::NetlinkError(e))
                    if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
                {
                    done.refused.push((
                        device.clone(),
                        std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
                    ));
                }
                // Not found, no qdisc, no device: nothing of ours to remove.
                Err(_) => {}
            }
        }
        if found > 0 {
            done.removed.push(device);
        }
    }
    done
}

/// Whether a device of `attached` is gone or was created again since.
pub fn moved(attached: &BTreeMap<String, u32>) -> bool {
    attached.iter().any(|(d, index)| if_index(d) != *index)
}

/// `device`'s interface index; 0 if there is no such device.
pub(super) fn if_index(device: &str) -> u32 {
    socket(AddressFamily::INET, SocketType::DGRAM, None)
        .and_then(|s| name_to_index(s, device))
        .unwrap_or(0)
}

/// The names of this network namespace's interfaces.
fn interface_names() -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: `if_nameindex` returns null or an array ending in an entry
    // with index 0; its names are C strings; it is freed once, after the
    // last read.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return names;
        }
        let mut entry = list;
        while (*entry).if_index != 0 && !(*entry).if_name.is_null() {
            names.push(
                std::ffi::CStr::from_ptr((*entry).if_name)
                    .to_string_lossy()
                    .into_owned(),
            );
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
    }
    names
}

/// The pin names of our tc links on the node's devices.
pub fn linked(pins: &Pins) -> Result<Vec<String>, Error> {
    linked_rows(&PROGRAMS, pins)
}

/// The pin names of the links of `rows`' programs.
fn linked_rows(rows: &[Row], pins: &Pins) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    for (_, _, _, hook) in rows {
        names.extend(pins.device_links(*hook)?);
    }
    Ok(names)
}

/// The pods' devices our links are pinned for (an earlier agent's, at
/// start).
pub fn linked_pod_devices(pins: &Pins) -> Result<BTreeSet<String>, Error> {
    let hook = POD_PROGRAMS[0].3;
    Ok(pins
        .device_links(hook)?
        .iter()
        .filter_map(|pin| hook.device(pin))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_c_field_ends_at_its_first_nul_or_its_end() {
        let mut field = [0u8; 32];
        field[..4].copy_from_slice(b"veth");
        assert_eq!(c_field(&field), "veth");
        assert_eq!(c_field(b"virtio_net"), "virtio_net");
        assert_eq!(c_field(&[0; 32]), "");
        assert_eq!(c_field(&[0xff, 0]), "");
    }

    #[test]
    fn drvinfo_is_the_kernel_s_196_bytes() {
        assert_eq!(size_of::<EthtoolDrvinfo>(), 196);
        assert_eq!(std::mem::offset_of!(EthtoolDrvinfo, driver), 4);
    }
}
