//! The cold start broken down, from the agent's own timeline.

use std::{fmt::Write as _, time::Duration};

use super::super::{results::control::Phases, units::ms};

/// One table row per cold start of ours: `(what, until programmed as seen
/// from outside, the agent's timeline)`.
pub(super) fn table(o: &mut String, rows: &[(String, Duration, Phases)]) {
    let _ = writeln!(
        o,
        "Where the time went (the agent's timeline, from its sync thread's start; the \
         programs load while the lists are read; process start is the rest of the \
         outside figure):\n\n\
         | cold start | programs loaded | lists read | model built | first sync (compute + \
         write) | programmed | seen from outside |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (what, wall, p) in rows {
        let _ = writeln!(
            o,
            "| {what} | {} | {} | {} | {} | {} | {} |",
            ms(p.programs),
            ms(p.lists),
            ms(p.model),
            ms(p.first_sync),
            ms(p.programmed),
            ms(*wall)
        );
    }
    o.push('\n');
}
