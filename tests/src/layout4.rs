//! Map layout 4, the first with the tc programs, installed as the agent of
//! commit `e79df86` installed it on a node: its eBPF object
//! (`fixtures/lb-ebpf-layout4.o`), its nineteen maps pinned under `maps/`
//! with `_V4` pin names, the frontends written with the write protocol of
//! layout 2 (unchanged since), the socket programs attached to a cgroup and
//! the tc programs to a device of the node's network namespace through
//! links pinned under `links/` (`tc-in-<dev>`, `tc-out-<dev>`), and its
//! `LB_CONFIG`: the node's address to SNAT to, and its SNAT ports
//! 61000-65535. Layout 4 kept each direction's TCP state apart in its
//! conntrack entries and had no fragment, reject or previous-map maps.

use std::{fs, net::Ipv4Addr, path::Path};

use anyhow::Context as _;
use aya::{
    EbpfLoader, Pod,
    maps::Array,
    programs::{LinkOrder, SchedClassifier, TcAttachType, links::FdLink, tc::TcAttachOptions},
};

pub use crate::install::Frontend;
use crate::{layout2::write, layout3, netns};

/// The object of layout 4, as built then (at layout 4's default
/// capacities).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout4.o");

/// Layout 4's maps: symbol name in the object (the pin name adds `_V4`).
const MAPS: [&str; 19] = [
    "LB4_FRONTENDS",
    "LB4_FE_STATE",
    "LB4_SLOTS",
    "LB4_BACKENDS",
    "LB4_MEMBERS",
    "LB4_AFFINITY",
    "LB4_REVNAT",
    "LB6_FRONTENDS",
    "LB6_FE_STATE",
    "LB6_SLOTS",
    "LB6_BACKENDS",
    "LB6_MEMBERS",
    "LB6_AFFINITY",
    "LB6_REVNAT",
    "LB_STATS",
    "LB4_CT",
    "LB4_NAT",
    "LB_CONFIG",
    "LB4_SRC_RANGES",
];

/// Value of layout 4's `LB_CONFIG`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Config {
    snat4_be: [u8; 4],
    nat_port_min: u16,
    nat_port_max: u16,
}

const _: () = assert!(size_of::<Config>() == 8);

// SAFETY: repr(C) without padding (the size assert equals the sum of the
// fields), and any bit pattern is valid.
unsafe impl Pod for Config {}

/// Installs layout 4 under the pin directory `pins`: `frontends` (each of
/// its scope; an external one is eTP Cluster, SNATed to `snat`), the socket
/// programs attached to `cgroup`, the tc programs to `device` of network
/// namespace `ns`.
pub fn install(
    pins: &Path,
    cgroup: &Path,
    frontends: &[Frontend],
    ns: &str,
    device: &str,
    snat: Ipv4Addr,
) -> anyhow::Result<()> {
    let dir = pins.join("maps");
    fs::create_dir_all(&dir)?;
    let links = pins.join("links");
    fs::create_dir_all(&links)?;
    // In the node's namespace: the tc programs attach to its device.
    netns::within(ns, || {
        let mut loader = EbpfLoader::new();
        for name in MAPS {
            loader.map_pin_path(name, dir.join(format!("{name}_V4")));
        }
        let mut ebpf = loader.load(OBJECT).context("loading layout 4")?;
        write(&mut ebpf, frontends, layout3::state)?;
        let mut config: Array<_, Config> =
            Array::try_from(ebpf.map_mut("LB_CONFIG").context("LB_CONFIG")?)?;
        let value = Config {
            snat4_be: snat.octets(),
            nat_port_min: 61_000,
            nat_port_max: 65_535,
        };
        config.set(0, value, 0)?;
        crate::install::attach(&mut ebpf, pins, cgroup, "layout 4")?;
        // Egress first, as that agent attached them.
        for (function, hook, prefix) in [
            ("lb_tc_egress", TcAttachType::Egress, "tc-out-"),
            ("lb_tc_ingress", TcAttachType::Ingress, "tc-in-"),
        ] {
            let program: &mut SchedClassifier = ebpf
                .program_mut(function)
                .with_context(|| format!("{function} in layout 4"))?
                .try_into()?;
            program.load()?;
            let id = program.attach_with_options(
                device,
                hook,
                TcAttachOptions::TcxOrder(LinkOrder::default()),
            )?;
            let link: FdLink = program.take_link(id)?.try_into()?;
            link.pin(links.join(format!("{prefix}{device}")))?;
        }
        Ok(())
    })
}
