//! The control plane's targets.

use std::time::Duration;

use super::super::{
    results::control::Control,
    stats::percentile,
    units::{mib, ms},
};
use super::{Measured, Target};

/// The control plane's targets.
pub(crate) fn targets(c: &Control) -> Vec<Target> {
    let mut t = Vec::new();
    for x in c.cold.iter().filter(|x| x.what.starts_with("ours")) {
        let (what, bound) = if x.what.ends_with("restarted") {
            (
                "restart of the same build to programmed",
                Duration::from_millis(200),
            )
        } else {
            ("cold programming", Duration::from_millis(600))
        };
        t.push(Target::within(
            format!(
                "{what} of {}x{} <= {} ({})",
                c.services,
                c.endpoints,
                ms(bound),
                x.what
            ),
            x.wall,
            bound,
        ));
    }
    for x in &c.cold {
        for p in x.health.iter().filter(|p| p.path == "/livez") {
            let max = p.latencies.last().copied().unwrap_or_default();
            t.push(Target::new(
                format!(
                    "/livez answers within 100 ms at every moment after the listener binds ({})",
                    x.what
                ),
                Measured::Text(format!("max {}, {} without an answer", ms(max), p.failed)),
                p.failed == 0 && max <= Duration::from_millis(100),
            ));
        }
    }
    if let Some(u) = c.updates.first() {
        t.push(Target::within(
            "one-endpoint update p99 <= 10 ms",
            percentile(&u.samples, 99.0),
            Duration::from_millis(10),
        ));
    }
    for x in &c.cold {
        if let Some(rss) = &x.rss {
            t.push(Target::new(
                format!("RSS <= 150 MB ({})", x.what),
                Measured::Text(format!(
                    "{:.1} MiB (peak {:.1} MiB)",
                    mib(rss.current),
                    mib(rss.peak)
                )),
                rss.current <= 150_000_000,
            ));
        }
    }
    t
}
