# syntax=docker/dockerfile:1
# lb-agent image: `docker build -t lb-agent:dev .` (or `cargo xtask run`).

# Builder: stable Rust for the agent, nightly + rust-src for the eBPF object
# (lb-agent/build.rs builds lb-ebpf with -Z build-std=core), and bpf-linker.
FROM rust:1.95-bookworm AS builder

RUN rustup toolchain install nightly --profile minimal --component rust-src

# DESIGN §5: no prebuilt bpf-linker can be downloaded, so build it against
# nightly's own libLLVM. The prefix's lib/ holds two symlinks: libLLVM.so for
# the linker, and one under the file's own name, which is its SONAME. The
# binary's RUNPATH points into the prefix, so it stays in this stage.
RUN set -eux; \
    llvm="$(ls "$(rustc +nightly --print sysroot)"/lib/libLLVM.so.* | head -n 1)"; \
    name="$(basename "$llvm")"; \
    major="$(echo "$name" | sed -E 's/^libLLVM\.so\.([0-9]+).*/\1/')"; \
    mkdir -p /opt/bpf-linker-llvm/lib; \
    ln -s "$llvm" /opt/bpf-linker-llvm/lib/libLLVM.so; \
    ln -s "$llvm" "/opt/bpf-linker-llvm/lib/$name"; \
    LLVM_PREFIX=/opt/bpf-linker-llvm \
        cargo install bpf-linker --no-default-features --features "llvm-$major"; \
    bpf-linker --version

WORKDIR /src
COPY . .
# The caches keep rebuilds quick; the binary is copied out of the cached target/.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p lb-agent \
    && install -m 0755 target/release/lb-agent /usr/local/bin/lb-agent

# Runtime: glibc as in the builder, plus sh, grep and mount (util-linux) for
# the DaemonSet's init container that mounts bpffs on the host.
FROM debian:bookworm-slim
COPY --from=builder /usr/local/bin/lb-agent /usr/local/bin/lb-agent
# The DaemonSet passes `run` and its flags as args.
ENTRYPOINT ["lb-agent"]
CMD ["run"]
