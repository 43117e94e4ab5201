//! The objects a scenario has applied so far, and the manifest the agent
//! reads them from.

use anyhow::Context as _;
use serde::Deserialize as _;

use crate::txtar::Archive;

/// Kind, namespace, name.
type Key = (String, String, String);

/// Each object's document, in the order first applied.
#[derive(Debug, Default)]
pub(super) struct Objects(Vec<(Key, String)>);

impl Objects {
    /// Adds or replaces every object of each of the archive's `files`.
    pub(super) fn apply(&mut self, archive: &Archive, files: &[String]) -> anyhow::Result<()> {
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
                match self.0.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 = doc,
                    None => self.0.push((key, doc)),
                }
            }
        }
        Ok(())
    }

    pub(super) fn delete(&mut self, kind: &str, namespace: &str, name: &str) -> anyhow::Result<()> {
        let key = (kind.to_owned(), namespace.to_owned(), name.to_owned());
        let before = self.0.len();
        self.0.retain(|(k, _)| *k != key);
        anyhow::ensure!(
            self.0.len() < before,
            "no {kind} {namespace}/{name} to delete"
        );
        Ok(())
    }

    /// Every object, one `---`-separated document each.
    pub(super) fn manifest(&self) -> String {
        let mut text = String::new();
        for (_, doc) in &self.0 {
            text += "---\n";
            text += doc;
        }
        text
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
