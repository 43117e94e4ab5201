//! Step-by-step golden scenarios, after Cilium's txtar script tests.
//!
//! A scenario (`tests/scenarios/*.txtar`) is a script in the archive's
//! comment and the files it names. The real agent runs with `--from-file`
//! on a manifest the runner rewrites at every step; after each change the
//! runner waits until the agent has written it (`/metrics`) and its grace
//! periods have passed, then compares `lb-agent dump` with the expected
//! file. Commands, one per line (`#` starts a comment line):
//!
//! * `agent [FLAG...]`: starts the agent on the manifest so far.
//! * `apply FILE...`: adds or replaces every object of each YAML file.
//! * `delete KIND NAMESPACE/NAME`: removes one object.
//! * `dump FILE`: the dump, normalised (see [`normalise`]), must equal FILE.
//! * `metric SAMPLE VALUE`: a sample on `/metrics` must have this value.
//!
//! `UPDATE_GOLDEN=1` rewrites the expected dumps instead of comparing; review
//! the diff before committing it.

use std::{
    collections::HashMap,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde::Deserialize as _;

use crate::{
    agent::{Agent, PinDir},
    cgroup::TestCgroup,
    require_root,
    txtar::{self, Archive},
    unique,
};

/// Runs one scenario file; fails with every mismatch, each as a diff.
pub fn run(path: &Path) -> anyhow::Result<()> {
    require_root();
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut archive = txtar::parse(&text);
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut rig = Rig::new()?;
    let mut failures = String::new();
    let script = archive.comment.clone();
    for (n, line) in script.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("{}:{}: {line}", path.display(), n + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        let outcome = match words[..] {
            ["agent", ref flags @ ..] => rig.start(flags).map(|()| None),
            ["apply", ref files @ ..] if !files.is_empty() => {
                rig.apply(&archive, files).map(|()| None)
            }
            ["delete", kind, object] => rig.delete(kind, object).map(|()| None),
            ["dump", file] => rig
                .dump()
                .map(|actual| compare(&mut archive, file, &actual, update)),
            ["metric", sample, value] => rig.metric(sample, value).map(|()| None),
            _ => Err(anyhow::anyhow!("unknown command")),
        };
        if let Some(diff) = outcome.with_context(|| at.clone())? {
            let _ = writeln!(failures, "{at}\n{diff}");
        }
    }
    if update {
        let rendered = archive.render();
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

/// `None` if `file` holds `actual`; else the diff (or, when updating,
/// rewrites `file` and says nothing).
fn compare(archive: &mut Archive, file: &str, actual: &str, update: bool) -> Option<String> {
    let expected = archive.file(file).unwrap_or_default().to_owned();
    if expected == actual {
        return None;
    }
    if update {
        match archive.file_mut(file) {
            Some(data) => *data = actual.to_owned(),
            None => archive.files.push(txtar::File {
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

/// Makes a dump independent of timing: the ids the agent picks and the
/// revision numbers (a file re-read can be one sync or two, so a frontend's
/// revision count depends on scheduling) are not what a scenario is about.
/// Frontend `(id N, rev M)` goes; backend ids become `b1`, `b2`, ... in
/// order of appearance, which keeps visible which slots share a backend.
pub fn normalise(dump: &str) -> String {
    let mut backends: HashMap<String, usize> = HashMap::new();
    let mut out = String::new();
    for line in dump.lines() {
        if let Some(slot) = line.strip_prefix("  -> ") {
            match slot.rsplit_once(' ') {
                Some((addr, id)) if id.parse::<u32>().is_ok() => {
                    let n = backends.len() + 1;
                    let n = *backends.entry(id.to_owned()).or_insert(n);
                    let _ = writeln!(out, "  -> {addr} b{n}");
                }
                // The header line, or a missing slot or backend: as printed.
                _ => {
                    let _ = writeln!(out, "{line}");
                }
            }
        } else if let Some(i) = line.find(" (id ") {
            let _ = writeln!(out, "{}", &line[..i]);
        } else {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Kind, namespace, name.
type Key = (String, String, String);

/// The agent and what it runs on. Fields drop in order: the agent stops
/// before its pins are cleaned up and its cgroup goes.
struct Rig {
    agent: Option<Agent>,
    pins: PinDir,
    cgroup: TestCgroup,
    dir: TempDir,
    /// The manifest: each object's document, in the order first applied.
    objects: Vec<(Key, String)>,
}

/// How long the agent's grace periods may take to pass.
const SETTLE: Duration = Duration::from_secs(10);

impl Rig {
    fn new() -> anyhow::Result<Self> {
        let name = unique("g");
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir)?;
        Ok(Self {
            agent: None,
            pins: PinDir::new(&name),
            cgroup: TestCgroup::new(&name)?,
            dir: TempDir(dir),
            objects: Vec::new(),
        })
    }

    fn manifest(&self) -> PathBuf {
        self.dir.0.join("objects.yaml")
    }

    /// Writes the manifest atomically; if the agent runs, waits until it
    /// has written what it read.
    fn write(&mut self) -> anyhow::Result<()> {
        let mut text = String::new();
        for (_, doc) in &self.objects {
            text += "---\n";
            text += doc;
        }
        let written = match &mut self.agent {
            Some(a) => Some(a.written()?),
            None => None,
        };
        let tmp = self.dir.0.join("objects.yaml.tmp");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, self.manifest())?;
        if let (Some(agent), Some(before)) = (&mut self.agent, written) {
            // The file source sends three changes per read: Services,
            // slices, this node's zone.
            agent.wait_written(before + 3)?;
        }
        Ok(())
    }

    fn start(&mut self, flags: &[&str]) -> anyhow::Result<()> {
        if self.agent.is_some() {
            bail!("the agent is already running");
        }
        self.write()?;
        let mut agent = Agent::start(
            &self.manifest(),
            self.cgroup.path(),
            self.pins.path(),
            flags,
        )?;
        agent.wait_written(2)?;
        self.agent = Some(agent);
        Ok(())
    }

    fn apply(&mut self, archive: &Archive, files: &[&str]) -> anyhow::Result<()> {
        for file in files {
            let text = archive
                .file(file)
                .with_context(|| format!("no file {file} in the archive"))?;
            for doc in yaml_serde::Deserializer::from_str(text) {
                let value = yaml_serde::Value::deserialize(doc)
                    .with_context(|| format!("{file}: a document that is not YAML"))?;
                if value.is_null() {
                    continue;
                }
                let key = key(&value)
                    .with_context(|| format!("{file}: an object without kind or name"))?;
                let doc = yaml_serde::to_string(&value)?;
                match self.objects.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 = doc,
                    None => self.objects.push((key, doc)),
                }
            }
        }
        self.write()
    }

    fn delete(&mut self, kind: &str, object: &str) -> anyhow::Result<()> {
        let (ns, name) = object
            .split_once('/')
            .context("delete KIND NAMESPACE/NAME")?;
        let key = (kind.to_owned(), ns.to_owned(), name.to_owned());
        let before = self.objects.len();
        self.objects.retain(|(k, _)| *k != key);
        anyhow::ensure!(self.objects.len() < before, "no {kind} {object} to delete");
        self.write()
    }

    fn agent(&mut self) -> anyhow::Result<&mut Agent> {
        self.agent
            .as_mut()
            .context("the agent is not started (`agent`)")
    }

    /// The normalised dump, once no revision waits for its grace period
    /// (until then the slot and backend counts still include them).
    fn dump(&mut self) -> anyhow::Result<String> {
        self.agent()?;
        let deadline = Instant::now() + SETTLE;
        loop {
            let dump = self.pins.dump()?;
            if dump.contains("; 0 revisions retired") {
                return Ok(normalise(&dump));
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "retired revisions never reaped:\n{dump}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn metric(&mut self, sample: &str, value: &str) -> anyhow::Result<()> {
        let want: f64 = value.parse().context("metric SAMPLE VALUE")?;
        let got = self.agent()?.metric(sample)?;
        anyhow::ensure!(got == want, "{sample} is {got}, expected {want}");
        Ok(())
    }
}

fn key(v: &yaml_serde::Value) -> Option<Key> {
    let s = |v: &yaml_serde::Value| v.as_str().map(str::to_owned);
    Some((
        s(&v["kind"])?,
        s(&v["metadata"]["namespace"]).unwrap_or_else(|| "default".into()),
        s(&v["metadata"]["name"])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_drops_ids_and_revisions_and_keeps_shared_backends() {
        let dump = "\
Prot LocalAddress:Port        Scheduler  Backends
  -> RemoteAddress:Port       BackendId
TCP  10.96.0.10:53            random     2 (id 7, rev 3)
  -> 10.1.2.2:53              12
  -> 10.1.2.3:53              4
TCP  10.96.0.11:53            random     1 (id 2, rev 1)
  -> 10.1.2.3:53              4
TCP  10.96.0.12:80            reject     0 (id 9, rev 2)
TCP  10.96.0.13:80            random     1 (id 3, rev 1)
  -> <slot 0 missing>
# entries: 4 frontends, 4 states, 4 slots, 2 backends; 0 revisions retired
";
        assert_eq!(
            normalise(dump),
            "\
Prot LocalAddress:Port        Scheduler  Backends
  -> RemoteAddress:Port       BackendId
TCP  10.96.0.10:53            random     2
  -> 10.1.2.2:53              b1
  -> 10.1.2.3:53              b2
TCP  10.96.0.11:53            random     1
  -> 10.1.2.3:53              b2
TCP  10.96.0.12:80            reject     0
TCP  10.96.0.13:80            random     1
  -> <slot 0 missing>
# entries: 4 frontends, 4 states, 4 slots, 2 backends; 0 revisions retired
"
        );
    }
}
