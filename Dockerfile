# syntax=docker/dockerfile:1
# lb-agent image for builders with a registry: `docker build -t lb-agent:dev .`
# Without one, `cargo xtask image` builds the same agent on the host and
# assembles the image from scratch (README, "The image").

# Builder: stable Rust for the agent, the nightly pinned in
# ebpf-toolchain.toml (+ rust-src) for the eBPF object, linked as
# `lb-nightly` as `cargo xtask setup` does, and the pinned bpf-linker.
FROM rust:1.95-bookworm AS builder

COPY ebpf-toolchain.toml /tmp/
RUN set -eux; \
    pin() { sed -n "s/^$1 = \"\(.*\)\"/\1/p" /tmp/ebpf-toolchain.toml; }; \
    channel="$(pin channel)"; \
    rustup toolchain install "$channel" --profile minimal --component rust-src; \
    test "$(rustc +"$channel" -V)" = "$(pin rustc)"; \
    rustup toolchain link lb-nightly "$(rustc +"$channel" --print sysroot)"

# DESIGN §5: no prebuilt bpf-linker can be downloaded, so build it against
# nightly's own libLLVM. The prefix's lib/ holds two symlinks: libLLVM.so for
# the linker, and one under the file's own name, which is its SONAME. The
# binary's RUNPATH points into the prefix, so it stays in this stage.
RUN set -eux; \
    llvm="$(ls "$(rustc +lb-nightly --print sysroot)"/lib/libLLVM.so.* | head -n 1)"; \
    name="$(basename "$llvm")"; \
    major="$(echo "$name" | sed -E 's/^libLLVM\.so\.([0-9]+).*/\1/')"; \
    mkdir -p /opt/bpf-linker-llvm/lib; \
    ln -s "$llvm" /opt/bpf-linker-llvm/lib/libLLVM.so; \
    ln -s "$llvm" "/opt/bpf-linker-llvm/lib/$name"; \
    LLVM_PREFIX=/opt/bpf-linker-llvm \
        cargo install bpf-linker --locked \
            --version "$(sed -n 's/^version = "\(.*\)"/\1/p' /tmp/ebpf-toolchain.toml)" \
            --no-default-features --features "llvm-$major"; \
    bpf-linker --version

WORKDIR /src
COPY . .
# The caches keep rebuilds quick; the binary is copied out of the cached target/.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p lb-agent \
    && install -m 0755 target/release/lb-agent /usr/local/bin/lb-agent

# Runtime: glibc as in the builder. The DaemonSet's init container runs
# `lb-agent mount-bpffs`, so nothing else is needed.
FROM debian:bookworm-slim
COPY --from=builder /usr/local/bin/lb-agent /usr/local/bin/lb-agent
# The DaemonSet passes `run` and its flags as args.
ENTRYPOINT ["lb-agent"]
CMD ["run"]
