//! The connect loop's table.

use std::fmt::Write as _;

use super::super::{
    results::connect::{Row, Target},
    stats::median,
};

/// Medians over rounds; the loop's ratio is to the same loop with no
/// programs (the kernel's floor), and the spread is the rounds' range.
pub(crate) fn section(o: &mut String, rows: &[Row]) {
    let Some(first) = rows.first() else {
        return;
    };
    let _ = writeln!(
        o,
        "## The connect hook: socket + connect + close\n\n\
         One thread, back to back, cycling over {} addresses of one protocol \
         at N = {} Services (half UDP 53, half TCP 80, each its own cluster IP). \
         UDP: what every DNS lookup does; TCP: non-blocking, the SYN leaves \
         and close() aborts it. `connect4 ns/call` is the program's own time \
         (the kernel's `run_time_ns / run_cnt`, statistics on during our \
         loops only).\n",
        first.addrs, first.n
    );
    let _ = writeln!(
        o,
        "| N | proto | connects to | ns/loop | x no programs | spread (ns/loop) | connect4 ns/call | failed |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let floor = rows
            .iter()
            .find(|f| f.n == r.n && f.proto == r.proto && f.target == Target::NoPrograms)
            .map_or(f64::NAN, |f| median(f.ns_per_loop.iter().copied()));
        let loop_ns = median(r.ns_per_loop.iter().copied());
        let (lo, hi) = r
            .ns_per_loop
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let call = if r.ns_per_call.is_empty() {
            "-".to_owned()
        } else {
            format!("{:.0}", median(r.ns_per_call.iter().copied()))
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {loop_ns:.0} | {:.2} | {lo:.0}-{hi:.0} | {call} | {} |",
            r.n,
            r.proto.as_str().to_uppercase(),
            r.target.name(),
            loop_ns / floor,
            r.failed
        );
    }
    let _ = writeln!(o);
}
