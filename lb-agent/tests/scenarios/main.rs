//! Golden step-by-step scenarios (`tests/scenarios/*.txtar`) through the
//! agent's pure pipeline, in-process and as any user: the same files, script
//! and comparison (`lb_fixtures::golden`) as `lb-tests`' `scenarios`, which
//! runs them through the real agent as root. `UPDATE_GOLDEN=1` rewrites the
//! expected dumps; review the diff, and let the real agent confirm it.

mod pipeline;

use std::path::Path;

fn run(path: &Path) -> anyhow::Result<()> {
    lb_fixtures::golden::run(path, &mut pipeline::Pipeline::default())
}

lb_fixtures::golden_scenarios!(run);
