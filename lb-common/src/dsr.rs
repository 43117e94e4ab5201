//! What the tc programs need to know of the cluster to trust and to use
//! direct server return: `LB4_DSR_EPS`/`LB6_DSR_EPS` (the endpoints on
//! this node of DSR frontends, which alone may receive a packet carrying a
//! frontend) and `LB4_NODE_NETS`/`LB6_NODE_NETS` (which node each address
//! belongs to, so that a client on its backend's node is SNATed rather
//! than sent by DSR, whose answer would never pass a device of ours).

/// Key of `LB4_DSR_EPS` (`A` = `[u8; 4]`) and `LB6_DSR_EPS` (`[u8; 16]`):
/// `endpoint_be:endpoint_port_be/proto` is an endpoint on this node of the
/// external frontend `frontend_be:frontend_port_be/proto`, which forwards
/// by DSR. A NodePort frontend has the all-zero address: every node's
/// address serves it, and the backend's node knows only its own. Network
/// byte order. Written by the agent; the value (`u32`) is 1.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DsrEndpointKey<A> {
    pub frontend_be: A,
    pub endpoint_be: A,
    pub frontend_port_be: u16,
    pub endpoint_port_be: u16,
    /// IP protocol number.
    pub proto: u8,
    pub _pad0: [u8; 3],
}
/// `LB4_DSR_EPS`' key.
pub type DsrEndpoint4Key = DsrEndpointKey<[u8; 4]>;
/// `LB6_DSR_EPS`' key.
pub type DsrEndpoint6Key = DsrEndpointKey<[u8; 16]>;
const _: () = assert!(size_of::<DsrEndpoint4Key>() == 16);
const _: () = assert!(size_of::<DsrEndpoint6Key>() == 40);

/// Default capacity of `LB4_DSR_EPS` and of `LB6_DSR_EPS`.
pub const DEFAULT_DSR_EPS_MAX: u32 = 65_536;

/// Value of `LB4_NODE_NETS` and `LB6_NODE_NETS`, LPM tries whose key is an
/// address (network byte order) behind a `u32` prefix length: the node
/// that address belongs to. Written by the agent from the cluster's Node
/// objects (their addresses, and their pod CIDRs) and from the node names
/// of the endpoints of DSR frontends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeNet {
    /// The node's number, the agent's own (host order; never 0); stable
    /// while the node exists.
    pub node: u32,
}
const _: () = assert!(size_of::<NodeNet>() == 4);

/// Default capacity of `LB4_NODE_NETS` and of `LB6_NODE_NETS`.
pub const DEFAULT_NODE_NETS_MAX: u32 = 65_536;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size assert equals the sum of
    // the fields), and every bit pattern is valid.
    // (`Address` is sealed to the two addresses of the asserts).
    unsafe impl<A: crate::Address> aya::Pod for super::DsrEndpointKey<A> {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::NodeNet {}
}
