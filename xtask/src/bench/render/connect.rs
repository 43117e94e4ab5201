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
        "## The connect and sendmsg hooks, call by call\n\n\
         One thread, back to back, cycling over {} addresses of one protocol \
         at N = {} Services (half UDP 53, half TCP 80, each its own cluster IP). \
         UDP socket+connect+close: what every DNS lookup does; TCP: \
         non-blocking, the SYN leaves and close() aborts it; UDP sendto: one \
         unconnected socket, one byte per datagram (after the first rounds \
         every destination and backend repeats). `ns/call` is the program's \
         own time (the kernel's `run_time_ns / run_cnt`, statistics on during \
         our loops only).\n",
        first.addrs, first.n
    );
    let _ = writeln!(
        o,
        "| N | loop | to | ns/loop | x no programs | spread (ns/loop) | program | ns/call | failed |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let floor = rows
            .iter()
            .find(|f| f.n == r.n && f.call == r.call && f.target == Target::NoPrograms)
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
            "| {} | {} | {} | {loop_ns:.0} | {:.2} | {lo:.0}-{hi:.0} | {} | {call} | {} |",
            r.n,
            r.call.name(),
            r.target.name(),
            loop_ns / floor,
            r.call.program(),
            r.failed
        );
    }
    let _ = writeln!(o);
}
