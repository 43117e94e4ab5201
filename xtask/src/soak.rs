//! `cargo xtask soak`: the chaos soak (`lb_tests::soak`), its report in
//! `target/soak/soak.md`, and a non-zero exit if it failed; with `--long`,
//! the long soak (one agent through the run, judged for growth), its
//! report in `target/soak/long/soak.md`.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::Context as _;
use clap::Args;
use lb_tests::soak::{
    plan::{Mode, Plan},
    report,
};

#[derive(Args, Clone, Debug)]
pub(crate) struct SoakArgs {
    /// Minutes of disturbances (a shorter run scales the apiserver's
    /// outages down; see docs/soak.md). Default: 30, or 60 with
    /// `--long`.
    #[arg(long)]
    pub minutes: Option<f64>,
    /// The long soak: one agent through the whole run (no SIGKILLs), failing
    /// if its RSS, open fds or the maps' entries beyond need grew.
    #[arg(long)]
    pub long: bool,
    /// The seed of every random choice, to replay a run (default: from
    /// the clock; printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run release builds of the agent and the clients.
    #[arg(long)]
    pub release: bool,
}

pub(crate) fn run(args: &SoakArgs) -> anyhow::Result<()> {
    let (mode, default_minutes, name) = if args.long {
        (Mode::Long, 60.0, "long soak")
    } else {
        (Mode::Chaos, 30.0, "soak")
    };
    let minutes = args.minutes.unwrap_or(default_minutes);
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    eprintln!("{name}: {minutes} min, seed {seed} (replay with --seed {seed})");
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Ctrl-C: the soak returns at its next step, and its drops clean up.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("signal handler")?;
    let results = lb_tests::soak::run(Plan::new(minutes, mode), seed, &stop)?;
    let text = report::render(&results);
    let mut dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/soak"));
    if args.long {
        dir.push("long");
    }
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("soak.md");
    std::fs::write(&path, &text)?;
    std::fs::write(dir.join("changes.csv"), report::changes_csv(&results))?;
    std::fs::write(dir.join("samples.csv"), report::samples_csv(&results))?;
    for old in std::fs::read_dir(&dir)?.flatten() {
        if old.file_name().to_string_lossy().starts_with("agent-") {
            std::fs::remove_file(old.path())?;
        }
    }
    for (i, agent) in results.agents.iter().enumerate() {
        std::fs::write(dir.join(format!("agent-{i}.log")), &agent.log)?;
    }
    print!("{text}");
    eprintln!(
        "wrote {} (and changes.csv, samples.csv and each agent's log beside it)",
        path.display()
    );
    let verdict = results.verdict();
    anyhow::ensure!(
        verdict.is_empty(),
        "the {name} failed (seed {seed}): {}",
        verdict.join("; ")
    );
    Ok(())
}
