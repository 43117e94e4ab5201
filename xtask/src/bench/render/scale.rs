//! The `--scale` report.

use std::{fmt::Write as _, path::Path, time::Duration};

use super::super::{
    results::scale::{ENDPOINTS, Row, UPDATES},
    stats::percentile,
    targets::Target,
};
use super::{
    super::units::{mib, millis},
    measured,
};

/// `bench-scale.md`: one table row per N and source, then the targets.
pub(crate) fn report(rows: &[Row], targets: &[Target], took: Duration, chart: &Path) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# lb-agent at scale: N Services x {ENDPOINTS} endpoints\n\n\
         Release build, one run per N and source ({:.0} s in all). Cold: agent start \
         until its first full sync is done (the file read and parsed, or the initial \
         lists; the programs loaded; every entry written), of which the sync itself. \
         Change: {UPDATES} one-endpoint EndpointSlice changes through the stand-in \
         apiserver, each applied once the previous is written, from the agent \
         receiving the watch event to the end of its map write. RSS: once programmed \
         (2 s after the first sync), and the peak (VmHWM, the initial list). Map \
         capacities set by flag for each N.\n",
        took.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "| N | source | cold | first sync | change p50 | change p99 | RSS | peak RSS |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let (p50, p99) = if r.changes.is_empty() {
            ("-".to_owned(), "-".to_owned())
        } else {
            (
                format!("{:.3} ms", millis(percentile(&r.changes, 50.0))),
                format!("{:.3} ms", millis(percentile(&r.changes, 99.0))),
            )
        };
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} ms | {} | {p50} | {p99} | {:.0} MiB | {:.0} MiB |",
            r.n,
            r.source,
            millis(r.cold),
            r.phases
                .map_or("-".into(), |p| format!("{:.0} ms", millis(p.first_sync))),
            mib(r.rss.current),
            mib(r.rss.peak),
        );
    }
    o.push('\n');
    let timelines: Vec<_> = rows
        .iter()
        .filter_map(|r| {
            Some((
                format!("{} x {ENDPOINTS}, {}", r.n, r.source),
                r.cold,
                r.phases?,
            ))
        })
        .collect();
    super::phases::table(&mut o, &timelines);
    let _ = writeln!(o, "Targets (measured, not asserted):\n");
    for t in targets {
        let _ = writeln!(
            o,
            "- {} {}: {}",
            if t.met { "met:" } else { "MISSED:" },
            t.goal,
            measured(&t.measured)
        );
    }
    let _ = writeln!(o, "\nChart: {}", chart.display());
    o
}
