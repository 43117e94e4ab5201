//! What differs between address families: the map types of frontends,
//! states and backends, and their conversion from the model's types.
//! Slots are the same for every family.

use std::{
    hash::Hash,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use lb_common::{
    BACKEND_STATE_ACTIVE, Backend4, Backend6, Frontend4Key, Frontend4State, Frontend6Key,
    Frontend6State, SCOPE_EXTERNAL, SCOPE_INTERNAL,
};

use super::table::{MapKey, MapValue};
use crate::model::{Backend, Frontend, Proto, Scope};

/// The fields of a frontend state, whatever the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateView<K> {
    /// The frontend the state belongs to; the default key when free.
    pub owner: K,
    pub rev: u16,
    pub count: u16,
    /// `FE_F_*` bits.
    pub flags: u16,
    /// Session affinity timeout in seconds; 0 without affinity.
    pub affinity_timeout: u32,
    /// Entries of the revision's Maglev table; 0 without one.
    pub maglev_size: u32,
}

/// An address family's map types.
pub trait Family {
    /// Key of the frontends map, and the owner field of a state.
    type FrontendKey: MapKey + Hash;
    /// Value of the state array.
    type State: MapValue;
    /// Value of the backends map.
    type Backend: MapKey + Hash;

    /// The map key of `fe`; `None` when `fe` is of another family.
    fn frontend_key(fe: &Frontend) -> Option<Self::FrontendKey>;
    /// The model frontend of a key; `None` for a protocol we do not balance.
    fn frontend(key: &Self::FrontendKey) -> Option<Frontend>;
    fn key_proto(key: &Self::FrontendKey) -> u8;
    /// Address, port, protocol number and scope of a key, for listings.
    fn key_parts(key: &Self::FrontendKey) -> (IpAddr, u16, u8, u8);

    /// The map value of `be`; `None` when `be` is of another family.
    fn backend(be: &Backend, proto: Proto) -> Option<Self::Backend>;
    fn backend_model(b: &Self::Backend) -> Backend;
    fn backend_proto(b: &Self::Backend) -> u8;
    /// Address, port and protocol number of a backend, for listings.
    fn backend_parts(b: &Self::Backend) -> (IpAddr, u16, u8);

    fn state(view: StateView<Self::FrontendKey>) -> Self::State;
    fn view(state: &Self::State) -> StateView<Self::FrontendKey>;
}

/// IPv4: the `LB4_*` maps.
#[derive(Debug)]
pub enum V4 {}

/// IPv6: the `LB6_*` maps.
#[derive(Debug)]
pub enum V6 {}

/// Both families' maps have the same shape; only the address differs.
macro_rules! family {
    ($fam:ty, $variant:ident, $addr:ty, $key:ident, $state:ident, $backend:ident) => {
        impl Family for $fam {
            type FrontendKey = $key;
            type State = $state;
            type Backend = $backend;

            fn frontend_key(fe: &Frontend) -> Option<$key> {
                let IpAddr::$variant(vip) = fe.vip else {
                    return None;
                };
                Some($key {
                    addr_be: vip.octets(),
                    port_be: fe.port.to_be(),
                    proto: fe.proto.number(),
                    scope: match fe.scope {
                        Scope::Internal => SCOPE_INTERNAL,
                        Scope::External => SCOPE_EXTERNAL,
                    },
                })
            }

            fn frontend(key: &$key) -> Option<Frontend> {
                Some(Frontend {
                    vip: <$addr>::from(key.addr_be).into(),
                    port: u16::from_be(key.port_be),
                    proto: Proto::from_number(key.proto)?,
                    scope: match key.scope {
                        SCOPE_INTERNAL => Scope::Internal,
                        SCOPE_EXTERNAL => Scope::External,
                        _ => return None,
                    },
                })
            }

            fn key_proto(key: &$key) -> u8 {
                key.proto
            }

            fn key_parts(key: &$key) -> (IpAddr, u16, u8, u8) {
                (
                    <$addr>::from(key.addr_be).into(),
                    u16::from_be(key.port_be),
                    key.proto,
                    key.scope,
                )
            }

            fn backend(be: &Backend, proto: Proto) -> Option<$backend> {
                let IpAddr::$variant(ip) = be.ip else {
                    return None;
                };
                Some($backend {
                    addr_be: ip.octets(),
                    port_be: be.port.to_be(),
                    proto: proto.number(),
                    state: BACKEND_STATE_ACTIVE,
                })
            }

            fn backend_model(b: &$backend) -> Backend {
                Backend {
                    ip: <$addr>::from(b.addr_be).into(),
                    port: u16::from_be(b.port_be),
                }
            }

            fn backend_proto(b: &$backend) -> u8 {
                b.proto
            }

            fn backend_parts(b: &$backend) -> (IpAddr, u16, u8) {
                (
                    <$addr>::from(b.addr_be).into(),
                    u16::from_be(b.port_be),
                    b.proto,
                )
            }

            fn state(v: StateView<$key>) -> $state {
                $state {
                    owner: v.owner,
                    rev: v.rev,
                    count: v.count,
                    flags: v.flags,
                    affinity_timeout: v.affinity_timeout,
                    maglev_size: v.maglev_size,
                    ..$state::default()
                }
            }

            fn view(s: &$state) -> StateView<$key> {
                StateView {
                    owner: s.owner,
                    rev: s.rev,
                    count: s.count,
                    flags: s.flags,
                    affinity_timeout: s.affinity_timeout,
                    maglev_size: s.maglev_size,
                }
            }
        }
    };
}

family!(V4, V4, Ipv4Addr, Frontend4Key, Frontend4State, Backend4);
family!(V6, V6, Ipv6Addr, Frontend6Key, Frontend6State, Backend6);
