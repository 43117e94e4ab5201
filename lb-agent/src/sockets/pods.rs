//! Finding the pods that opted out of socket load balancing: each one's
//! network namespace (its cookie, which the socket programs look up) and
//! its interface on this node's side, where the pods' tc programs go.
//!
//! A pod's namespace is the one that holds its address on an interface
//! whose peer is in the agent's namespace: a veth pair, as CNI plugins make
//! them, routed (Calico) or a bridge's port (flannel, the bridge plugin).
//! The peer is named by its index (`IFLA_LINK`) and the namespace id this
//! namespace gave the pod's (`IFLA_LINK_NETNSID`), which the candidate
//! namespace files are matched against (`RTM_GETNSID`): an address alone
//! could be any namespace's (test beds, nested containers). A pod found no
//! such way is reported, never guessed.

use std::{
    collections::{BTreeMap, HashSet},
    io,
    net::IpAddr,
    os::fd::{AsFd as _, AsRawFd as _},
    thread,
};

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{LinkAttribute, LinkLayerType, LinkMessage},
    nsid::{NsidAttribute, NsidMessage},
};
use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_ROUTE};

use super::{
    SocketsError,
    netns::{Netns, NetnsSources},
};
use crate::model::sock_lb::{OptedOut, PodRef};

/// `SO_NETNS_COOKIE` (asm-generic, as x86-64 and arm64 have it): the
/// cookie of a socket's network namespace, `bpf_get_netns_cookie`'s.
const SO_NETNS_COOKIE: libc::c_int = 71;

/// A pod found: where its packets enter the node, and its namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// Its interface in this namespace, and that interface's index.
    pub device: String,
    pub ifindex: u32,
    /// Its network namespace's cookie.
    pub netns_cookie: u64,
}

/// What a search found.
#[derive(Debug, Default)]
pub struct Found {
    pub pods: BTreeMap<PodRef, Located>,
    /// Pods not found, and why.
    pub missing: Vec<(PodRef, &'static str)>,
}

/// An interface of this namespace whose peer is in another one.
#[derive(Clone, Debug)]
struct PeerLink {
    ifindex: u32,
    name: String,
    ethernet: bool,
    /// The peer's index in its namespace, and that namespace's id here.
    peer: u32,
    nsid: i32,
}

/// What a pod's namespace holds: its cookie and its addresses, by
/// interface index.
struct PodNetns {
    cookie: u64,
    addrs: Vec<(u32, IpAddr)>,
}

/// Finds `pods` among the namespaces of `sources`.
pub fn locate(pods: &[OptedOut], sources: &NetnsSources) -> Result<Found, SocketsError> {
    let mut found = Found::default();
    if pods.is_empty() {
        return Ok(found);
    }
    let route = Route::open()?;
    let links = route.peer_links()?;
    let wanted: HashSet<i32> = links.iter().map(|l| l.nsid).collect();
    // The candidates that are pods' namespaces here, by their id here.
    let (paths, _) = sources.candidates();
    let mut seen = HashSet::new();
    let mut namespaces: Vec<(i32, Netns)> = Vec::new();
    for path in paths {
        let Ok(Some(ns)) = Netns::open(&path) else {
            continue;
        };
        if !seen.insert(ns.id) {
            continue;
        }
        match route.nsid(&ns) {
            Ok(id) if wanted.contains(&id) => namespaces.push((id, ns)),
            _ => {}
        }
    }
    let read = read_namespaces(&namespaces)?;
    for pod in pods {
        match place(pod, &links, &read) {
            Ok(at) => {
                found.pods.insert(pod.pod.clone(), at);
            }
            Err(why) => found.missing.push((pod.pod.clone(), why)),
        }
    }
    Ok(found)
}

/// Where `pod` is: the namespace holding one of its addresses on an
/// interface whose peer is one of `links`.
fn place(
    pod: &OptedOut,
    links: &[PeerLink],
    namespaces: &[(i32, PodNetns)],
) -> Result<Located, &'static str> {
    let mut held = false;
    for ip in &pod.ips {
        for (nsid, ns) in namespaces {
            for (ifindex, _) in ns.addrs.iter().filter(|(_, a)| a == ip) {
                held = true;
                let Some(link) = links.iter().find(|l| l.nsid == *nsid && l.peer == *ifindex)
                else {
                    continue;
                };
                if !link.ethernet {
                    return Err("its interface here is not an Ethernet device");
                }
                return Ok(Located {
                    device: link.name.clone(),
                    ifindex: link.ifindex,
                    netns_cookie: ns.cookie,
                });
            }
        }
    }
    Err(if held {
        "the interface holding its address has no peer in this namespace"
    } else {
        "no network namespace with an interface into this one holds its address"
    })
}

/// Each namespace's cookie and addresses, read on a thread of its own that
/// enters them one after the other (setns moves the calling thread only;
/// the thread ends with the read, so no other thread ever moves).
fn read_namespaces(namespaces: &[(i32, Netns)]) -> Result<Vec<(i32, PodNetns)>, SocketsError> {
    if namespaces.is_empty() {
        return Ok(Vec::new());
    }
    thread::scope(|scope| {
        let read = thread::Builder::new()
            .name("lb-pods".into())
            .spawn_scoped(scope, || {
                let mut out = Vec::new();
                for (nsid, ns) in namespaces {
                    // A namespace gone meanwhile has no pod.
                    if !matches!(ns.enter(), Ok(true)) {
                        continue;
                    }
                    if let Ok(pod) = read_here() {
                        out.push((*nsid, pod));
                    }
                }
                out
            })
            .map_err(SocketsError::Thread)?;
        match read.join() {
            Ok(out) => Ok(out),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// The cookie and addresses of the namespace the calling thread is in.
fn read_here() -> io::Result<PodNetns> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    let mut cookie = 0u64;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: the socket is open; the kernel writes at most `len` bytes
    // into `cookie`, which outlives the call.
    let r = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            std::ptr::from_mut(&mut cookie).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let addrs = if_addrs::get_if_addrs()?
        .into_iter()
        .filter_map(|i| Some((i.index?, i.ip())))
        .collect();
    Ok(PodNetns { cookie, addrs })
}

/// The cookie of the calling thread's network namespace (the node's, on
/// the agent's threads).
pub fn own_netns_cookie() -> io::Result<u64> {
    read_here().map(|ns| ns.cookie)
}

/// A route netlink socket of the agent's namespace.
struct Route(Socket);

/// The socket is ours alone and carries one request at a time.
const SEQ: u32 = 1;

impl Route {
    fn open() -> Result<Self, SocketsError> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(SocketsError::Netlink)?;
        socket.bind_auto().map_err(SocketsError::Netlink)?;
        socket
            .connect(&NetlinkAddr::new(0, 0))
            .map_err(SocketsError::Netlink)?;
        Ok(Self(socket))
    }

    /// Sends `message` and collects the answers until the dump ends (or,
    /// not a dump, the first answer).
    fn ask(
        &self,
        message: RouteNetlinkMessage,
        dump: bool,
    ) -> Result<Vec<RouteNetlinkMessage>, SocketsError> {
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        header.sequence_number = SEQ;
        let mut request = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
        request.finalize();
        let mut bytes = vec![0; request.buffer_len()];
        request.serialize(&mut bytes);
        self.0.send(&bytes, 0).map_err(SocketsError::Netlink)?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self
                .0
                .recv(&mut &mut buf[..], 0)
                .map_err(SocketsError::Netlink)?;
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                    .map_err(|e| SocketsError::Netlink(io::Error::other(e.to_string())))?;
                let step = (message.header.length as usize).next_multiple_of(4);
                rest = rest.get(step..).unwrap_or_default();
                match message.payload {
                    NetlinkPayload::InnerMessage(m) => {
                        out.push(m);
                        if !dump {
                            return Ok(out);
                        }
                    }
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(_) => Err(SocketsError::Netlink(e.to_io())),
                            None => Ok(out),
                        };
                    }
                    _ => {}
                }
            }
        }
    }

    /// This namespace's interfaces whose peer is in another namespace.
    fn peer_links(&self) -> Result<Vec<PeerLink>, SocketsError> {
        let answers = self.ask(RouteNetlinkMessage::GetLink(LinkMessage::default()), true)?;
        Ok(answers
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(link) => peer_link(&link),
                _ => None,
            })
            .collect())
    }

    /// The id this namespace gave `ns`; -1 for none.
    fn nsid(&self, ns: &Netns) -> Result<i32, SocketsError> {
        let mut message = NsidMessage::default();
        message
            .attributes
            .push(NsidAttribute::Fd(ns.as_raw_fd() as u32));
        let answers = self.ask(RouteNetlinkMessage::GetNsId(message), false)?;
        Ok(answers
            .iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewNsId(n) => n.attributes.iter().find_map(|a| match a {
                    NsidAttribute::Id(id) => Some(*id),
                    _ => None,
                }),
                _ => None,
            })
            .unwrap_or(-1))
    }
}

fn peer_link(link: &LinkMessage) -> Option<PeerLink> {
    let mut name = None;
    let (mut peer, mut nsid) = (None, None);
    for a in &link.attributes {
        match a {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::Link(p) => peer = Some(*p),
            LinkAttribute::LinkNetNsId(id) => nsid = Some(*id),
            _ => {}
        }
    }
    Some(PeerLink {
        ifindex: link.header.index,
        name: name?,
        ethernet: link.header.link_layer_type == LinkLayerType::Ether,
        peer: peer?,
        nsid: nsid.filter(|id| *id >= 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ips: &[&str]) -> OptedOut {
        OptedOut {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
            },
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
        }
    }

    fn link(ifindex: u32, name: &str, peer: u32, nsid: i32) -> PeerLink {
        PeerLink {
            ifindex,
            name: name.into(),
            ethernet: true,
            peer,
            nsid,
        }
    }

    #[test]
    fn a_pod_is_where_its_address_is_on_the_peer_of_one_of_our_interfaces() {
        let links = [link(7, "veth-a", 2, 0), link(9, "veth-b", 2, 1)];
        let ns = |cookie, ip: &str| PodNetns {
            cookie,
            addrs: vec![(1, "127.0.0.1".parse().unwrap()), (2, ip.parse().unwrap())],
        };
        // Another namespace holds the same address, on no peer of ours.
        let namespaces = [
            (5, ns(50, "10.0.0.2")),
            (0, ns(40, "10.0.0.1")),
            (1, ns(41, "10.0.0.2")),
        ];
        let at = place(&pod("b", &["10.0.0.2"]), &links, &namespaces).unwrap();
        assert_eq!(
            at,
            Located {
                device: "veth-b".into(),
                ifindex: 9,
                netns_cookie: 41
            }
        );
        assert_eq!(
            place(&pod("a", &["fd00::1", "10.0.0.1"]), &links, &namespaces)
                .unwrap()
                .device,
            "veth-a"
        );
        assert!(place(&pod("c", &["10.0.0.3"]), &links, &namespaces).is_err());
        // Held, but behind no interface of ours.
        assert_eq!(
            place(&pod("d", &["127.0.0.1"]), &links, &namespaces),
            Err("the interface holding its address has no peer in this namespace")
        );
    }
}
