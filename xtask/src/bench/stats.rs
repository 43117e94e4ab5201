//! Order statistics of samples.

use std::time::Duration;

/// Percentile (nearest rank) of sorted samples; zero if none.
pub(super) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    lb_tests::percentile::percentile(sorted, p).unwrap_or_default()
}

/// The median, the mean of the middle two for an even count; NaN if none.
pub(super) fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}
