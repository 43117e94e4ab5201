//! The txtar format (Go's `golang.org/x/tools/txtar`, which Cilium's
//! script tests use): a comment, then files, each starting at a
//! `-- name --` line. The `txtar` crate cannot hand back the files it
//! parsed (only write them to disk), and the golden runner
//! ([`crate::golden`]) must rewrite some in place, so this is the format's
//! few lines here.

/// A parsed archive. `render` gives back the text it was parsed from
/// (with a final newline added where one was missing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Archive {
    pub comment: String,
    pub files: Vec<File>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    pub name: String,
    pub data: String,
}

/// The name in a `-- name --` marker line, if it is one.
fn marker(line: &str) -> Option<&str> {
    let name = line.strip_prefix("-- ")?.strip_suffix(" --")?.trim();
    (!name.is_empty()).then_some(name)
}

/// Parses an archive; as in Go's, every text is one (there are no errors).
pub fn parse(text: &str) -> Archive {
    let mut archive = Archive::default();
    let mut current: Option<File> = None;
    for line in text.split_inclusive('\n') {
        if let Some(name) = marker(line.trim_end_matches(['\n', '\r'])) {
            archive.files.extend(current.take());
            current = Some(File {
                name: name.to_owned(),
                data: String::new(),
            });
            continue;
        }
        match &mut current {
            Some(f) => f.data.push_str(line),
            None => archive.comment.push_str(line),
        }
    }
    archive.files.extend(current);
    for f in &mut archive.files {
        if !f.data.is_empty() && !f.data.ends_with('\n') {
            f.data.push('\n');
        }
    }
    archive
}

impl Archive {
    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.data.as_str())
    }

    pub fn file_mut(&mut self, name: &str) -> Option<&mut String> {
        self.files
            .iter_mut()
            .find(|f| f.name == name)
            .map(|f| &mut f.data)
    }

    pub fn render(&self) -> String {
        let mut out = self.comment.clone();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        for f in &self.files {
            out += &format!("-- {} --\n{}", f.name, f.data);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
comment 1
-- not a marker
-- a.yaml --
kind: Service
-- empty --
--  spaced  --
last line without newline";

    #[test]
    fn parses_comment_and_files_and_renders_them_back() {
        let a = parse(TEXT);
        assert_eq!(a.comment, "comment 1\n-- not a marker\n");
        let names: Vec<&str> = a.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a.yaml", "empty", "spaced"]);
        assert_eq!(a.file("a.yaml"), Some("kind: Service\n"));
        assert_eq!(a.file("empty"), Some(""));
        assert_eq!(a.file("spaced"), Some("last line without newline\n"));
        assert_eq!(
            a.render(),
            TEXT.replace("--  spaced  --", "-- spaced --") + "\n"
        );
        assert_eq!(parse(&a.render()), a);
    }

    #[test]
    fn a_file_can_be_rewritten_in_place() {
        let mut a = parse(TEXT);
        *a.file_mut("empty").unwrap() = "now full\n".into();
        let again = parse(&a.render());
        assert_eq!(again.file("empty"), Some("now full\n"));
        assert_eq!(again.file("a.yaml"), a.file("a.yaml"));
    }
}
