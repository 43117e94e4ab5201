//! Golden step-by-step scenarios (`tests/scenarios/*.txtar`) through the
//! real agent: each step changes objects, and the agent's `lb-agent dump`
//! must then equal the expected text. The format and the runner are in
//! `lb_tests::golden`; `UPDATE_GOLDEN=1` rewrites the expected dumps.
//! Needs root (BPF, cgroups); fails loudly without it.

use std::path::{Path, PathBuf};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(format!("{name}.txtar"))
}

/// One test per scenario file, so they run in parallel and fail by name.
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() -> anyhow::Result<()> {
                lb_tests::golden::run(&scenario(stringify!($name)))
            }
        )*
        const SCENARIOS: &[&str] = &[$(stringify!($name)),*];
    };
}

scenarios!(
    dual_stack,
    endpoints,
    excluded,
    malformed_update,
    port_rename,
    recreate,
    slice_moves,
    vip_conflict,
);

#[test]
fn every_scenario_file_has_its_test() -> anyhow::Result<()> {
    let dir = scenario("x").parent().expect("a directory").to_owned();
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".txtar")?.to_owned())
        })
        .collect();
    files.sort();
    assert_eq!(
        files, SCENARIOS,
        "tests/scenarios/ and the scenarios! list differ"
    );
    Ok(())
}
