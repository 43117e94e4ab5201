//! The socket hooks' targets: their own cost per call, and what the
//! DNS-like loop pays for them.

use super::super::{
    results::connect::{Call, Row, Target as To},
    stats::median,
};
use super::{Measured, Target};

pub(crate) fn targets(rows: &[Row]) -> Vec<Target> {
    let find = |call, to| rows.iter().find(|r| r.call == call && r.target == to);
    let mut t = Vec::new();
    for call in Call::ALL {
        let Some(ours) = find(call, To::Services) else {
            continue;
        };
        let bound = match call {
            Call::UdpConnect | Call::TcpConnect => 500.0,
            Call::UdpSendto => 300.0,
        };
        let ns = median(ours.ns_per_call.iter().copied());
        t.push(Target::at_most(
            format!(
                "{} <= {bound:.0} ns per call, {} to {} Service addresses at N={}",
                call.program(),
                call.name(),
                ours.addrs,
                ours.n
            ),
            ns,
            bound,
            Measured::Nanos(ns),
        ));
        if call == Call::UdpConnect
            && let Some(floor) = find(call, To::NoPrograms)
        {
            let ratio = median(ours.ns_per_loop.iter().copied())
                / median(floor.ns_per_loop.iter().copied());
            t.push(Target::at_most(
                format!(
                    "{} over {} Service addresses <= 1.08x the loop without programs at N={}",
                    call.name(),
                    ours.addrs,
                    ours.n
                ),
                ratio,
                1.08,
                Measured::Times(ratio),
            ));
        }
    }
    t
}
