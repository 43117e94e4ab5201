//! The content of the maps, as plain ordered collections.

use std::{collections::BTreeMap, net::Ipv4Addr};

use lb_common::{BACKEND_STATE_ACTIVE, Backend4, Service4Key, ServiceValue};

use crate::model::{Backend, Frontend, Proto};

/// A snapshot (or target) of `LB4_SERVICES` and `LB4_BACKENDS`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapState {
    pub services: BTreeMap<Service4Key, ServiceValue>,
    pub backends: BTreeMap<u32, Backend4>,
}

/// The `LB4_SERVICES` key of `fe` at `slot`.
pub fn frontend_key(fe: &Frontend, slot: u16) -> Service4Key {
    Service4Key {
        vip_be: fe.vip.octets(),
        port_be: fe.port.to_be(),
        proto: fe.proto.number(),
        slot,
        ..Service4Key::default()
    }
}

/// The `LB4_BACKENDS` value of `be`.
pub fn backend_key(be: &Backend, proto: Proto) -> Backend4 {
    Backend4 {
        ip_be: be.ip.octets(),
        port_be: be.port.to_be(),
        proto: proto.number(),
        state: BACKEND_STATE_ACTIVE,
    }
}

/// The frontend a key belongs to (any slot); `None` for a foreign protocol.
pub fn key_frontend(key: &Service4Key) -> Option<Frontend> {
    Some(Frontend {
        vip: Ipv4Addr::from(key.vip_be),
        port: u16::from_be(key.port_be),
        proto: Proto::from_number(key.proto)?,
    })
}

impl MapState {
    /// Slot-0 entries: each frontend with its value.
    pub fn frontends(&self) -> impl Iterator<Item = (&Service4Key, &ServiceValue)> {
        self.services.iter().filter(|(k, _)| k.slot == 0)
    }
}
