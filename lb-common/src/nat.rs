//! Source NAT of flows from outside the node to remote backends (the tc
//! programs): `LB4_NAT`, and how a flow's SNAT port is chosen.
//!
//! A flow with `CT_F_SNAT` leaving towards a backend on another node takes
//! the node's address ([`crate::DatapathConfig::snat4_be`]) and a port of
//! its range, unique per backend (the key holds the backend), so that the
//! backend's replies come back to this node and name the flow.
//!
//! The port is chosen as Linux's NAT and Cilium choose it: the client's own
//! port when it lies in the range, else a place in the range derived from
//! the client's address and port ([`nat_first_offset`]), then the ports
//! after it ([`NAT_PORT_LINEAR_TRIES`]), then a few random ones
//! ([`NAT_PORT_RANDOM_TRIES`]). A client port keeps landing on the same
//! SNAT port, so a client that comes back on a port it used before takes
//! its old mapping over; the backend, which may still hold that connection
//! in TIME_WAIT, sees the same client go on. A port held by another live
//! flow is never taken: only one whose flow expired (the expiry holds a
//! closed flow for its FIN or TIME_WAIT time, see [`crate::ct`]).

use crate::{CT_F_KERNEL, ct_expired};

/// Key of `LB4_NAT` (`A` = `[u8; 4]`) and `LB6_NAT` (`[u8; 16]`): a reply
/// from a remote backend to the node address and port its flow was SNATed
/// to. Network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NatKey<A> {
    /// The backend.
    pub saddr_be: A,
    /// The node address of [`crate::DatapathConfig::snat4_be`]
    /// ([`crate::DatapathConfig::snat6_be`]).
    pub daddr_be: A,
    pub sport_be: u16,
    /// The port the SNAT allocated.
    pub dport_be: u16,
    /// IP protocol number.
    pub proto: u8,
    pub _pad0: [u8; 3],
}
/// `LB4_NAT`'s key.
pub type Nat4Key = NatKey<[u8; 4]>;
/// `LB6_NAT`'s key.
pub type Nat6Key = NatKey<[u8; 16]>;
const _: () = assert!(size_of::<Nat4Key>() == 16);
const _: () = assert!(size_of::<Nat6Key>() == 40);

/// Value of `LB4_NAT` and `LB6_NAT`: the client the reply goes back to. Written by tc
/// egress when it allocates the port, its expiry by either direction's
/// packets (the flow's own, as its `CT_DIR_OUT` entry holds it); deleted by
/// the agent.
///
/// Layout 4's value is the same but for TCP state bits in the low byte of
/// `flags`, which this layout ignores.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatValue<A> {
    /// The client address, network byte order.
    pub addr_be: A,
    /// The client port, network byte order.
    pub port_be: u16,
    /// [`CT_F_KERNEL`]: a port the kernel's NAT gave a flow (kube-proxy's,
    /// found when the agent took over); its replies are left to the kernel
    /// and the port is not handed out while it lives.
    pub flags: u16,
    /// As [`crate::CtValue::expires`]: the flow's expiry.
    pub expires: u32,
}
/// `LB4_NAT`'s value.
pub type Nat4Value = NatValue<[u8; 4]>;
/// `LB6_NAT`'s value. Its owner fields are not one aligned word, as
/// `LB4_NAT`'s are: a port is claimed by swapping the word at
/// [`NAT6_CLAIM_WORD`] (port, flags, expiry).
pub type Nat6Value = NatValue<[u8; 16]>;
const _: () = assert!(size_of::<Nat4Value>() == 12);
const _: () = assert!(size_of::<Nat6Value>() == 24);
/// Offset of the 8-byte word of a [`Nat6Value`] that its claim swaps.
pub const NAT6_CLAIM_WORD: usize = 16;

/// [`NatValue::flags`] of a SNAT mapping whose port a CPU has just
/// claimed ([`PortClaim::Expired`]): set in the same swap of the claim
/// word that claims it, cleared once the fields outside that word are
/// written (an `LB4_NAT` mapping's expiry, an `LB6_NAT` mapping's client
/// address). Until then the port is taken for every other client: a reader
/// seeing the new owner with the old, expired time would claim the port
/// too.
pub const NAT_F_CLAIMING: u16 = 1 << 15;

/// What a flow from `client` may do with the port whose mapping is `nat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortClaim {
    /// The mapping is the same client's (it came back on the same port):
    /// it is taken over as it is.
    Same,
    /// The mapping's flow is dead: the port goes to the new flow, if it
    /// wins the mapping's expiry (two CPUs may race for it).
    Expired,
    /// Another live flow holds it.
    Taken,
}

/// See [`PortClaim`]: what the flow whose mapping would be `new` (its
/// client in the owner fields) may do with the port whose mapping is `nat`.
#[inline(always)]
pub fn nat_claim<A: PartialEq>(nat: &NatValue<A>, new: &NatValue<A>, now: u32) -> PortClaim {
    let kernel = nat.flags & CT_F_KERNEL != 0;
    let claiming = nat.flags & NAT_F_CLAIMING != 0;
    if ct_expired(nat.expires, now) && !claiming {
        PortClaim::Expired
    } else if !kernel && nat.addr_be == new.addr_be && nat.port_be == new.port_be {
        PortClaim::Same
    } else {
        PortClaim::Taken
    }
}

/// Ports tried one after the other from the first one.
pub const NAT_PORT_LINEAR_TRIES: u32 = 32;
/// Random ports tried after those, before the packet is dropped and
/// counted (`tc_drop_snat_exhausted`).
pub const NAT_PORT_RANDOM_TRIES: u32 = 8;

/// The offset in the range `min..=max` (`span` ports) of the first port a
/// flow from `client` tries: the client's own port when it lies in the
/// range; else the client's port moved by a hash of its address and the
/// agent's `seed`, so that one client's ports land on consecutive ports and
/// different clients' apart. `addr`: the client's address as packets hold
/// it, an IPv6 one folded into one word (the XOR of its four, as
/// `lb_ebpf::packet::Ip::fold` does); `port_be`: its port.
#[inline(always)]
pub const fn nat_first_offset(min: u16, span: u32, addr: u32, port_be: u16, seed: u32) -> u32 {
    let port = u16::from_be(port_be);
    let max = min as u32 + span - 1;
    if port >= min && port as u32 <= max {
        return (port - min) as u32;
    }
    let mut h = addr ^ seed;
    h = (h ^ (h >> 16)).wrapping_mul(0x7feb_352d);
    h = (h ^ (h >> 15)).wrapping_mul(0x846c_a68b);
    h ^= h >> 16;
    (port as u32).wrapping_add(h) % span
}

/// Default SNAT port range: below the NodePort range (30000-32767) and
/// Linux's default ephemeral ports (`net.ipv4.ip_local_port_range`,
/// 32768-60999), whose ports the node's own connections take: a SNAT port
/// among them could be the very tuple a local socket uses.
pub const DEFAULT_NAT_PORT_MIN: u16 = 1024;
/// See [`DEFAULT_NAT_PORT_MIN`].
pub const DEFAULT_NAT_PORT_MAX: u16 = 29_999;

/// Default capacity of `LB4_NAT` and of `LB6_NAT`.
pub const DEFAULT_NAT_MAX: u32 = 131_072;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is repr(C), padded explicitly (the size asserts
    // equal the sum of the fields), and every bit pattern is valid.
    // (`Address` is sealed to the two addresses of the asserts).
    unsafe impl<A: crate::Address> aya::Pod for super::NatKey<A> {}
    // SAFETY: as above.
    unsafe impl<A: crate::Address> aya::Pod for super::NatValue<A> {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: ([u8; 4], u16) = ([198, 51, 100, 7], 40000u16.to_be());

    /// The mapping a new flow from `client` would write.
    fn of(client: ([u8; 4], u16)) -> Nat4Value {
        Nat4Value {
            addr_be: client.0,
            port_be: client.1,
            flags: 0,
            expires: 500,
        }
    }

    #[test]
    fn the_clients_own_port_comes_first_when_it_is_in_the_range() {
        let c = ([198, 51, 100, 7], 2000u16.to_be());
        assert_eq!(
            nat_first_offset(1024, 28976, u32::from_ne_bytes(c.0), c.1, 7),
            2000 - 1024
        );
    }

    #[test]
    fn consecutive_client_ports_land_on_consecutive_ports() {
        let span = 28976;
        let client = u32::from_ne_bytes(CLIENT.0);
        let at = |port: u16| nat_first_offset(1024, span, client, port.to_be(), 99);
        assert_eq!((at(40001) + span - at(40000)) % span, 1);
        assert_eq!((at(40100) + span - at(40000)) % span, 100);
        // Another client, or another seed, lands elsewhere.
        let other = u32::from_ne_bytes([198, 51, 100, 8]);
        let other = nat_first_offset(1024, span, other, 40000u16.to_be(), 99);
        assert_ne!(other, at(40000));
        assert_ne!(
            nat_first_offset(1024, span, client, CLIENT.1, 98),
            at(40000)
        );
        // IPv6 clients fold every word of their address in.
        let v6 = |last: u8| {
            let mut a = [0u8; 16];
            a[0] = 0xfd;
            a[15] = last;
            let fold = a
                .chunks_exact(4)
                .fold(0, |h, w| h ^ u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
            nat_first_offset(1024, span, fold, 40000u16.to_be(), 99)
        };
        assert_ne!(v6(1), v6(2));
        assert!(v6(1) < span);
        assert!(at(65535) < span);
    }

    #[test]
    fn a_port_is_claimed_only_back_by_its_client_or_once_its_flow_expired() {
        let nat = Nat4Value {
            addr_be: CLIENT.0,
            port_be: CLIENT.1,
            flags: 0,
            expires: 100,
        };
        assert_eq!(nat_claim(&nat, &of(CLIENT), 50), PortClaim::Same);
        let other = (CLIENT.0, 40001u16.to_be());
        assert_eq!(nat_claim(&nat, &of(other), 50), PortClaim::Taken);
        assert_eq!(nat_claim(&nat, &of(other), 100), PortClaim::Taken);
        assert_eq!(nat_claim(&nat, &of(other), 101), PortClaim::Expired);
        // A port the kernel's NAT holds is nobody's to take over.
        let kernel = Nat4Value {
            flags: CT_F_KERNEL,
            ..nat
        };
        assert_eq!(nat_claim(&kernel, &of(CLIENT), 50), PortClaim::Taken);
        // A port being claimed is the claimer's, whatever its old expiry
        // says: another client must not claim it too.
        let claiming = Nat4Value {
            flags: NAT_F_CLAIMING,
            ..nat
        };
        assert_eq!(nat_claim(&claiming, &of(other), 101), PortClaim::Taken);
        assert_eq!(nat_claim(&claiming, &of(CLIENT), 101), PortClaim::Same);
    }
}
