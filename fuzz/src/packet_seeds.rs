//! `packet_programs`' seed corpus: the frames the tc and XDP tests craft,
//! made by the same builders (the bed's, `packets6`'), around the world's
//! frontends and flows, each as a raw step at the hooks it meets there:
//! a client's packets at ingress and XDP, an endpoint's replies at egress
//! and ingress, and short sequences of a flow's life.

use etherparse::{Icmpv6Type, icmpv4::DestUnreachableHeader};
use lb_testbed::{
    bed::{self, Tcp},
    packets6::{self, tcp6, udp6, udp6_behind, udp6_fragments},
};

use crate::packet_frame::{Hook, Host, Port, dsr_udp, encode_raw};

/// Named seed inputs.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let node = Host::Node.v4();
    let node6 = Host::Node.v6();
    let client = (Host::Client.v4(), 40000);
    let client6 = (Host::Client.v6(), 40000);
    let local = (Host::LocalPod.v4(), 8080);
    let remote = (Host::RemotePod.v4(), 8080);
    let remote6 = (Host::RemotePod.v6(), 8080);
    let local6 = (Host::LocalPod.v6(), 8080);
    let snat = (node, 61_000);
    let snat6 = (node6, 61_000);
    let mut frames: Vec<(&str, Vec<u8>)> = Vec::new();
    for (name, port) in [("nodeport", 30080), ("dsr", 30090), ("maglev", 30070)] {
        let fe = (node, port);
        frames.push((name, bed::tcp(client, fe, Tcp::Syn)));
        frames.push((name, bed::tcp(client, fe, Tcp::Ack)));
        frames.push((name, bed::tcp(client, fe, Tcp::Fin)));
        frames.push((name, bed::tcp(client, fe, Tcp::Rst)));
        frames.push((name, bed::udp(client, fe)));
        frames.push((name, bed::udp_no_checksum(client, fe)));
        frames.extend(
            bed::udp_fragments(client, fe, 7, 3000, 1500)
                .into_iter()
                .map(|f| (name, f)),
        );
    }
    frames.push(("external_ip", bed::udp(client, (Host::ExternalIp.v4(), 80))));
    // Replies: from a local endpoint leaving, from a remote one to SNAT.
    frames.push(("reply", bed::tcp(local, client, Tcp::SynAck)));
    frames.push(("reply", bed::tcp(remote, snat, Tcp::SynAck)));
    frames.push(("reply", bed::udp(remote, snat)));
    let about = bed::tcp(client, remote, Tcp::Syn);
    frames.push((
        "icmp",
        bed::icmp_error([192, 0, 2, 1], node, bed::FRAG_NEEDED, &about),
    ));
    frames.push((
        "icmp",
        bed::icmp_error(
            remote.0,
            node,
            DestUnreachableHeader::Port,
            &bed::tcp(snat, remote, Tcp::Syn),
        ),
    ));
    // The node's own traffic, and the spoof of issue 41.
    frames.push(("own", bed::udp((node, 6000), (client.0, 5000))));
    frames.push((
        "spoof",
        dsr_udp(
            false,
            Host::Client,
            Host::Node,
            Port::Any(6000),
            Host::Any([198, 51, 100, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Port::Any(7777),
        ),
    ));
    frames.push((
        "dsr_endpoint",
        dsr_udp(
            false,
            Host::OtherClient,
            Host::LocalPod,
            Port::Pod,
            Host::OtherNode,
            Port::DsrNodePort,
        ),
    ));
    // IPv6.
    for (name, port) in [("nodeport6", 30080), ("dsr6", 30090)] {
        let fe = (node6, port);
        frames.push((name, tcp6(client6, fe, Tcp::Syn)));
        frames.push((name, tcp6(client6, fe, Tcp::Ack)));
        frames.push((name, udp6(client6, fe)));
        frames.push((
            name,
            udp6_behind(
                client6,
                fe,
                &[packets6::HOP_BY_HOP, packets6::ROUTING, packets6::DEST_OPTS],
            ),
        ));
        frames.extend(
            udp6_fragments(client6, fe, 9, 3000, 1500)
                .into_iter()
                .map(|f| (name, f)),
        );
    }
    frames.push(("reply6", tcp6(local6, client6, Tcp::SynAck)));
    frames.push(("reply6", udp6(remote6, snat6)));
    frames.push((
        "icmp6",
        packets6::icmp6_error(
            remote6.0,
            node6,
            Icmpv6Type::PacketTooBig { mtu: 1280 },
            &udp6(snat6, remote6),
        ),
    ));
    frames.push((
        "dsr_endpoint6",
        dsr_udp(
            true,
            Host::OtherClient,
            Host::LocalPod,
            Port::Pod,
            Host::OtherNode,
            Port::DsrNodePort,
        ),
    ));

    let mut out = Vec::new();
    let hooks = [
        (Hook::Ingress, 0),
        (Hook::Xdp, 0),
        (Hook::Egress, 0),
        (Hook::Egress, 1),
        (Hook::L3In, 0),
    ];
    for (i, (name, frame)) in frames.iter().enumerate() {
        for (hook, device) in hooks {
            let mut input = Vec::new();
            encode_raw(&mut input, hook, device, frame);
            out.push((
                format!("{name}-{i:02}-{hook:?}-{device}").to_lowercase(),
                input,
            ));
        }
    }
    // A flow's life: SYN in, its answer out, then the spoof between.
    let fe = (node, 30080);
    let mut life = Vec::new();
    encode_raw(&mut life, Hook::Ingress, 0, &bed::tcp(client, fe, Tcp::Syn));
    encode_raw(
        &mut life,
        Hook::Egress,
        1,
        &bed::tcp(local, client, Tcp::SynAck),
    );
    encode_raw(&mut life, Hook::Ingress, 0, &bed::tcp(client, fe, Tcp::Ack));
    encode_raw(&mut life, Hook::Ingress, 0, &bed::tcp(client, fe, Tcp::Fin));
    out.push(("life-tcp".into(), life));
    out
}
