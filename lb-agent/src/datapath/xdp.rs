//! The XDP fast path on the node's external devices
//! (`--bpf-lb-acceleration`, Cilium's flag): `lb_xdp` in driver (native)
//! mode beside the tc programs, which stay attached and handle whatever
//! XDP passes. Its links are pinned under `links/` as `xdp-<device>`, so
//! that they outlive the agent; a new agent replaces the program of a
//! pinned link in place (`BPF_LINK_UPDATE`: no moment without a program),
//! and the pins of devices no longer wanted (all of them when acceleration
//! is disabled) are removed and their links detached. `lb-agent cleanup`
//! does so with every pin under `links/`, these too. The program may
//! redirect to the devices it runs on natively: their interface indexes
//! are written to its global `LB_XDP_DEVICES` after each attachment.
//!
//! On a veth, a frame sent back out (`XDP_TX`) reaches the peer only if
//! the peer runs an XDP program of its own. Without NAPI at the peer the
//! kernel drops it; with GRO on there the peer has NAPI, and the frame is
//! put in its ring, but the kernel (6.18) wakes that NAPI for `XDP_TX`'d
//! frames only if the peer has an XDP program: they wait there (256 of
//! them; the rest are dropped). The peer is usually in another namespace,
//! out of the agent's reach, so the agent says so once per such device,
//! naming it, and counts them (`lbagent_xdp_veth_devices`).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
};

use aya::{
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
    loader::{pin_replacing, unpin_link},
    pins::{DeviceHook, Pins},
    programs::Programs,
    tc,
};

/// The fast path's function in the object.
pub const FUNCTION: &str = "lb_xdp";

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
    /// `lb_xdp` in driver mode; on a veth (whose peer needs an XDP program
    /// of its own for the frames sent out of it).
    Native { veth: bool },
    /// tc only: the driver refused native XDP (best-effort).
    TcOnly,
}

impl Attached {
    /// Whether `lb_xdp` runs on the device.
    pub fn native(self) -> bool {
        matches!(self, Self::Native { .. })
    }
}

/// Whether `device` is a veth (its driver, as `ethtool -i` names it); a
/// device without driver information is not.
pub(super) fn is_veth(device: &str) -> bool {
    tc::driver(device).is_ok_and(|d| d == "veth")
}

/// Said once per veth the fast path is attached to (again only if the
/// device goes and comes back).
fn warn_veth(device: &str) {
    tracing::warn!(
        device,
        "native XDP on a veth: the frames the fast path sends back out of it (XDP_TX) reach \
         its peer only if the peer runs an XDP program of its own (an XDP_PASS program in \
         driver mode; GRO on the peer is not enough), else they are lost while xdp_forwarded \
         counts them; see the README's troubleshooting"
    );
}

/// Attaches (or replaces) the fast path on each device of `devices` not in
/// `attached` yet, and removes it from devices not in `devices`. Returns
/// the devices that failed (`Native` only), with the first error.
pub fn sync(
    programs: &mut Programs,
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
        match attach(programs, pins, device) {
            Ok(()) => {
                tracing::info!(device, mode = "native", "XDP fast path attached");
                let veth = is_veth(device);
                if veth {
                    warn_veth(device);
                }
                attached.insert(
                    device.clone(),
                    (tc::if_index(device), Attached::Native { veth }),
                );
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
        .filter(|(_, (_, a))| a.native())
        .map(|(d, _)| DeviceHook::Xdp.pin_name(d))
        .chain(failed.iter().map(|(d, _)| DeviceHook::Xdp.pin_name(d)))
        .collect();
    for pin in linked(pins)? {
        if !keep.contains(&pin) {
            unpin_link(&pins.link(&pin))?;
        }
    }
    if accel != Acceleration::Disabled {
        publish(programs, attached)?;
    }
    Error::per_device(failed)
}

/// Tells the program which devices it runs on natively (it may redirect
/// to those): `LB_XDP_DEVICES`, at most [`XDP_DEVICES_MAX`] of them.
fn publish(
    programs: &mut Programs,
    attached: &BTreeMap<String, (u32, Attached)>,
) -> Result<(), Error> {
    let global = |source| Error::Global {
        section: XDP_DEVICES_SECTION,
        source,
    };
    let mut list = [0u32; XDP_DEVICES_MAX];
    let native = attached
        .values()
        .filter(|(index, how)| how.native() && *index != 0);
    for (slot, (index, _)) in list.iter_mut().zip(native) {
        *slot = *index;
    }
    let map = programs
        .map_mut(XDP_DEVICES_SECTION)
        .ok_or(Error::MissingGlobal(XDP_DEVICES_SECTION))?;
    let mut array: Array<_, [u32; XDP_DEVICES_MAX]> = Array::try_from(map).map_err(global)?;
    array.set(0, list, 0).map_err(global)
}

/// Puts `lb_xdp` on `device` in driver mode: into the pinned link an
/// earlier agent left there, else a new link, pinned.
fn attach(programs: &mut Programs, pins: &Pins, device: &str) -> Result<(), Error> {
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
    // Verified only when wanted: it is the costliest program to load.
    let program: &mut Xdp = programs.get(name)?;
    if program.fd().is_err() {
        program.load().map_err(prog_err)?;
        if let Err(e) = programs.pin(name) {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "pinning the XDP program failed: a restart will load the programs again"
            );
        }
    }
    let program: &mut Xdp = programs.get(name)?;
    let pin = DeviceHook::Xdp.pin_name(device);
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
    let mut names = pins.device_links(DeviceHook::Xdp)?;
    names.retain(|name| !name.ends_with("_new"));
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_native_device_runs_the_fast_path() {
        assert!(Attached::Native { veth: false }.native());
        assert!(Attached::Native { veth: true }.native());
        assert!(!Attached::TcOnly.native());
    }
}

/// Which devices are veths, on real devices in a network namespace of the
/// test's own: needs root (`ip netns`, `setns`) and fails without it.
/// Skipped by `cargo test -p lb-agent --lib -- --skip privileged`. No
/// packet is sent.
#[cfg(test)]
mod privileged {
    use lb_test_netns::{TestNetns, require_root};

    use super::*;

    #[test]
    fn a_veth_is_told_from_a_tun_loopback_and_a_missing_device() {
        require_root();
        let ns = TestNetns::new();
        ns.ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
        ns.ip(&["tuntap", "add", "t0", "mode", "tun"]);
        let found = ns.run(|| {
            ["v0", "v1", "t0", "lo", "nosuchdev"].map(|d| (d, is_veth(d), tc::driver(d).ok()))
        });
        assert_eq!(
            found,
            [
                ("v0", true, Some("veth".to_owned())),
                ("v1", true, Some("veth".to_owned())),
                ("t0", false, Some("tun".to_owned())),
                // No driver information: not a veth.
                ("lo", false, None),
                ("nosuchdev", false, None),
            ]
        );
    }
}
