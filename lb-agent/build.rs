//! Builds `lb-ebpf` for the BPF target and places the object in `OUT_DIR`.

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

fn main() -> anyhow::Result<()> {
    let ebpf_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../lb-ebpf");
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    // lb-common is compiled into the eBPF object too.
    println!("cargo:rerun-if-changed=../lb-common/src");
    aya_build::build_ebpf(
        [Package {
            name: "lb-ebpf",
            root_dir,
            ..Package::default()
        }],
        Toolchain::default(),
    )
    .context("building lb-ebpf (run `cargo xtask setup` if bpf-linker or rust-src is missing)")
}
