//! The kernel's drop counters that the soak and the benchmark print next
//! to their failures (`lb_tests::snmp`) count what they claim to: a UDP
//! socket whose receive buffer overflows, in a namespace of the test's
//! own, raises `Udp.RcvbufErrors` there by exactly the datagrams it never
//! got, and nowhere else. Needs root; fails loudly without it.

use std::{io, net::UdpSocket};

use lb_tests::{
    netns::{Namespaces, within},
    require_root,
    snmp::{Counters, Snapshot},
    unique,
};
use socket2::SockRef;

#[test]
fn an_overflowed_receive_buffer_is_counted_in_its_namespace_only() -> anyhow::Result<()> {
    require_root();
    let mut nss = Namespaces::new(&unique("snmp"));
    let (full, quiet) = (nss.add("full")?, nss.add("quiet")?);
    let before = Snapshot::read(&[&full, &quiet])?;

    const SENT: u64 = 2_000;
    let read = within(&full, || {
        let rx = UdpSocket::bind("127.0.0.1:0")?;
        // The kernel doubles it and enforces a floor (SOCK_MIN_RCVBUF):
        // a few dozen small datagrams fit, not 2,000.
        SockRef::from(&rx).set_recv_buffer_size(1)?;
        let tx = UdpSocket::bind("127.0.0.1:0")?;
        for _ in 0..SENT {
            tx.send_to(b"0123456789abcdef", rx.local_addr()?)?;
        }
        // Loopback delivers within send(): whatever was not queued by
        // now was dropped.
        rx.set_nonblocking(true)?;
        let mut buf = [0u8; 64];
        let mut read = 0u64;
        loop {
            match rx.recv(&mut buf) {
                Ok(_) => read += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(read),
                Err(e) => return Err(e.into()),
            }
        }
    })?;

    let rose = Snapshot::read(&[&full, &quiet])?.since(&before);
    let (in_full, in_quiet) = (&rose.0[&full], &rose.0[&quiet]);
    eprintln!(
        "sent {SENT}, read {read}; {full}: {}; {quiet}: {}",
        in_full.drops_text(),
        in_quiet.drops_text()
    );
    assert!(read > 0 && read < SENT, "read {read} of {SENT}");
    // Every datagram was either read or counted as dropped for the buffer.
    assert_eq!(in_full.get("Udp.RcvbufErrors"), SENT - read);
    assert_eq!(in_full.get("Udp.InErrors"), SENT - read);
    assert_eq!(in_full.get("Udp.InDatagrams"), read);
    assert_eq!(
        in_full.drops(),
        [
            ("Udp.InErrors", SENT - read),
            ("Udp.RcvbufErrors", SENT - read)
        ]
    );
    assert_eq!(rose.total().get("Udp.RcvbufErrors"), SENT - read);
    assert_eq!(in_quiet.drops(), [], "{in_quiet:?}");
    // What a namespace's counters are, read from a thread in it.
    assert!(within(&full, Counters::here)?.get("Udp.OutDatagrams") >= SENT);
    Ok(())
}
