//! Golden test: YAML in, map listing out.
//!
//! `tests/golden/input.yaml` goes through the whole pure pipeline (file
//! source -> model with `--exclude-cluster-cidr=10.244.0.0/16` -> reconciler
//! over an in-memory store -> `dump::render`), followed by what the model
//! reported. The result must equal `tests/golden/expected.txt`.
//!
//! After an intended change, regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p lb-agent --test golden` and review the diff.

use std::{fmt::Write as _, fs, path::PathBuf};

use lb_agent::model::maglev::MaglevParams;
use lb_agent::{
    dump,
    model::{self, ExcludedCidrs},
    reconcile::{
        Found, Reconciler, V4,
        mem::{Journal, ManualGrace, Mem, lb_tables},
    },
    source::file,
};

/// The node the golden objects are seen from.
fn node() -> model::NodeContext {
    model::NodeContext::named("node-a")
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Runs the pipeline on `input.yaml` and renders maps and report.
fn render_golden() -> String {
    let input = golden_dir().join("input.yaml");
    let objects = file::load(&input).expect("read golden input");
    let excluded = ExcludedCidrs::parse(["10.244.0.0/16"]).unwrap();
    let (desired, report) = model::compute(&objects.services, &objects.slices, &excluded, &node());

    let mut r = reconciler();
    let outcome = r.reconcile(&desired.frontends);
    assert!(outcome.failed.is_empty(), "{outcome:?}");

    let mut out = dump::render(&r.view());
    let origin = input.display().to_string();
    let _ = writeln!(out, "\n# owners");
    for (fe, owner) in &desired.owners {
        let _ = writeln!(out, "{fe} {owner}");
    }
    let _ = writeln!(out, "# passthrough (every endpoint excluded)");
    for (fe, owner) in &report.passthrough {
        let _ = writeln!(out, "{fe} {owner}");
    }
    let _ = writeln!(out, "# excluded endpoints");
    for (owner, backend) in &report.excluded {
        let _ = writeln!(out, "{owner} {backend}");
    }
    let _ = writeln!(out, "# ignored");
    for (object, why) in &report.ignored {
        let _ = writeln!(out, "{object}: {why}");
    }
    let _ = writeln!(out, "# invalid");
    for invalid in &report.invalid {
        let _ = writeln!(out, "{}: {}", invalid.object, invalid.reason);
    }
    let _ = writeln!(out, "# conflicts");
    for (fe, loser) in &report.conflicts {
        let _ = writeln!(out, "{fe} {loser}");
    }
    // The parser's message wording belongs to yaml_serde; only where matters.
    let _ = writeln!(out, "# skipped documents");
    for skipped in &objects.skipped {
        let _ = writeln!(out, "{}", skipped.location.replace(&origin, "input.yaml"));
    }
    out
}

#[test]
fn golden_listing_matches() {
    let actual = render_golden();
    let expected_path = golden_dir().join("expected.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        fs::write(&expected_path, &actual).expect("write expected.txt");
        return;
    }
    let expected = fs::read_to_string(&expected_path)
        .expect("tests/golden/expected.txt missing; run with UPDATE_GOLDEN=1");
    if actual != expected {
        panic!(
            "golden listing differs (rerun with UPDATE_GOLDEN=1 after checking)\n\
             --- expected\n{expected}\n--- actual\n{actual}"
        );
    }
}

#[test]
fn golden_pipeline_is_stable_across_a_second_reconcile() {
    // The same input a second time must leave the maps exactly as they are.
    let input = golden_dir().join("input.yaml");
    let objects = file::load(&input).unwrap();
    let excluded = ExcludedCidrs::parse(["10.244.0.0/16"]).unwrap();
    let (desired, _) = model::compute(&objects.services, &objects.slices, &excluded, &node());
    let mut r = reconciler();
    let first = r.reconcile(&desired.frontends);
    assert!(first.changed() > 0);
    let listing = dump::render(&r.view());
    let again = r.reconcile(&desired.frontends);
    assert_eq!(again.changed(), 0, "{again:?}");
    assert_eq!(dump::render(&r.view()), listing);
}

/// A reconciler over empty in-memory tables.
fn reconciler() -> Reconciler<V4, Mem, ManualGrace> {
    let journal = Journal::default();
    let tables = lb_tables::<V4>(1024, 1024, 1024, &journal);
    Reconciler::adopt(
        tables,
        ManualGrace::new(&journal),
        Found::Created,
        MaglevParams::default(),
    )
    .unwrap()
}
