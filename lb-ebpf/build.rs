use which::which;

/// Rebuild when bpf-linker changes: cargo does not track the linker itself.
fn main() {
    let bpf_linker = which("bpf-linker").expect("bpf-linker not found; run `cargo xtask setup`");
    println!("cargo:rerun-if-changed={}", bpf_linker.display());
}
