//! The raw data: every timed change, every sample.

use std::fmt::Write as _;

use crate::soak::outcome::Results;

/// Every timed change, one per line: kind, Service, when it was made and
/// when its clock started and stopped (seconds from the start of traffic),
/// milliseconds to converge, and whether a disturbance restarted its clock.
pub fn changes_csv(r: &Results) -> String {
    let s = |ns: Option<u64>| {
        ns.map_or(String::new(), |ns| {
            format!("{:.4}", ns as f64 / 1e9 - r.traffic_ns.0 as f64 / 1e9)
        })
    };
    let mut o =
        String::from("kind,service,made_s,clock_s,resolved_s,took_ms,interrupted,catching_up\n");
    for x in r.tracker.records() {
        let _ = writeln!(
            o,
            "{:?},{},{},{},{},{},{},{}",
            x.kind,
            x.svc.as_deref().unwrap_or(""),
            s(Some(x.made_ns)),
            s(x.clock_ns),
            s(x.resolved_ns),
            x.took_ns()
                .map_or(String::new(), |n| format!("{:.2}", n as f64 / 1e6)),
            x.interrupted,
            x.catching_up
        );
    }
    o
}

/// Every sample, one per line.
pub fn samples_csv(r: &Results) -> String {
    let mut o = String::from(
        "t_s,pid,rss_kib,fds,frontends,states,slots,members,backends,affinity,revnat,\
         frontends_needed,slots_needed,backends_needed,settled\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for x in &r.samples {
        let e = x.entries;
        let _ = writeln!(
            o,
            "{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            x.t_ns.saturating_sub(r.traffic_ns.0) as f64 / 1e9,
            x.pid,
            opt(x.rss_kib.map(|v| v.to_string())),
            opt(x.fds.map(|v| v.to_string())),
            opt(e.map(|e| e.frontends.to_string())),
            opt(e.map(|e| e.states.to_string())),
            opt(e.map(|e| e.slots.to_string())),
            opt(e.map(|e| e.members.to_string())),
            opt(e.map(|e| e.backends.to_string())),
            opt(e.map(|e| e.affinity.to_string())),
            opt(e.and_then(|e| e.revnat).map(|v| v.to_string())),
            x.needed.0,
            x.needed.1,
            x.needed.2,
            x.settled
        );
    }
    o
}
