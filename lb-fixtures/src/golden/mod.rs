//! Step-by-step golden scenarios, after Cilium's txtar script tests: the
//! script, the objects it applies and the comparison, shared by the two
//! runners that differ only in the agent they drive (an [`Executor`]): the
//! real agent with `--from-file` (`lb-tests`, as root) and the agent's
//! pure pipeline in-process (`lb-agent`'s tests, as any user).
//!
//! A scenario (`tests/scenarios/*.txtar`) is a script in the archive's
//! comment and the files it names. Commands, one per line (`#` starts a
//! comment line):
//!
//! * `agent [FLAG...]`: starts the agent on the objects so far.
//! * `apply FILE...`: adds or replaces every object of each YAML file.
//! * `delete KIND NAMESPACE/NAME`: removes one object.
//! * `dump FILE`: the dump, normalised (see [`normalise`]), must equal FILE.
//! * `metric SAMPLE VALUE`: a sample on `/metrics` must have this value.
//!
//! `UPDATE_GOLDEN=1` rewrites the expected dumps instead of comparing; review
//! the diff before committing it.

mod normalise;
mod objects;
pub mod script;

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

pub use normalise::normalise;
use objects::Objects;
use script::{Command, Step};

use crate::txtar::{self, Archive};

/// The agent a scenario drives.
pub trait Executor {
    /// Starts the agent with `flags` on `manifest`, every object so far.
    fn start(&mut self, manifest: &str, flags: &[String]) -> anyhow::Result<()>;
    /// The objects changed, `manifest` holds them all now; returns once
    /// the agent has taken them in.
    fn update(&mut self, manifest: &str) -> anyhow::Result<()>;
    /// The listing `lb-agent dump` prints, once no revision waits for its
    /// grace period.
    fn dump(&mut self) -> anyhow::Result<String>;
    /// The value of one sample (`name` or `name{label="value"}`) on
    /// `/metrics`.
    fn metric(&mut self, sample: &str) -> anyhow::Result<f64>;
    /// Why this executor cannot check `command`, if it cannot: the whole
    /// scenario then fails before it starts, naming every such line.
    fn unsupported(&self, _command: &Command) -> Option<String> {
        None
    }
}

/// The scenario file `tests/scenarios/{name}.txtar`.
pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lb-fixtures is in the workspace's directory")
        .join("tests/scenarios")
        .join(format!("{name}.txtar"))
}

/// Fails unless `names` are exactly the scenario files.
pub fn check_listed(names: &[&str]) -> anyhow::Result<()> {
    let dir = scenario("x").parent().context("a directory")?.to_owned();
    let mut files: Vec<String> = fs::read_dir(&dir)?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".txtar")?.to_owned())
        })
        .collect();
    files.sort();
    anyhow::ensure!(
        files == names,
        "tests/scenarios/ and the golden_scenarios! list differ: {files:?} != {names:?}"
    );
    Ok(())
}

/// One `#[test]` per scenario file, each running it with `$run` (a
/// `fn(&Path) -> anyhow::Result<()>`), so they run in parallel and fail by
/// name; and a test that every file has its test. The list is here once
/// for both runners.
#[macro_export]
macro_rules! golden_scenarios {
    ($run:path) => {
        $crate::golden_scenarios!(@each $run;
            dual_stack,
            endpoints,
            excluded,
            malformed_update,
            port_rename,
            recreate,
            slice_moves,
            topology_maglev,
            vip_conflict,
        );
    };
    (@each $run:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() -> ::anyhow::Result<()> {
                $run(&$crate::golden::scenario(stringify!($name)))
            }
        )*

        #[test]
        fn every_scenario_file_has_its_test() -> ::anyhow::Result<()> {
            $crate::golden::check_listed(&[$(stringify!($name)),*])
        }
    };
}

/// Runs one scenario file on `executor`; fails with every mismatch, each as
/// a diff.
pub fn run(path: &Path, executor: &mut impl Executor) -> anyhow::Result<()> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let archive = txtar::parse(&text);
    let steps = script::parse(&archive.comment).with_context(|| path.display().to_string())?;
    let at = |step: &Step| format!("{}:{}: {}", path.display(), step.line, step.text);
    let unsupported: Vec<String> = steps
        .iter()
        .filter_map(|s| Some(format!("{}: {}", at(s), executor.unsupported(&s.command)?)))
        .collect();
    if !unsupported.is_empty() {
        bail!(
            "{} has commands this runner cannot check:\n{}",
            path.display(),
            unsupported.join("\n")
        );
    }
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut session = Session {
        archive,
        objects: Objects::default(),
        started: false,
        update,
    };
    let mut failures = String::new();
    for step in &steps {
        if let Some(diff) = session
            .step(&step.command, executor)
            .with_context(|| at(step))?
        {
            let _ = writeln!(failures, "{}\n{diff}", at(step));
        }
    }
    if update {
        let rendered = session.archive.render();
        if rendered != text {
            fs::write(path, rendered)?;
        }
        return Ok(());
    }
    if !failures.is_empty() {
        bail!(
            "{} differs from what the agent programmed \
             (UPDATE_GOLDEN=1 rewrites it; review the diff):\n{failures}",
            path.display()
        );
    }
    Ok(())
}

/// A scenario under way.
struct Session {
    archive: Archive,
    objects: Objects,
    started: bool,
    /// `UPDATE_GOLDEN=1`.
    update: bool,
}

impl Session {
    /// Runs one command; a dump that differs is its diff.
    fn step(
        &mut self,
        command: &Command,
        executor: &mut impl Executor,
    ) -> anyhow::Result<Option<String>> {
        match command {
            Command::Agent(flags) => {
                anyhow::ensure!(!self.started, "the agent is already running");
                executor.start(&self.objects.manifest(), flags)?;
                self.started = true;
            }
            Command::Apply(files) => {
                self.objects.apply(&self.archive, files)?;
                self.changed(executor)?;
            }
            Command::Delete {
                kind,
                namespace,
                name,
            } => {
                self.objects.delete(kind, namespace, name)?;
                self.changed(executor)?;
            }
            Command::Dump(file) => {
                self.running()?;
                let actual = normalise(&executor.dump()?);
                return Ok(self.compare(file, &actual));
            }
            Command::Metric { sample, value } => {
                self.running()?;
                let got = executor.metric(sample)?;
                anyhow::ensure!(got == *value, "{sample} is {got}, expected {value}");
            }
        }
        Ok(None)
    }

    /// Hands the objects to the agent, if it runs (else it starts on them).
    fn changed(&self, executor: &mut impl Executor) -> anyhow::Result<()> {
        if self.started {
            executor.update(&self.objects.manifest())?;
        }
        Ok(())
    }

    fn running(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.started, "the agent is not started (`agent`)");
        Ok(())
    }

    /// `None` if `file` holds `actual`; else the diff (or, when updating,
    /// rewrites `file` and says nothing).
    fn compare(&mut self, file: &str, actual: &str) -> Option<String> {
        let expected = self.archive.file(file).unwrap_or_default().to_owned();
        if expected == actual {
            return None;
        }
        if self.update {
            match self.archive.file_mut(file) {
                Some(data) => *data = actual.to_owned(),
                None => self.archive.files.push(txtar::File {
                    name: file.to_owned(),
                    data: actual.to_owned(),
                }),
            }
            return None;
        }
        Some(
            similar::TextDiff::from_lines(&expected, actual)
                .unified_diff()
                .header(&format!("{file} (expected)"), "lb-agent dump")
                .to_string(),
        )
    }
}
