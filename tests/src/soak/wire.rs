//! What the soak and its clients (`lbt soak-client`) say to each other:
//! [`Command`]s on the client's stdin, [`Report`]s on its stdout, one JSON
//! document per line. Times are `CLOCK_MONOTONIC` nanoseconds
//! ([`now_ns`]), one clock for every process on the machine, so the soak
//! can put a client's request next to its own changes.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Proto {
    Tcp,
    Udp,
}

/// How a client sends its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Socket {
    /// A short TCP connection per request, closed with an RST.
    Tcp,
    /// A new connected UDP socket per request, as a DNS resolver uses.
    UdpConnected,
    /// One long-lived unconnected UDP socket per worker (`sendto`).
    UdpUnconnected,
}

impl Socket {
    pub const ALL: [Socket; 3] = [Socket::Tcp, Socket::UdpConnected, Socket::UdpUnconnected];

    pub fn proto(self) -> Proto {
        match self {
            Socket::Tcp => Proto::Tcp,
            Socket::UdpConnected | Socket::UdpUnconnected => Proto::Udp,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Socket::Tcp => "TCP",
            Socket::UdpConnected => "UDP, connected socket per request",
            Socket::UdpUnconnected => "UDP, long-lived unconnected socket",
        }
    }
}

/// Where a Service is in its life, as the clients count its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    /// Created in the apiserver, not yet seen programmed.
    Creating,
    /// Programmed, with a serving endpoint: every request must succeed.
    Stable,
    /// Being deleted.
    Deleting,
}

impl Phase {
    pub fn code(self) -> u64 {
        match self {
            Phase::Creating => 0,
            Phase::Stable => 1,
            Phase::Deleting => 2,
        }
    }

    pub fn from_code(code: u64) -> Self {
        match code {
            0 => Phase::Creating,
            1 => Phase::Stable,
            _ => Phase::Deleting,
        }
    }

    /// The phase a request is counted in: the one it started in, unless
    /// the Service moved on before it ended, in which case the unsettled
    /// one (a Service only ever goes Creating, Stable, Deleting).
    pub fn of_request(at_start: Phase, moved_on: bool) -> Phase {
        match (at_start, moved_on) {
            (p, false) => p,
            (Phase::Creating, true) => Phase::Creating,
            (_, true) => Phase::Deleting,
        }
    }
}

/// A line on the client's stdin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Start sending requests to `to`, one port of Service `svc`.
    Add {
        svc: String,
        proto: Proto,
        to: SocketAddr,
        phase: Phase,
    },
    /// Every port of `svc` is in `phase` from now on. Acknowledged: a
    /// request that starts after the acknowledgement sees the new phase.
    Phase { svc: String, phase: Phase, seq: u64 },
    /// Stop sending to `svc`. Acknowledged once no new request to it can
    /// start.
    Remove { svc: String, seq: u64 },
}

/// A line on the client's stdout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Report {
    Ack {
        seq: u64,
    },
    /// What the requests that ended since the previous tally got.
    Tally(Tally),
    /// The last line, after stdin closed and every request ended.
    Done,
}

/// Requests are counted per Service, socket kind and phase.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub svc: String,
    pub socket: Socket,
    pub phase: Phase,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub answers: Vec<Answers>,
    pub failures: Vec<Failures>,
    /// Requests that succeeded after reconnecting because the agent
    /// destroyed their socket (its stale-UDP cleanup).
    pub reconnects: Vec<(Key, u64)>,
    /// Replies to earlier, timed-out requests that a long-lived socket
    /// read before the reply it waited for.
    pub late_replies: u64,
}

/// Replies from one backend. Every request started by `max_start_ns` and
/// ended at `min_end_ns` or later, which is all the soak needs to check
/// that each one came while that backend served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answers {
    pub key: Key,
    /// The identity the backend answered with.
    pub backend: String,
    pub n: u64,
    pub min_end_ns: u64,
    pub max_start_ns: u64,
}

/// Requests that failed for one cause.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    pub key: Key,
    /// An `io::ErrorKind` name (`ConnectionRefused`, `TimedOut`, ...), or
    /// `WrongPeer <address>` (a reply from an address other than the one
    /// the request went to), or `BadReply`.
    pub cause: String,
    pub n: u64,
    pub first_start_ns: u64,
    pub last_end_ns: u64,
}

impl Answers {
    /// Adds the requests of `other` (same key and backend).
    pub fn merge(&mut self, other: &Answers) {
        self.n += other.n;
        self.min_end_ns = self.min_end_ns.min(other.min_end_ns);
        self.max_start_ns = self.max_start_ns.max(other.max_start_ns);
    }
}

impl Failures {
    /// Adds the requests of `other` (same key and cause).
    pub fn merge(&mut self, other: &Failures) {
        self.n += other.n;
        self.first_start_ns = self.first_start_ns.min(other.first_start_ns);
        self.last_end_ns = self.last_end_ns.max(other.last_end_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_outlives_its_phase_counts_in_the_unsettled_one() {
        use Phase::*;
        assert_eq!(Phase::of_request(Stable, false), Stable);
        assert_eq!(Phase::of_request(Stable, true), Deleting);
        assert_eq!(Phase::of_request(Creating, true), Creating);
        assert_eq!(Phase::of_request(Deleting, false), Deleting);
        for p in [Creating, Stable, Deleting] {
            assert_eq!(Phase::from_code(p.code()), p);
        }
    }

    #[test]
    fn commands_and_reports_are_one_line_each() {
        let c = Command::Add {
            svc: "s001".into(),
            proto: Proto::Udp,
            to: "10.96.0.2:53".parse().unwrap(),
            phase: Phase::Creating,
        };
        let line = serde_json::to_string(&c).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Command>(&line).unwrap(), c);
        let r = Report::Tally(Tally {
            late_replies: 2,
            ..Tally::default()
        });
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&line).unwrap(), r);
    }

    #[test]
    fn merged_answers_keep_the_widest_bounds() {
        let key = Key {
            svc: "s".into(),
            socket: Socket::Tcp,
            phase: Phase::Stable,
        };
        let mut a = Answers {
            key: key.clone(),
            backend: "s-p1".into(),
            n: 2,
            min_end_ns: 50,
            max_start_ns: 40,
        };
        a.merge(&Answers {
            key,
            backend: "s-p1".into(),
            n: 3,
            min_end_ns: 70,
            max_start_ns: 90,
        });
        assert_eq!((a.n, a.min_end_ns, a.max_start_ns), (5, 50, 90));
    }
}
