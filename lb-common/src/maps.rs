//! Map names and capacities. The names are the pin file names under the
//! bpffs directory, and the symbol names of the `#[btf_map]` statics.

/// Frontend and backend slots, keyed by [`crate::Service4Key`].
pub const SERVICES4_MAP: &str = "LB4_SERVICES";
/// Backends, keyed by backend id (`u32`, host byte order).
pub const BACKENDS4_MAP: &str = "LB4_BACKENDS";
/// Reverse NAT for socket LB, keyed by [`crate::RevNat4Key`].
pub const REVNAT4_MAP: &str = "LB4_REVNAT";

/// Capacity of the services map: frontends plus all their backend slots.
pub const SERVICES4_MAX: u32 = 262_144;
/// Capacity of the backends map.
pub const BACKENDS4_MAX: u32 = 131_072;
/// Capacity of the reverse NAT LRU map (one entry per socket and backend).
pub const REVNAT4_MAX: u32 = 262_144;

/// IP protocol numbers as stored in `proto` fields.
pub const PROTO_TCP: u8 = 6;
/// See [`PROTO_TCP`].
pub const PROTO_UDP: u8 = 17;

/// Highest number of backends one frontend may hold (slots `1..=MAX`).
pub const MAX_BACKENDS_PER_SERVICE: u16 = u16::MAX - 1;
