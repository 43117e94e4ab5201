//! The `tc_cost` bench (`lb-testbed/benches/tc_cost.rs`): our tc programs on
//! crafted packets (`BPF_PROG_TEST_RUN`). Its table goes into the report as
//! printed; its figures are read from the JSON it writes.

use std::{path::Path, process::Command};

use anyhow::{Context as _, ensure};

use super::{plan::Plan, results::nodeport::TcCost};

/// Runs the bench, fewer repetitions in a smoke run.
pub(super) fn run(plan: &Plan) -> anyhow::Result<TcCost> {
    let runs = if plan.quick { "20000" } else { "200000" };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace");
    std::fs::create_dir_all(&plan.out_dir)?;
    let json = plan.out_dir.join("tc_cost.json");
    // A stale file must not pass for this run's figures.
    if let Err(e) = std::fs::remove_file(&json) {
        ensure!(
            e.kind() == std::io::ErrorKind::NotFound,
            "removing {}: {e}",
            json.display()
        );
    }
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .env("TC_COST_JSON", &json)
        .args([
            "bench",
            "-q",
            "-p",
            "lb-testbed",
            "--bench",
            "tc_cost",
            "--",
            runs,
        ])
        .output()
        .context("running cargo bench --bench tc_cost")?;
    ensure!(
        out.status.success(),
        "tc_cost failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json)
        .with_context(|| format!("reading tc_cost's figures from {}", json.display()))?;
    Ok(TcCost {
        table: String::from_utf8(out.stdout)?,
        figures: serde_json::from_str(&text)
            .with_context(|| format!("parsing {}", json.display()))?,
    })
}
