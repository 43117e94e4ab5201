//! Session affinity (`sessionAffinity: ClientIP`) at the socket hooks.
//!
//! The client is the socket's network namespace (`bpf_get_netns_cookie`):
//! one pod, or the host's namespace for every host-network process.

/// Key of `LB4_AFFINITY` and `LB6_AFFINITY`: a client of a frontend of
/// that family. Written by `connect4`/`sendmsg4` and `connect6`/`sendmsg6`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AffinityKey {
    /// `bpf_get_netns_cookie()` of the socket, host byte order.
    pub netns_cookie: u64,
    /// The frontend's id (`LB4_FRONTENDS` or `LB6_FRONTENDS` value). Each Service port has one
    /// frontend per family on the socket path, its cluster IP, so this is
    /// kube-proxy's per-Service-port scope.
    pub fe_id: u32,
    pub _pad0: [u8; 4],
}
const _: () = assert!(size_of::<AffinityKey>() == 16);

/// Value of `LB4_AFFINITY` and `LB6_AFFINITY`: the backend the client was last sent to, and
/// when. Host byte order. Written by the programs; LRU, so a full map
/// evicts the oldest clients instead of failing a connect.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AffinityValue {
    /// `bpf_ktime_get_coarse_ns()` of the last connect or unconnected send.
    pub last_used_ns: u64,
    /// Key of the family's backends map.
    pub backend_id: u32,
    pub _pad0: [u8; 4],
}
const _: () = assert!(size_of::<AffinityValue>() == 16);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size asserts equal the sum of
    // the fields), and valid for any bit pattern.
    unsafe impl aya::Pod for super::AffinityKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::AffinityValue {}
}
