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
