//! `lb-agent dump`: the maps as an `ipvsadm -ln`-style listing, and the
//! datapath counters.

use std::{fmt::Write as _, net::SocketAddr};

use lb_common::{FE_F_AFFINITY, FE_F_LOCAL, FE_F_NO_LOCAL_ENDPOINTS};

use crate::{
    model::{Frontend, Proto},
    reconcile::{LbView, SlotView},
};

/// Renders every frontend with the backends of its live revision, sorted by
/// address, port, protocol. Reads nothing but `view`, so it shows exactly
/// what the datapath sees.
pub fn render(view: &LbView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Prot LocalAddress:Port        Scheduler  Backends");
    let _ = writeln!(out, "  -> RemoteAddress:Port       BackendId");
    for fe in &view.frontends {
        let proto = Proto::from_number(fe.proto);
        let addr = match proto {
            Some(Proto::Any) => Frontend::wildcard(fe.addr).to_string(),
            _ => SocketAddr::new(fe.addr, fe.port).to_string(),
        };
        let proto = proto.map_or_else(|| fe.proto.to_string(), |p| p.to_string());
        let mode = match (fe.live, fe.count) {
            (false, _) => "removing",
            // EHOSTUNREACH: internalTrafficPolicy Local, no local endpoint.
            (true, 0) if fe.flags & FE_F_NO_LOCAL_ENDPOINTS != 0 => "unreachable",
            (true, 0) => "reject",
            (true, _) => "random",
        };
        let mut extra = String::new();
        if fe.flags & FE_F_AFFINITY != 0 {
            let _ = write!(extra, " persistent {}", fe.affinity_timeout);
        }
        if fe.flags & FE_F_LOCAL != 0 {
            extra.push_str(" local");
        }
        let _ = writeln!(
            out,
            "{proto:<4} {addr:<24} {mode:<11} {} (id {}, rev {}){extra}",
            fe.count, fe.id, fe.rev
        );
        for (n, slot) in fe.slots.iter().enumerate() {
            let _ = match slot {
                SlotView::Backend {
                    backend_id,
                    addr,
                    port,
                } => {
                    let addr = SocketAddr::new(*addr, *port).to_string();
                    writeln!(out, "  -> {addr:<24} {backend_id}")
                }
                SlotView::MissingSlot => writeln!(out, "  -> <slot {n} missing>"),
                SlotView::MissingBackend(id) => writeln!(out, "  -> <backend {id} missing>"),
            };
        }
    }
    let [frontends, states, slots, members, backends] = view.entries;
    let _ = writeln!(
        out,
        "# entries: {frontends} frontends, {states} states, {slots} slots, {members} members, \
         {backends} backends; {} revisions retired",
        view.retired_revisions
    );
    out
}

/// Renders the datapath counters, one per line.
pub fn render_stats(counters: impl Iterator<Item = (&'static str, u64)>) -> String {
    let mut out = String::new();
    for (name, n) in counters {
        let _ = writeln!(out, "{name:<28} {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::reconcile::FrontendView;

    #[test]
    fn missing_slots_and_backends_are_shown_not_hidden() {
        let view = LbView {
            frontends: vec![FrontendView {
                addr: Ipv4Addr::new(10, 0, 0, 1).into(),
                port: 80,
                proto: lb_common::PROTO_TCP,
                id: 7,
                live: true,
                rev: 2,
                count: 2,
                flags: FE_F_AFFINITY | FE_F_LOCAL,
                affinity_timeout: 10_800,
                slots: vec![SlotView::MissingSlot, SlotView::MissingBackend(9)],
            }],
            retired_revisions: 1,
            entries: [1, 1, 1, 0, 0],
        };
        let text = render(&view);
        assert!(text.contains("TCP  10.0.0.1:80"), "{text}");
        assert!(
            text.contains("(id 7, rev 2) persistent 10800 local"),
            "{text}"
        );
        assert!(text.contains("<slot 0 missing>"), "{text}");
        assert!(text.contains("<backend 9 missing>"), "{text}");
        assert!(text.contains("1 revisions retired"), "{text}");
    }
}
