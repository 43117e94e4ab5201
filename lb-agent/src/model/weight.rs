//! Endpoint weights: an EndpointSlice's annotation gives each of its
//! endpoints a weight, 0 to 65535 (Cilium's `service.cilium.io/weight`,
//! read as an alias of ours). New flows pick endpoints in proportion to
//! their weights, by Maglev or at random; weight 0 is maintenance: no new
//! flows, established ones kept. Pure: no I/O.

use std::collections::BTreeMap;

/// The project's weight annotation of an EndpointSlice.
pub const WEIGHT_ANNOTATION: &str = "lb-agent.io/weight";
/// Cilium's (1.20), read when ours is absent.
pub const CILIUM_WEIGHT_ANNOTATION: &str = "service.cilium.io/weight";
/// The weight of an endpoint whose slice sets none: Cilium's default.
pub const DEFAULT_WEIGHT: u16 = 100;
/// Fewest slots a weighted frontend's random selection is spread over
/// (more for many endpoints: see [`slot_counts`]).
const MIN_WEIGHTED_SLOTS: u32 = 1024;
/// Slots per endpoint a weighted frontend's random selection may use.
const WEIGHTED_SLOTS_PER_ENDPOINT: u32 = 16;

/// The weight `annotations` give a slice's endpoints: ours, else Cilium's,
/// else [`DEFAULT_WEIGHT`]; `Err` with the value when the annotation read is
/// not a number from 0 to 65535 (the endpoints keep the default, as Cilium
/// ignores an invalid value).
pub fn slice_weight(annotations: Option<&BTreeMap<String, String>>) -> Result<u16, String> {
    let Some(value) = annotations.and_then(|a| {
        a.get(WEIGHT_ANNOTATION)
            .or_else(|| a.get(CILIUM_WEIGHT_ANNOTATION))
    }) else {
        return Ok(DEFAULT_WEIGHT);
    };
    value.trim().parse::<u16>().map_err(|_| value.clone())
}

/// How many of a frontend's random-selection slots each of its endpoints
/// holds, for endpoints of these nonzero `weights`: proportional to them.
/// Exact when the weights reduced by their greatest common divisor sum to
/// at most the budget (1024 slots, or 16 per endpoint when there are more
/// than 64, at most 65535); otherwise the budget shared by largest
/// remainders, each endpoint keeping at least one slot.
pub fn slot_counts(weights: &[u16]) -> Vec<u32> {
    let g = weights.iter().fold(0u32, |g, &w| gcd(g, u32::from(w)));
    if g == 0 {
        return vec![0; weights.len()];
    }
    let reduced: Vec<u32> = weights.iter().map(|&w| u32::from(w) / g).collect();
    let total: u64 = reduced.iter().map(|&w| u64::from(w)).sum();
    let n = weights.len() as u32;
    let budget = MIN_WEIGHTED_SLOTS
        .max(WEIGHTED_SLOTS_PER_ENDPOINT.saturating_mul(n))
        .min(u32::from(u16::MAX));
    if total <= u64::from(budget) {
        return reduced;
    }
    // Each endpoint's floor of its exact share (at least one slot), then
    // the slots left to the largest remainders.
    let share = |w: u32| u64::from(w) * u64::from(budget);
    let floors: Vec<u32> = reduced.iter().map(|&w| (share(w) / total) as u32).collect();
    let mut counts: Vec<u32> = floors.iter().map(|&f| f.max(1)).collect();
    let used: u32 = counts.iter().sum();
    // An endpoint raised to its one slot has had more than its share.
    let mut by_remainder: Vec<usize> = (0..counts.len()).filter(|&i| floors[i] > 0).collect();
    by_remainder.sort_by_key(|&i| std::cmp::Reverse(share(reduced[i]) % total));
    for &i in by_remainder
        .iter()
        .take(budget.saturating_sub(used) as usize)
    {
        counts[i] += 1;
    }
    counts
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn ours_wins_over_ciliums_and_an_invalid_value_is_reported() {
        assert_eq!(slice_weight(None), Ok(DEFAULT_WEIGHT));
        let a = annotations(&[(CILIUM_WEIGHT_ANNOTATION, "7")]);
        assert_eq!(slice_weight(Some(&a)), Ok(7));
        let a = annotations(&[(WEIGHT_ANNOTATION, "0"), (CILIUM_WEIGHT_ANNOTATION, "7")]);
        assert_eq!(slice_weight(Some(&a)), Ok(0));
        for bad in ["65536", "-1", "1.5", "", "heavy"] {
            let a = annotations(&[(WEIGHT_ANNOTATION, bad)]);
            assert_eq!(slice_weight(Some(&a)), Err(bad.to_owned()), "{bad:?}");
        }
        let a = annotations(&[(WEIGHT_ANNOTATION, "65535")]);
        assert_eq!(slice_weight(Some(&a)), Ok(65535));
    }

    #[test]
    fn slots_are_exact_for_small_reduced_weights() {
        assert_eq!(slot_counts(&[100, 300]), [1, 3]);
        assert_eq!(slot_counts(&[5, 5, 5]), [1, 1, 1]);
        assert_eq!(slot_counts(&[1000, 24]), [125, 3]);
    }

    /// Weights whose reduced sum exceeds the budget share it within one
    /// slot of their exact share, each keeping one.
    #[test]
    fn large_weights_share_the_budget_in_proportion() {
        for weights in [
            vec![1u16, 65535],
            vec![65535, 65534, 3, 7919],
            (1..=200).map(|i| i * 211).collect(),
        ] {
            let counts = slot_counts(&weights);
            let total: u32 = counts.iter().sum();
            let budget = 1024.max(16 * weights.len() as u32);
            assert_eq!(total, budget, "{weights:?}");
            let sum: f64 = weights.iter().map(|&w| f64::from(w)).sum();
            for (&w, &c) in weights.iter().zip(&counts) {
                let exact = f64::from(w) / sum * f64::from(budget);
                assert!(
                    c >= 1 && (f64::from(c) - exact).abs() <= 1.0,
                    "{w}: {c} vs {exact}"
                );
            }
        }
    }
}
