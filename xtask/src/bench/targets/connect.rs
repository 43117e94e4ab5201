//! The connect hook's targets: its own cost per call, and what the
//! DNS-like loop pays for it.

use lb_tests::kubeproxy::Proto;

use super::super::{
    results::connect::{Row, Target as To},
    stats::median,
};
use super::{Measured, Target};

pub(crate) fn targets(rows: &[Row]) -> Vec<Target> {
    let find = |proto, to| rows.iter().find(|r| r.proto == proto && r.target == to);
    let mut t = Vec::new();
    for proto in [Proto::Udp, Proto::Tcp] {
        let Some(ours) = find(proto, To::Services) else {
            continue;
        };
        let call = median(ours.ns_per_call.iter().copied());
        t.push(Target::at_most(
            format!(
                "connect4 <= 500 ns per call, {} to {} Service addresses at N={}",
                proto.as_str().to_uppercase(),
                ours.addrs,
                ours.n
            ),
            call,
            500.0,
            Measured::Nanos(call),
        ));
        if proto == Proto::Udp
            && let Some(floor) = find(proto, To::NoPrograms)
        {
            let ratio = median(ours.ns_per_loop.iter().copied())
                / median(floor.ns_per_loop.iter().copied());
            t.push(Target::at_most(
                format!(
                    "UDP socket+connect+close over {} Service addresses <= 1.08x the loop without programs at N={}",
                    ours.addrs, ours.n
                ),
                ratio,
                1.08,
                Measured::Times(ratio),
            ));
        }
    }
    t
}
