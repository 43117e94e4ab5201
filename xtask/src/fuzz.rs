//! `cargo xtask fuzz [--time SECONDS] [--runs N] [TARGET]`: builds the
//! targets in `fuzz/` with cargo-fuzz and runs each (or the one named)
//! with libFuzzer, from the corpus kept in the repository.
//!
//! New inputs go to a scratch corpus under the target directory, never into
//! `fuzz/corpus/`, so a run leaves the repository clean. A crash, a hang
//! (`-timeout`) or a blow-up in memory (`-rss_limit_mb`) fails the command
//! and names the input libFuzzer saved.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};

/// One fuzz target: a binary of `fuzz/Cargo.toml`.
struct Target {
    name: &'static str,
    /// libFuzzer's `-max_len`: larger than any seed, small enough to keep
    /// runs fast.
    max_len: usize,
}

const TARGETS: [Target; 5] = [
    // Most real objects are below 2 KB, and the YAML parser's time grows
    // with the input: 4 KB halved the executions (about 1,100 per CPU
    // second against 2,000).
    Target {
        name: "file_source",
        max_len: 2048,
    },
    Target {
        name: "model_events",
        max_len: 4096,
    },
    Target {
        name: "kube_proxy_config",
        max_len: 4096,
    },
    Target {
        name: "dump_decode",
        max_len: 4096,
    },
    // A few frames of up to 1,514 bytes; most findings need short ones.
    Target {
        name: "packet_programs",
        max_len: 4096,
    },
];

/// Seconds per target in `cargo xtask test`: enough to build and catch
/// shallow crashes, not to search.
pub(crate) const TEST_SECONDS: u64 = 15;

/// A single input that runs longer than this is a hang.
const TIMEOUT_SECONDS: u64 = 10;
/// A process above this is a blow-up (libFuzzer's default is 2048).
const RSS_LIMIT_MB: u64 = 2048;

#[derive(clap::Args, Debug)]
pub(crate) struct FuzzArgs {
    /// Seconds to run each target; 0 for no limit (then give --runs).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub time: u64,
    /// Stop each target after this many executions.
    #[arg(long, value_name = "N")]
    pub runs: Option<u64>,
    /// The target to run (default: every one): file_source, model_events,
    /// kube_proxy_config, dump_decode, packet_programs (needs root).
    pub target: Option<String>,
}

/// What one target's run did.
struct Stats {
    runs: u64,
    seconds: f64,
    corpus: Option<u64>,
}

pub(crate) fn run(args: &FuzzArgs) -> anyhow::Result<()> {
    if args.time == 0 && args.runs.is_none() {
        bail!("--time 0 runs forever: give --runs N too");
    }
    let targets: Vec<&Target> = match &args.target {
        None => TARGETS.iter().collect(),
        Some(name) => match TARGETS.iter().find(|t| t.name == name) {
            Some(t) => vec![t],
            None => {
                let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
                bail!("no fuzz target {name:?}; there are {}", names.join(", "));
            }
        },
    };
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let fuzz_dir = root.join("fuzz");
    let out = crate::workspace::target_dir().join("fuzz");
    build(&fuzz_dir, &out)?;
    let mut report = Vec::new();
    for t in targets {
        let stats = run_target(t, &fuzz_dir, &out, args)?;
        report.push((t.name, stats));
    }
    println!("fuzz: target             executions   seconds    exec/s   corpus");
    for (name, s) in &report {
        println!(
            "fuzz: {name:<18} {:>12} {:>9.0} {:>9.0} {:>8}",
            s.runs,
            s.seconds,
            s.runs as f64 / s.seconds.max(0.001),
            s.corpus.map_or("?".to_owned(), |c| c.to_string()),
        );
    }
    Ok(())
}

/// Builds every target: release, with debug assertions (overflow checks
/// too), without a sanitizer. The code under test is safe Rust but for one
/// bounds-checked read (`datapath/decode.rs`), so AddressSanitizer would
/// find little and would cost about half of the executions.
fn build(fuzz_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let status = Command::new("cargo")
        .arg(format!("+{}", crate::toolchain::NAME))
        .args(["fuzz", "build", "--release", "--debug-assertions"])
        .args(["--sanitizer", "none", "--fuzz-dir"])
        .arg(fuzz_dir)
        .arg("--target-dir")
        .arg(out)
        .current_dir(fuzz_dir)
        .status()
        .context("running cargo fuzz (`cargo xtask setup` installs it)")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    Ok(())
}

fn run_target(t: &Target, fuzz_dir: &Path, out: &Path, args: &FuzzArgs) -> anyhow::Result<Stats> {
    let bin = out.join("x86_64-unknown-linux-gnu/release").join(t.name);
    // libFuzzer adds new inputs to the first directory only.
    let scratch = out.join("corpus").join(t.name);
    let seeds = fuzz_dir.join("corpus").join(t.name);
    let artifacts = out.join("artifacts").join(t.name);
    let logs = out.join("logs");
    for dir in [&scratch, &artifacts, &logs] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log = logs.join(format!("{}.log", t.name));
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("-max_total_time={}", args.time))
        .arg(format!("-timeout={TIMEOUT_SECONDS}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-max_len={}", t.max_len))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1");
    if let Some(runs) = args.runs {
        cmd.arg(format!("-runs={runs}"));
    }
    let dict = fuzz_dir.join("dict").join(format!("{}.dict", t.name));
    if dict.exists() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    cmd.arg(&scratch).arg(&seeds);
    let limit = match (args.time, args.runs) {
        (0, Some(n)) => format!("{n} executions"),
        (s, None) => format!("{s} s"),
        (s, Some(n)) => format!("{s} s or {n} executions"),
    };
    eprintln!("fuzz: {} for {limit} (log: {})", t.name, log.display());
    let started = Instant::now();
    let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let status = cmd
        .stdout(Stdio::null())
        .stderr(file)
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    let seconds = started.elapsed().as_secs_f64();
    let text = fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
    if !status.success() {
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        eprintln!("{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        let input = artifact(&text).map_or_else(
            || format!("<input> (none saved; see {})", log.display()),
            |p| p.display().to_string(),
        );
        bail!(
            "fuzz target {} failed ({status})\n  reproduce: {} {input}",
            t.name,
            bin.display(),
        );
    }
    let runs = stat(&text, "stat::number_of_executed_units:")
        .with_context(|| format!("no execution count in {}", log.display()))?;
    Ok(Stats {
        runs,
        seconds,
        corpus: corpus_size(&text),
    })
}

/// The number after `key` on its line of libFuzzer's final statistics.
fn stat(log: &str, key: &str) -> Option<u64> {
    log.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// Inputs in the corpus at the end: `corp: N/SIZE` of the last status line.
fn corpus_size(log: &str) -> Option<u64> {
    log.lines()
        .rev()
        .find_map(|l| l.split_once(" corp: "))
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
}

/// Where libFuzzer saved the input that failed.
fn artifact(log: &str) -> Option<PathBuf> {
    log.lines()
        .rev()
        .find_map(|l| l.split_once("Test unit written to "))
        .map(|(_, p)| PathBuf::from(p.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
#262144\tpulse  cov: 2456 ft: 9650 corp: 812/101Kb lim: 4096 exec/s: 13107 rss: 98Mb
#300000\tDONE   cov: 2460 ft: 9671 corp: 815/102Kb lim: 4096 exec/s: 12500 rss: 99Mb
Done 300000 runs in 24 second(s)
stat::number_of_executed_units: 300000
stat::average_exec_per_sec:     12500
stat::new_units_added:          31
";

    #[test]
    fn final_statistics_are_read() {
        assert_eq!(stat(LOG, "stat::number_of_executed_units:"), Some(300_000));
        assert_eq!(stat(LOG, "stat::average_exec_per_sec:"), Some(12_500));
        assert_eq!(corpus_size(LOG), Some(815));
        assert_eq!(artifact(LOG), None);
    }

    #[test]
    fn the_saved_input_is_found() {
        let log = "==1== ERROR: libFuzzer: deadly signal\n\
                   MS: 1 ChangeBit-; base unit: 0\n\
                   artifact_prefix='/t/a/'; Test unit written to /t/a/crash-0a1b\n";
        assert_eq!(artifact(log), Some(PathBuf::from("/t/a/crash-0a1b")));
    }
}
