//! A scenario's script: one command a line, read once for both runners.

use anyhow::{Context as _, bail};

/// One command of a script.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `agent [FLAG...]`: starts the agent on the objects so far.
    Agent(Vec<String>),
    /// `apply FILE...`: adds or replaces every object of each YAML file.
    Apply(Vec<String>),
    /// `delete KIND NAMESPACE/NAME`: removes one object.
    Delete {
        kind: String,
        namespace: String,
        name: String,
    },
    /// `dump FILE`: the normalised dump must equal FILE.
    Dump(String),
    /// `metric SAMPLE VALUE`: a sample on `/metrics` must have this value.
    Metric { sample: String, value: f64 },
}

/// A command with where it stands, for messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// 1-based line in the archive.
    pub line: usize,
    pub text: String,
    pub command: Command,
}

/// The commands of `script` (an archive's comment); blank lines and `#`
/// comment lines are skipped. Fails at the first line that is none.
pub fn parse(script: &str) -> anyhow::Result<Vec<Step>> {
    let mut steps = Vec::new();
    for (n, line) in script.lines().enumerate() {
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let command = command(text).with_context(|| format!("line {}: {text}", n + 1))?;
        steps.push(Step {
            line: n + 1,
            text: text.to_owned(),
            command,
        });
    }
    Ok(steps)
}

fn command(text: &str) -> anyhow::Result<Command> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let owned = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect();
    Ok(match words[..] {
        ["agent", ref flags @ ..] => Command::Agent(owned(flags)),
        ["apply", ref files @ ..] if !files.is_empty() => Command::Apply(owned(files)),
        ["delete", kind, object] => {
            let (namespace, name) = object
                .split_once('/')
                .context("delete KIND NAMESPACE/NAME")?;
            Command::Delete {
                kind: kind.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }
        }
        ["dump", file] => Command::Dump(file.to_owned()),
        ["metric", sample, value] => Command::Metric {
            sample: sample.to_owned(),
            value: value.parse().context("metric SAMPLE VALUE")?,
        },
        _ => bail!("unknown command"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_command_and_skips_comments() {
        let steps = parse(
            "# a comment\n\napply a.yaml b.yaml\nagent --exclude-cluster-cidr=10.0.0.0/8\n\
             delete Service default/web\ndump x.dump\nmetric m{k=\"v\"} 2\n",
        )
        .unwrap();
        let commands: Vec<Command> = steps.iter().map(|s| s.command.clone()).collect();
        assert_eq!(
            commands,
            [
                Command::Apply(vec!["a.yaml".into(), "b.yaml".into()]),
                Command::Agent(vec!["--exclude-cluster-cidr=10.0.0.0/8".into()]),
                Command::Delete {
                    kind: "Service".into(),
                    namespace: "default".into(),
                    name: "web".into()
                },
                Command::Dump("x.dump".into()),
                Command::Metric {
                    sample: "m{k=\"v\"}".into(),
                    value: 2.0
                },
            ]
        );
        assert_eq!(
            (steps[0].line, steps[0].text.as_str()),
            (3, "apply a.yaml b.yaml")
        );
    }

    #[test]
    fn a_line_that_is_no_command_fails_with_its_number() {
        for bad in [
            "apply",
            "delete Service web",
            "metric m two",
            "dump",
            "frobnicate",
        ] {
            let e = parse(&format!("agent\n{bad}\n")).unwrap_err();
            assert!(format!("{e}").starts_with("line 2: "), "{bad}: {e:#}");
        }
    }
}
