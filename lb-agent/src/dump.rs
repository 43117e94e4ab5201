//! `lb-agent dump`: the maps as an `ipvsadm -ln`-style listing.

use std::{fmt::Write as _, net::Ipv4Addr};

use crate::reconcile::MapState;

/// Renders every frontend with its backends, sorted by VIP, port, protocol.
/// Reads nothing but `state`, so it shows exactly what the datapath sees.
pub fn render(state: &MapState) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Prot LocalAddress:Port        Scheduler  Backends");
    let _ = writeln!(out, "  -> RemoteAddress:Port       BackendId");
    for (key, value) in state.frontends() {
        let proto = match key.proto {
            lb_common::PROTO_TCP => "TCP",
            lb_common::PROTO_UDP => "UDP",
            _ => "?",
        };
        let vip = format!(
            "{}:{}",
            Ipv4Addr::from(key.vip_be),
            u16::from_be(key.port_be)
        );
        let mode = if value.count == 0 { "reject" } else { "random" };
        let _ = writeln!(
            out,
            "{proto:<4} {vip:<24} {mode:<10} {} (svc {})",
            value.count, value.svc_id
        );
        for slot in 1..=value.count {
            let key = lb_common::Service4Key { slot, ..*key };
            let Some(slot_value) = state.services.get(&key) else {
                let _ = writeln!(out, "  -> <slot {slot} missing>");
                continue;
            };
            let id = slot_value.backend_id;
            match state.backends.get(&id) {
                Some(b) => {
                    let addr = format!("{}:{}", Ipv4Addr::from(b.ip_be), u16::from_be(b.port_be));
                    let _ = writeln!(out, "  -> {addr:<24} {id}");
                }
                None => {
                    let _ = writeln!(out, "  -> <backend {id} missing>");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::frontend_key;

    #[test]
    fn missing_slot_is_shown_not_hidden() {
        let mut state = MapState::default();
        let fe = crate::model::Frontend {
            vip: Ipv4Addr::new(10, 0, 0, 1),
            port: 80,
            proto: crate::model::Proto::Tcp,
        };
        state.services.insert(
            frontend_key(&fe, 0),
            lb_common::ServiceValue {
                count: 1,
                svc_id: 7,
                ..Default::default()
            },
        );
        let text = render(&state);
        assert!(text.contains("TCP  10.0.0.1:80"), "{text}");
        assert!(text.contains("<slot 1 missing>"), "{text}");
    }
}
