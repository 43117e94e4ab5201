//! Running a tool and taking what it printed.

use std::process::Command;

use anyhow::{Context as _, bail};

/// Runs `cmd`; its trimmed stdout, or an error with its stderr.
pub(crate) fn run_cmd(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
