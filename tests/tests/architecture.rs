//! ARCHITECTURE.md's module map names every source file of `lb-agent`,
//! `lb-common`, `lb-ebpf` and `xtask`, and nothing that is gone. No root.
//!
//! The convention, which the map's own first paragraph repeats:
//!
//! * The map is the section `## Module map`: an introduction, then one
//!   `###` subsection per crate whose heading names the crate's source
//!   folder (`` `lb-agent/src/` ``).
//! * In a subsection, a code span that is a path (lower-case letters,
//!   digits, `_`, `/` and `.`, ending in `.rs` or `/`) names a file or folder
//!   relative to the crate's `src/`; in a list item whose first code span is
//!   a folder (`` * `datapath/`: ``), relative to that folder instead.
//! * Every `.rs` file must be named, except that a folder names its
//!   `mod.rs`, and a folder in [`WHOLE`] names every file under it (a tree
//!   of small files with one purpose, described as one).
//! * Every path named must exist, so a deleted or moved file fails too.
//!
//! Besides, every code span anywhere in the document that is a path from
//! the repository's root into a crate of the workspace or `fuzz/`
//! (`lb-agent/src/source/`, `tests/tests/upgrade.rs`; no globs) must exist.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

/// The crates whose sources the map covers.
const CRATES: [&str; 4] = ["lb-agent", "lb-common", "lb-ebpf", "xtask"];

/// Folders (from the repository's root) that the map names as a whole:
/// naming one names every file under it.
const WHOLE: [&str; 1] = ["xtask/src/bench/"];

/// Root-relative prefixes of paths checked anywhere in the document.
const ROOTS: [&str; 9] = [
    "lb-agent/",
    "lb-common/",
    "lb-ebpf/",
    "xtask/",
    "tests/",
    "lb-fixtures/",
    "lb-test-netns/",
    "lb-testbed/",
    "fuzz/",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

fn architecture() -> String {
    fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The odd-numbered pieces between backticks: the inline code spans.
fn spans(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// A code span that the map reads as a path.
fn is_path(span: &str) -> bool {
    !span.is_empty()
        && !span.starts_with(['/', '.'])
        && (span.ends_with(".rs") || span.ends_with('/'))
        && span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_/.".contains(c))
}

/// The module map's blocks (a list item with its continuation lines, or a
/// paragraph), each with the crate subsection it is in.
fn map_blocks(doc: &str) -> Vec<(Option<String>, String)> {
    let section: Vec<&str> = doc
        .lines()
        .skip_while(|l| *l != "## Module map")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect();
    assert!(
        !section.is_empty(),
        "ARCHITECTURE.md has no `## Module map`"
    );
    let (mut out, mut krate, mut block, mut fenced) = (Vec::new(), None, String::new(), false);
    let mut flush = |krate: &Option<String>, block: &mut String| {
        if !block.trim().is_empty() {
            out.push((krate.clone(), std::mem::take(block)));
        }
        block.clear();
    };
    for line in section {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            flush(&krate, &mut block);
            krate = spans(heading)
                .find_map(|s| s.strip_suffix("/src/"))
                .map(str::to_owned);
            assert!(
                krate.as_deref().is_some_and(|k| CRATES.contains(&k)),
                "module map heading {line:?} names none of {CRATES:?} as `<crate>/src/`"
            );
        } else if line.trim().is_empty() || line.starts_with("* ") {
            flush(&krate, &mut block);
            block.push_str(line);
        } else {
            block.push(' ');
            block.push_str(line.trim());
        }
    }
    flush(&krate, &mut block);
    out
}

/// Every path the map names, from the repository's root.
fn named(doc: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (krate, block) in map_blocks(doc) {
        // The map's introduction, before the first crate, names no module.
        let Some(krate) = krate else { continue };
        let paths = spans(&block).filter(|s| is_path(s));
        let folder = block
            .starts_with("* ")
            .then(|| spans(&block).next())
            .flatten()
            .filter(|s| is_path(s) && s.ends_with('/'));
        for path in paths {
            let rel = match folder {
                Some(f) if path != f => format!("{f}{path}"),
                _ => path.to_owned(),
            };
            out.insert(format!("{krate}/src/{rel}"));
        }
    }
    out
}

/// Every `.rs` file under `dir`, from the repository's root.
fn rust_files(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root()).expect("under the root");
            out.insert(rel.to_str().expect("utf-8 path").to_owned());
        }
    }
}

/// Whether the named paths cover `file`.
fn covered(file: &str, named: &BTreeSet<String>) -> bool {
    named.contains(file)
        || file
            .strip_suffix("mod.rs")
            .is_some_and(|folder| named.contains(folder))
        || WHOLE
            .iter()
            .any(|w| file.starts_with(w) && named.contains(*w))
}

#[test]
fn the_module_map_names_every_source_file_and_only_existing_ones() {
    let named = named(&architecture());
    let mut files = BTreeSet::new();
    for krate in CRATES {
        rust_files(&root().join(krate).join("src"), &mut files);
    }
    assert!(files.len() > 100, "{files:?}");
    let unnamed: Vec<&String> = files.iter().filter(|f| !covered(f, &named)).collect();
    let gone: Vec<&String> = named.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(
        unnamed.is_empty() && gone.is_empty(),
        "ARCHITECTURE.md's module map is out of date.\n\
         Not named in it ({}):\n  {}\n\
         Named in it, but no such file or folder ({}):\n  {}",
        unnamed.len(),
        list(&unnamed),
        gone.len(),
        list(&gone),
    );
}

#[test]
fn every_repository_path_in_the_document_exists() {
    let doc = architecture();
    let mut para = String::new();
    let mut paths = BTreeSet::new();
    for line in doc.lines().chain([""]) {
        if line.trim().is_empty() || line.trim_start().starts_with("```") {
            paths.extend(
                spans(&para)
                    .filter(|s| ROOTS.iter().any(|r| s.starts_with(r)))
                    .filter(|s| !s.contains(['*', '<', ' ']))
                    .map(str::to_owned),
            );
            para.clear();
        } else {
            para.push_str(line);
            para.push(' ');
        }
    }
    assert!(paths.len() > 10, "few repository paths found: {paths:?}");
    let gone: Vec<&String> = paths.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(
        gone.is_empty(),
        "ARCHITECTURE.md names paths that do not exist ({}):\n  {}",
        gone.len(),
        list(&gone)
    );
}

fn list(paths: &[&String]) -> String {
    match paths.is_empty() {
        true => "(none)".to_owned(),
        false => paths
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("\n  "),
    }
}
