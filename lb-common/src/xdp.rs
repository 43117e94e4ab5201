//! The XDP fast path's list of devices it may redirect to: a global of the
//! program (its `.bss`, an unpinned array of one element that each loaded
//! object has its own of), not a pinned map of the layout. The agent writes
//! it after each attachment; all zero (as loaded) allows none, so the
//! program then sends packets back out of their own device only.

/// The global's symbol in the object, and the map aya makes of its
/// section.
pub const XDP_DEVICES_SYMBOL: &str = "LB_XDP_DEVICES";
pub const XDP_DEVICES_SECTION: &str = ".bss";

/// Capacity of the list: interface indexes of the devices `lb_xdp` runs on
/// natively, host order, the unused tail 0. A device beyond it is not
/// redirected to (its flows stay on tc).
pub const XDP_DEVICES_MAX: usize = 32;

/// What the XDP program leaves in a packet's metadata (4 bytes before the
/// frame, host order) for the tc programs: it looked the packet up and it
/// is no frontend's nor any flow's of ours, so tc passes it at once
/// instead of repeating the lookups. Only XDP programs on the device can
/// write metadata; tc trusts nothing else.
pub const XDP_META_NOT_OURS: u32 = 0x4c42_4e4f;

/// The tag of [`XdpFound`], its first word.
pub const XDP_META_FOUND: u32 = 0x4c42_464e;
/// [`XdpFound::what`]: a flow of ours whose packets are DNATed (a known
/// flow's, or one XDP just recorded, to a local endpoint or behind a
/// device XDP does not send to; a DSR flow), or a SNATed flow's reply,
/// whose destination becomes `addr_be:port_be`.
pub const XDP_FOUND_FLOW: u8 = 1;
/// [`XdpFound::what`]: a flow of the kernel's (kube-proxy's, taken over),
/// which tc passes for the kernel's conntrack to translate.
pub const XDP_FOUND_KERNEL: u8 = 2;

/// What the XDP program leaves in the metadata of a packet of a flow of
/// ours that it passes up to tc instead of sending it on itself (a local
/// endpoint, a DSR flow, a kernel flow, a next hop the FIB has not
/// resolved): what tc's lookups would find, so that tc does not repeat
/// them. XDP advanced the flow's conntrack entries (or recorded the new
/// flow) before it wrote this: tc only rewrites the destination. `A` is
/// `[u8; 4]` or a 16-byte address; 12 or 24 bytes, in front of the frame.
/// Only XDP programs on the device can write metadata.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpFound<A> {
    /// [`XDP_META_FOUND`], host order.
    pub tag: u32,
    /// Where the packet's destination goes, network byte order; all zero
    /// for a kernel flow.
    pub addr_be: A,
    pub port_be: u16,
    /// [`XDP_FOUND_FLOW`] or [`XDP_FOUND_KERNEL`].
    pub what: u8,
    /// The address's size in bytes (4 or 16): tc checks it is the
    /// packet's family.
    pub addr_len: u8,
}
const _: () = assert!(size_of::<XdpFound<[u8; 4]>>() == 12);
const _: () = assert!(size_of::<XdpFound<[u8; 16]>>() == 24);

/// Key of the XDP fast path's flow cache (`LB4_XDP_FLOWS`: `A` =
/// `[u8; 4]`; `LB6_XDP_FLOWS`: `[u8; 16]`): a packet's addresses and
/// ports, network byte order, exactly as they lie in a packet without IPv4
/// options or IPv6 extension headers, so that the program looks the packet
/// up by its own bytes. (The protocol is the value's: a TCP and a UDP
/// flow of the same addresses and ports take turns.)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XdpFlowKey<A> {
    pub saddr_be: A,
    pub daddr_be: A,
    pub sport_be: u16,
    pub dport_be: u16,
}
/// The IPv4 maps' key.
pub type XdpFlow4Key = XdpFlowKey<[u8; 4]>;
/// The IPv6 maps' key.
pub type XdpFlow6Key = XdpFlowKey<[u8; 16]>;
const _: () = assert!(size_of::<XdpFlow4Key>() == 12);
const _: () = assert!(size_of::<XdpFlow6Key>() == 36);

/// Value of the XDP fast path's flow cache, keyed by a packet's tuple as
/// it arrives ([`XdpFlowKey`]: a client's packet, or a remote backend's
/// reply): everything the fast path needs to send the next packets of a
/// flow it forwarded, with one lookup. Written by the XDP program after
/// its full path (conntrack, SNAT, FIB) sent a packet of the flow; never
/// by the agent.
///
/// A cache, not state: the maps are the loaded object's own (unpinned),
/// and an entry is used only until [`XdpFlow::until_ns`], the end of the
/// second its full path ran in, and at [`XdpFlow::generation`], the
/// program's `LB_XDP_GENERATION`, which the agent bumps on every route,
/// neighbour, link and address change and whenever it deletes flows. So
/// the full path runs for a flow's first packet each second (advancing
/// its conntrack entries as it would on every packet: within a second a
/// packet without SYN, FIN or RST changes none of them), and after every
/// change.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct XdpFlow<A> {
    /// The packet's addresses and ports as it leaves.
    pub tuple: XdpFlowKey<A>,
    /// One's complement sums (RFC 1624) to add to the IPv4 header
    /// checksum (the addresses; 0 for IPv6) and to the TCP or UDP
    /// checksum (pseudo-header addresses and ports) for that rewrite.
    pub l3_diff: u32,
    pub l4_diff: u32,
    /// The device the packet leaves by (host order), and the MAC addresses
    /// the FIB gave for it; 0 for a flow handed over to tc (`handed`).
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    /// The largest IP packet (bytes, host order) the way out takes: the
    /// route's MTU, as the FIB said.
    pub mtu: u16,
    /// The IP protocol of the key's packets (TCP or UDP).
    pub proto: u8,
    /// 0 for a flow the fast path sends on; for one it hands over to tc
    /// ([`XdpFound`]), what: [`XDP_FOUND_FLOW`] (the destination becomes
    /// `tuple`'s) or [`XDP_FOUND_KERNEL`].
    pub handed: u8,
    /// `LB_XDP_GENERATION` when the entry was written.
    pub generation: u32,
    /// The device the key's packets came in on (host order): from
    /// another, the FIB may answer otherwise (policy routing by `iif`).
    pub ingress: u32,
    /// `bpf_ktime_get_coarse_ns()` at the end of the second the full path
    /// last ran in for the key's packets.
    pub until_ns: u64,
}
/// The IPv4 maps' value.
pub type XdpFlow4 = XdpFlow<[u8; 4]>;
/// The IPv6 maps' value.
pub type XdpFlow6 = XdpFlow<[u8; 16]>;
const _: () = assert!(size_of::<XdpFlow4>() == 56);
const _: () = assert!(size_of::<XdpFlow6>() == 80);

/// Capacity of each of the fast path's flow caches (LRU: a flow beyond
/// it takes the full path).
pub const XDP_FLOWS_MAX: u32 = 65_536;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), padded explicitly (the size asserts equal the sum
    // of the fields), and every bit pattern is valid.
    unsafe impl aya::Pod for super::XdpFlow4Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::XdpFlow6Key {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::XdpFlow4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::XdpFlow6 {}
}
