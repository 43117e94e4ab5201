//! Map layout 1, installed as the agent of commit `bd85fb1` installed it:
//! its eBPF object (`fixtures/lb-ebpf-layout1.o`), the maps pinned under
//! `maps/` by symbol name, the programs attached to the cgroup through links
//! pinned under `links/`. The upgrade tests start from it.

use std::{fs, path::Path};

use anyhow::Context as _;
use aya::{EbpfLoader, maps::HashMap};

pub use crate::install::Frontend;

/// The object of layout 1, as built then.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout1.o");

/// Layout 1's key of `LB4_SERVICES`: slot 0 is the frontend, 1..=count its
/// backends.
#[repr(C)]
#[derive(Clone, Copy)]
struct ServiceKey {
    vip_be: [u8; 4],
    port_be: u16,
    proto: u8,
    _pad0: u8,
    slot: u16,
    _pad1: [u8; 2],
}

/// Layout 1's value of `LB4_SERVICES`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ServiceValue {
    backend_id: u32,
    svc_id: u32,
    count: u16,
    flags: u8,
    _pad0: u8,
}

/// Layout 1's value of `LB4_BACKENDS` (key: backend id).
#[repr(C)]
#[derive(Clone, Copy)]
struct Backend {
    ip_be: [u8; 4],
    port_be: u16,
    proto: u8,
    state: u8,
}

// SAFETY: each is repr(C) with its padding spelled out as fields (12, 12
// and 8 bytes, no implicit padding), and any bit pattern is a valid value.
unsafe impl aya::Pod for ServiceKey {}
// SAFETY: as above.
unsafe impl aya::Pod for ServiceValue {}
// SAFETY: as above.
unsafe impl aya::Pod for Backend {}

/// Installs layout 1 under the pin directory `pins`, programs `frontends`,
/// and attaches its programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    let maps = pins.join("maps");
    fs::create_dir_all(&maps)?;
    let mut loader = EbpfLoader::new();
    for name in ["LB4_SERVICES", "LB4_BACKENDS", "LB4_REVNAT"] {
        loader.map_pin_path(name, maps.join(name));
    }
    let mut ebpf = loader.load(OBJECT).context("loading layout 1")?;
    {
        let mut backends: HashMap<_, u32, Backend> =
            HashMap::try_from(ebpf.map_mut("LB4_BACKENDS").context("LB4_BACKENDS")?)?;
        let mut id = 0;
        for f in frontends {
            for (ip, port) in &f.backends {
                id += 1;
                let b = Backend {
                    ip_be: ip.octets(),
                    port_be: port.to_be(),
                    proto: f.proto,
                    state: 0,
                };
                backends.insert(id, b, 0)?;
            }
        }
    }
    let mut services: HashMap<_, ServiceKey, ServiceValue> =
        HashMap::try_from(ebpf.map_mut("LB4_SERVICES").context("LB4_SERVICES")?)?;
    let mut backend_id = 0;
    for (svc_id, f) in (1u32..).zip(frontends) {
        let key = |slot| ServiceKey {
            vip_be: f.vip.octets(),
            port_be: f.port.to_be(),
            proto: f.proto,
            _pad0: 0,
            slot,
            _pad1: [0; 2],
        };
        for slot in 1..=f.backends.len() as u16 {
            backend_id += 1;
            let v = ServiceValue {
                backend_id,
                svc_id,
                count: 0,
                flags: 0,
                _pad0: 0,
            };
            services.insert(key(slot), v, 0)?;
        }
        let v = ServiceValue {
            backend_id: 0,
            svc_id,
            count: f.backends.len() as u16,
            flags: 0,
            _pad0: 0,
        };
        services.insert(key(0), v, 0)?;
    }
    crate::install::attach(&mut ebpf, pins, cgroup, "layout 1")
}

/// Creates a map that no program uses (layout 1's reverse-NAT map) and pins
/// it at `path`: what a migration cut short before the switch leaves.
pub fn pin_unused_map(path: &Path) -> anyhow::Result<()> {
    EbpfLoader::new()
        .map_pin_path("LB4_REVNAT", path)
        .load(OBJECT)
        .context("loading layout 1")?;
    Ok(())
}
