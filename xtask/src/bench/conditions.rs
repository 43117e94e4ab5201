//! What the machine is and was doing around a run, for the report's
//! header: other work on the machine competes for the same cores.

use std::time::{Duration, Instant};

/// A run under way: when it started, and the load average then.
pub(super) struct Started {
    at: Instant,
    load_before: String,
}

/// The conditions of a finished run.
pub(super) struct Conditions {
    /// Cores, CPU, kernel, iptables and nft versions.
    pub machine: String,
    /// Load averages (1, 5, 15 min) at the start and at the end.
    pub load_before: String,
    pub load_after: String,
    pub took: Duration,
}

impl Started {
    pub(super) fn now() -> Self {
        Self {
            at: Instant::now(),
            load_before: loadavg(),
        }
    }

    pub(super) fn end(self) -> Conditions {
        Conditions {
            machine: machine(),
            load_before: self.load_before,
            load_after: loadavg(),
            took: self.at.elapsed(),
        }
    }
}

/// `/proc/loadavg`'s three load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split(':')
                        .nth(1)?
                        .trim()
                        .to_owned(),
                )
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let version = |cmd: &str| {
        std::process::Command::new(cmd)
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| Some(String::from_utf8(o.stdout).ok()?.lines().next()?.to_owned()))
            .unwrap_or_else(|| format!("{cmd}: unknown"))
    };
    format!(
        "Machine: {cores} cores ({cpu}), kernel {}; {}, {}.",
        kernel.trim(),
        version("iptables"),
        version("nft")
    )
}
