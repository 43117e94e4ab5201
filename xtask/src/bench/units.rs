//! Figures in the units the report shows them in: MiB, ms. Both the
//! renderers and the targets' goals word figures so, and neither owns it.

use std::time::Duration;

/// Bytes in MiB.
pub(super) fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

/// A time as the tables show it: in ms, to the µs below 10 ms.
pub(super) fn ms(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.3} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    }
}

/// A time in milliseconds.
pub(super) fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
