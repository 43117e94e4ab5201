//! `cargo xtask`: setup, demo, test and kind deployment orchestration. eBPF
//! itself is built by `lb-agent/build.rs`.

mod bench;
mod cmd;
mod demo;
mod fuzz;
mod image;
mod monitoring;
mod release;
mod run;
mod setup;
mod soak;
mod toolchain;
mod validator;
mod workspace;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use self::workspace::{cargo, target_dir};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what is missing (the nightly pinned in ebpf-toolchain.toml
    /// with rust-src, bpf-linker, cargo-fuzz, cargo-cyclonedx,
    /// kubernetes-validate, iproute2, bpftool, iptables, nftables,
    /// conntrack, promtool, ctr), mount bpffs, find the cgroup2 mount.
    Setup,
    /// Show pods reaching ClusterIPs through the eBPF programs, in netns.
    Demo,
    /// fmt --check, clippy -D warnings, the release artifacts, every test
    /// (privileged ones and the image's included), the bench's smoke run,
    /// each fuzz target for a few seconds, and a one-minute chaos soak and
    /// long soak.
    Test,
    /// Build the agent (release, --locked) and its image from scratch,
    /// without a registry: `lb-agent:<version>` and `lb-agent:dev` in the
    /// local Docker, and their archive in target/image/.
    Image,
    /// The image, then target/dist/: the binary, the image archive, a
    /// CycloneDX SBOM and SHA256SUMS.
    Release,
    /// Build the image and deploy manifests/ to a kind cluster.
    Run(run::RunArgs),
    /// Our LB against kube-proxy's iptables and nftables layouts and the
    /// direct path; writes target/bench/bench.md and bench.svg.
    Bench(bench::BenchArgs),
    /// Build the fuzz targets in fuzz/ and run each (or one) with libFuzzer
    /// from the repository's corpus.
    Fuzz(fuzz::FuzzArgs),
    /// The chaos soak: the agent against the stand-in apiserver under
    /// traffic, SIGKILLs, outages, relists, rolling updates and Services
    /// coming and going; writes target/soak/soak.md. `--long`: one agent
    /// through the run, judged for growth; writes target/soak/long/.
    Soak(soak::SoakArgs),
    /// Write manifests/monitoring/'s PrometheusRule and dashboard copy
    /// from monitoring/ (tests/tests/monitoring.rs checks they match).
    Monitoring,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Setup => setup::run(),
        Cmd::Demo => {
            setup::run()?;
            build_bins(false, true)?;
            demo::run()
        }
        Cmd::Test => {
            setup::run()?;
            cargo(&["fmt", "--all", "--", "--check"])?;
            // The fuzz crate is a workspace of its own.
            cargo(&["fmt", "--manifest-path", "fuzz/Cargo.toml", "--", "--check"])?;
            cargo(&["clippy", "--all-targets", "--", "-D", "warnings"])?;
            // lb-ebpf is linted for the target it is built for.
            cargo(&[
                &format!("+{}", toolchain::NAME),
                "clippy",
                "--package",
                "lb-ebpf",
                "--target",
                "bpfel-unknown-none",
                "-Z",
                "build-std=core",
                "--",
                "-D",
                "warnings",
            ])?;
            // Default members: everything but lb-ebpf, which only builds for BPF
            // (lb-agent's build.rs compiles it, so its errors surface here too).
            // The release artifacts, the image among them, which the
            // image test runs as the DaemonSet runs it.
            release::run()?;
            cargo(&["test"])?;
            // The bench's smoke run, so the bench keeps working.
            bench_cmd(&bench::BenchArgs::quick())?;
            // Every fuzz target, briefly: they keep building, and shallow
            // crashes surface.
            fuzz::run(&fuzz::FuzzArgs {
                time: fuzz::TEST_SECONDS,
                runs: None,
                target: None,
            })?;
            // A one-minute soak, in a process of its own (its own Ctrl-C
            // handler and environment); then a one-minute long soak, so
            // that its judgement of growth keeps working (an hour is
            // `cargo xtask soak --long`).
            for long in [&[][..], &["--long"]] {
                let mut args = vec!["run", "--quiet", "--package", "xtask", "--", "soak"];
                args.extend_from_slice(long);
                args.extend(["--minutes", "1"]);
                cargo(&args)?;
            }
            Ok(())
        }
        Cmd::Soak(args) => {
            setup::run()?;
            soak_cmd(&args)
        }
        Cmd::Image => {
            setup::run()?;
            image::build().map(drop)
        }
        Cmd::Release => {
            setup::run()?;
            release::run()
        }
        Cmd::Run(args) => run::run(&args),
        Cmd::Monitoring => monitoring::run(),
        Cmd::Fuzz(args) => {
            setup::run()?;
            fuzz::run(&args)
        }
        Cmd::Bench(args) => {
            setup::run()?;
            if !args.quick && cfg!(debug_assertions) {
                // The full run measures release builds, its own harness too:
                // the stand-in apiserver runs in this process, and in a dev
                // build it served 20,000 objects slower than the agent it
                // feeds could program them.
                // It runs from the workspace root: make a relative
                // --agent-bin absolute first.
                let rest = absolute_agent_bin(std::env::args().skip(1))?;
                let mut run = vec!["run", "--release", "--quiet", "--package", "xtask", "--"];
                run.extend(rest.iter().map(String::as_str));
                return cargo(&run);
            }
            bench_cmd(&args)
        }
    }
}

/// The arguments, with `--agent-bin`'s path made absolute.
fn absolute_agent_bin(args: impl Iterator<Item = String>) -> anyhow::Result<Vec<String>> {
    let abs = |p: &str| -> anyhow::Result<String> {
        let path = std::fs::canonicalize(p).with_context(|| format!("--agent-bin {p}"))?;
        Ok(path.display().to_string())
    };
    let mut out = Vec::new();
    let mut path_next = false;
    for a in args {
        if path_next {
            out.push(abs(&a)?);
            path_next = false;
        } else if let Some(p) = a.strip_prefix("--agent-bin=") {
            out.push(format!("--agent-bin={}", abs(p)?));
        } else {
            path_next = a == "--agent-bin";
            out.push(a);
        }
    }
    Ok(out)
}

/// Builds what the bench runs, points the harness at it, and runs it.
fn bench_cmd(args: &bench::BenchArgs) -> anyhow::Result<()> {
    // The full run measures release builds; the smoke run reuses the debug
    // ones `cargo xtask test` built.
    let profile = if args.quick { "debug" } else { "release" };
    let dir = target_dir().join(profile);
    let agent = match &args.agent_bin {
        Some(path) => {
            build_bins(!args.quick, false)?;
            std::fs::canonicalize(path)
                .with_context(|| format!("--agent-bin {}", path.display()))?
        }
        None => {
            build_bins(!args.quick, true)?;
            dir.join("lb-agent")
        }
    };
    use_bins(&agent, &dir);
    bench::run(args)
}

/// Builds the agent and `lbt` (debug, unless `--release`), points the
/// harness at them, and runs the soak.
fn soak_cmd(args: &soak::SoakArgs) -> anyhow::Result<()> {
    build_bins(args.release, true)?;
    let dir = target_dir().join(if args.release { "release" } else { "debug" });
    use_bins(&dir.join("lb-agent"), &dir);
    soak::run(args)
}

/// Points the harness at this agent and at the `lbt` in `dir`.
fn use_bins(agent: &std::path::Path, dir: &std::path::Path) {
    // SAFETY: no other thread runs yet (the bench and the soak start theirs
    // later, and each runs in a process of its own); the harness reads
    // these when it spawns.
    unsafe {
        std::env::set_var("LB_AGENT_BIN", agent);
        std::env::set_var("LBT_BIN", dir.join("lbt"));
    }
}

/// Builds the test binaries (`lbt`) the demo and bench run, and the agent
/// unless another one is measured.
fn build_bins(release: bool, agent: bool) -> anyhow::Result<()> {
    let mut args = vec!["build", "--package", "lb-tests", "--bins"];
    if agent {
        args.extend(["--package", "lb-agent"]);
    }
    if release {
        args.push("--release");
    }
    cargo(&args)
}
