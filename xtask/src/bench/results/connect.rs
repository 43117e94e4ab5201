//! What the connect loop measured.

use lb_tests::kubeproxy::Proto;

/// The call a loop makes, and the program it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// socket + connect + close of a UDP socket (a DNS lookup's).
    UdpConnect,
    /// socket + non-blocking connect + close of a TCP socket.
    TcpConnect,
    /// sendto() of one byte from one unconnected UDP socket.
    UdpSendto,
}

impl Call {
    pub(crate) const ALL: [Call; 3] = [Call::UdpConnect, Call::TcpConnect, Call::UdpSendto];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Call::UdpConnect => "UDP socket+connect+close",
            Call::TcpConnect => "TCP socket+connect+close",
            Call::UdpSendto => "UDP sendto, one socket",
        }
    }

    pub(crate) fn proto(self) -> Proto {
        match self {
            Call::UdpConnect | Call::UdpSendto => Proto::Udp,
            Call::TcpConnect => Proto::Tcp,
        }
    }

    /// The program it runs, by its link's pin name.
    pub(crate) fn program(self) -> &'static str {
        match self {
            Call::UdpConnect | Call::TcpConnect => "connect4",
            Call::UdpSendto => "sendmsg4",
        }
    }
}

/// Where a loop's connects go, and through what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Service addresses, through our programs.
    Services,
    /// The same addresses with no program attached: the kernel's floor.
    NoPrograms,
    /// Addresses that are no Service (the endpoints'), through our programs.
    NotServices,
}

impl Target {
    pub(crate) const ALL: [Target; 3] = [Target::Services, Target::NoPrograms, Target::NotServices];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Target::Services => "Service addresses, ours",
            Target::NoPrograms => "same addresses, no programs",
            Target::NotServices => "non-Service addresses, ours",
        }
    }
}

/// One loop (its call back to back on one thread), each round's figures.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// Services programmed.
    pub n: usize,
    pub call: Call,
    pub target: Target,
    /// Addresses cycled through.
    pub addrs: usize,
    /// Wall time per iteration, ns, per round.
    pub ns_per_loop: Vec<f64>,
    /// The call's program's mean run time per call, ns, per round (ours
    /// only): the kernel's `run_time_ns / run_cnt`.
    pub ns_per_call: Vec<f64>,
    /// Iterations that failed, over all rounds.
    pub failed: u64,
}
