//! `--scale`'s targets.

use std::time::Duration;

use super::super::{
    results::scale::{API, FILE, Row},
    stats::percentile,
    units::{mib, millis},
};
use super::{Measured, Target};

/// `--scale`'s targets.
pub(crate) fn targets(rows: &[Row]) -> Vec<Target> {
    let mut t = Vec::new();
    for r in rows {
        if r.n == 100_000 {
            t.push(Target::new(
                format!("cold 100,000 x 10 in <= 8 s ({})", r.source),
                Measured::Seconds(r.cold),
                r.cold <= Duration::from_secs(8),
            ));
            t.push(Target::new(
                format!("RSS <= 400 MiB at 100,000 x 10 ({})", r.source),
                Measured::Mib(r.rss.current),
                r.rss.current <= 400 << 20,
            ));
        }
        if r.n == 10_000 {
            t.push(Target::new(
                format!("RSS <= 100 MiB at 10,000 x 10 ({})", r.source),
                Measured::Mib(r.rss.current),
                r.rss.current <= 100 << 20,
            ));
        }
        if !r.changes.is_empty() {
            let p99 = percentile(&r.changes, 99.0);
            t.push(Target::new(
                format!("change p99 <= 1 ms at {}", r.n),
                Measured::Text(format!("{:.3} ms", millis(p99))),
                p99 <= Duration::from_millis(1),
            ));
        }
    }
    // At most linear: per-Service cost at the largest N no more than 1.5x
    // that at the next one down (noise allowance). Against the smallest N
    // the fixed start-up cost would hide any superlinear growth.
    for source in [FILE, API] {
        let of: Vec<&Row> = rows.iter().filter(|r| r.source == source).collect();
        if let [.., a, b] = of[..] {
            let per = |r: &Row, v: f64| v / r.n as f64;
            for (what, ratio) in [
                ("cold", per(b, millis(b.cold)) / per(a, millis(a.cold))),
                (
                    "RSS",
                    per(b, mib(b.rss.current)) / per(a, mib(a.rss.current)),
                ),
            ] {
                t.push(Target::at_most(
                    format!("{what} grows at most linearly ({source})"),
                    ratio,
                    1.5,
                    Measured::Text(format!("per Service at {} / at {} = {ratio:.2}", b.n, a.n)),
                ));
            }
        }
    }
    t
}
