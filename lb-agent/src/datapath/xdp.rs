//! The XDP fast path on the node's external devices
//! (`--bpf-lb-acceleration`, Cilium's flag): `lb_xdp` in driver (native)
//! mode beside the tc programs, which stay attached and handle whatever
//! XDP passes. Its links are pinned under `links/` as `xdp-<device>`, so
//! that they outlive the agent; a new agent replaces the program of a
//! pinned link in place (`BPF_LINK_UPDATE`: no moment without a program),
//! and the pins of devices no longer wanted (all of them when acceleration
//! is disabled) are removed, which detaches their programs. `lb-agent
//! cleanup` removes every pin under `links/`, these too. The program may
//! redirect to the devices it runs on natively: their interface indexes
//! are written to its global `LB_XDP_DEVICES` after each attachment.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
};

use aya::{
    Ebpf,
    maps::Array,
    programs::{
        Xdp, XdpMode,
        links::{FdLink, PinnedLink},
        xdp::XdpLink,
    },
};

use lb_common::{XDP_DEVICES_MAX, XDP_DEVICES_SECTION};

use super::{
    error::{Error, io_err},
    layout,
    loader::{pin_replacing, remove_if_present},
    pins::Pins,
    tc,
};

/// The fast path's function in the object.
pub const FUNCTION: &str = "lb_xdp";
/// Prefix of its link pins.
const PREFIX: &str = "xdp-";

/// `--bpf-lb-acceleration`: whether and how the XDP fast path is attached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Acceleration {
    /// tc only (the default).
    #[default]
    Disabled,
    /// Native XDP on every external device; a device that cannot have it
    /// is an error (it keeps tc only, counted unattached, retried).
    Native,
    /// Native XDP where the driver can; other devices stay on tc only.
    BestEffort,
}

/// How a device ended up (with its interface index then: a device deleted
/// and created again lost its program).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// `lb_xdp` in driver mode.
    Native,
    /// tc only: the driver refused native XDP (best-effort).
    TcOnly,
}

/// A device's part of a pin name (bpffs refuses dots).
fn pin_name(device: &str) -> String {
    format!("{PREFIX}{}", device.replace('.', "+"))
}

/// Attaches (or replaces) the fast path on each device of `devices` not in
/// `attached` yet, and removes it from devices not in `devices`. Returns
/// the devices that failed (`Native` only), with the first error.
pub fn sync(
    ebpf: &mut Ebpf,
    pins: &Pins,
    accel: Acceleration,
    devices: &BTreeSet<String>,
    attached: &mut BTreeMap<String, (u32, Attached)>,
) -> Result<(), Error> {
    attached.retain(|d, (index, _)| tc::if_index(d) == *index);
    let wanted: BTreeSet<String> = if accel == Acceleration::Disabled {
        BTreeSet::new()
    } else {
        devices.clone()
    };
    let mut failed = Vec::new();
    let new: Vec<&String> = wanted
        .iter()
        .filter(|d| !attached.contains_key(*d))
        .collect();
    for device in new {
        match attach(ebpf, pins, device) {
            Ok(()) => {
                tracing::info!(device, mode = "native", "XDP fast path attached");
                attached.insert(device.clone(), (tc::if_index(device), Attached::Native));
            }
            Err(e) if accel == Acceleration::BestEffort => {
                tracing::warn!(
                    device,
                    error = &e as &dyn std::error::Error,
                    "no native XDP on this device: it stays on tc only"
                );
                attached.insert(device.clone(), (tc::if_index(device), Attached::TcOnly));
            }
            Err(e) => failed.push((device.clone(), e)),
        }
    }
    attached.retain(|d, _| wanted.contains(d));
    let keep: BTreeSet<String> = attached
        .iter()
        .filter(|(_, (_, a))| *a == Attached::Native)
        .map(|(d, _)| pin_name(d))
        .chain(failed.iter().map(|(d, _)| pin_name(d)))
        .collect();
    for pin in linked(pins)? {
        if !keep.contains(&pin) {
            remove_if_present(&pins.link(&pin))?;
        }
    }
    if accel != Acceleration::Disabled {
        publish(ebpf, attached)?;
    }
    let (names, mut errors): (Vec<String>, Vec<Error>) = failed.into_iter().unzip();
    if errors.is_empty() {
        return Ok(());
    }
    Err(Error::Devices {
        devices: names,
        source: Box::new(errors.swap_remove(0)),
    })
}

/// Tells the program which devices it runs on natively (it may redirect
/// to those): `LB_XDP_DEVICES`, at most [`XDP_DEVICES_MAX`] of them.
fn publish(ebpf: &mut Ebpf, attached: &BTreeMap<String, (u32, Attached)>) -> Result<(), Error> {
    let global = |source| Error::Global {
        section: XDP_DEVICES_SECTION,
        source,
    };
    let mut list = [0u32; XDP_DEVICES_MAX];
    let native = attached
        .values()
        .filter(|(index, how)| *how == Attached::Native && *index != 0);
    for (slot, (index, _)) in list.iter_mut().zip(native) {
        *slot = *index;
    }
    let map = ebpf
        .map_mut(XDP_DEVICES_SECTION)
        .ok_or(Error::MissingGlobal(XDP_DEVICES_SECTION))?;
    let mut array: Array<_, [u32; XDP_DEVICES_MAX]> = Array::try_from(map).map_err(global)?;
    array.set(0, list, 0).map_err(global)
}

/// Puts `lb_xdp` on `device` in driver mode: into the pinned link an
/// earlier agent left there, else a new link, pinned.
fn attach(ebpf: &mut Ebpf, pins: &Pins, device: &str) -> Result<(), Error> {
    let name = FUNCTION;
    // `lb_xdp` parses Ethernet frames only.
    let link_type = tc::link_type(device)?;
    if link_type != tc::ARPHRD_ETHER {
        return Err(Error::LinkType {
            device: device.to_owned(),
            link_type,
        });
    }
    let prog_err = |source| Error::Program { name, source };
    let program: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or(Error::MissingProgram(name))?
        .try_into()
        .map_err(prog_err)?;
    // Verified only when wanted: it is the costliest program to load.
    if program.fd().is_err() {
        program.load().map_err(prog_err)?;
    }
    let pin = pin_name(device);
    let path = pins.link(&pin);
    if let Ok(pinned) = PinnedLink::from_pin(&path)
        && let Ok(link) = XdpLink::try_from(FdLink::from(pinned))
    {
        // The link stays pinned; its program is swapped atomically. A link
        // whose device is gone fails: a new one replaces its pin.
        if let Ok(id) = program.attach_to_link(link) {
            // Owned by the pin already: dropping ours must not detach it.
            std::mem::forget(program.take_link(id).map_err(prog_err)?);
            return Ok(());
        }
    }
    let id = program.attach(device, XdpMode::Driver).map_err(prog_err)?;
    let link: FdLink = program
        .take_link(id)
        .map_err(prog_err)?
        .try_into()
        .map_err(|source| Error::Link { name, source })?;
    let links = pins.links_dir();
    fs::create_dir_all(&links).map_err(io_err("creating", &links))?;
    pin_replacing(link, pins, &pin)
}

/// The pin names of our XDP links.
pub fn linked(pins: &Pins) -> Result<Vec<String>, Error> {
    let mut names = layout::pinned(&pins.links_dir())?;
    names.retain(|name| name.starts_with(PREFIX) && !name.ends_with("_new"));
    Ok(names)
}
