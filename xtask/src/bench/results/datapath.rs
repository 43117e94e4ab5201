//! The datapath section's results: every round of every mode at each N.

use lb_tests::progstats::Runs;

use super::super::rounds::{Compared, Rounds};

/// The most Services kube-proxy's layouts are loaded for: `nft -f` of the
/// 10,000-Service layout already takes about a minute, and grows faster
/// than N (0.45 s at 1,000).
pub(crate) const KUBE_PROXY_MAX: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Direct,
    Ours,
    /// Ours, through the `sessionAffinity: ClientIP` Service.
    OursAffinity,
    /// Ours, through the `internalTrafficPolicy: Local` Service.
    OursLocal,
    Iptables,
    Nftables,
    /// The pods over IPv6.
    Direct6,
    /// Ours, through the IPv6 Service.
    Ours6,
}

impl Mode {
    /// The modes every load runs through.
    pub(crate) const ALL: [Mode; 4] = [Mode::Direct, Mode::Ours, Mode::Iptables, Mode::Nftables];
    /// Every mode, in round order; the semantics and IPv6 modes run TCP
    /// only.
    pub(crate) const EVERY: [Mode; 8] = [
        Mode::Direct,
        Mode::Ours,
        Mode::OursAffinity,
        Mode::OursLocal,
        Mode::Iptables,
        Mode::Nftables,
        Mode::Direct6,
        Mode::Ours6,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Ours => "ours",
            Mode::OursAffinity => "ours, ClientIP affinity",
            Mode::OursLocal => "ours, iTP Local",
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
            Mode::Direct6 => "direct, IPv6",
            Mode::Ours6 => "ours, IPv6",
        }
    }

    /// What this mode is compared with: direct over the same family.
    pub(crate) fn direct(self) -> Mode {
        match self {
            Mode::Direct6 | Mode::Ours6 => Mode::Direct6,
            _ => Mode::Direct,
        }
    }

    /// Whether this mode is measured at `n` Services: kube-proxy's layouts
    /// only up to [`KUBE_PROXY_MAX`].
    pub(crate) fn measured_at(self, n: usize) -> bool {
        !matches!(self, Mode::Iptables | Mode::Nftables) || n <= KUBE_PROXY_MAX
    }

    /// Through our programs.
    pub(crate) fn is_ours(self) -> bool {
        matches!(
            self,
            Mode::Ours | Mode::OursAffinity | Mode::OursLocal | Mode::Ours6
        )
    }

    /// The loads measured through this mode.
    pub(crate) fn loads(self) -> &'static [Load] {
        match self {
            Mode::OursAffinity | Mode::OursLocal | Mode::Direct6 | Mode::Ours6 => &[Load::Tcp],
            // What every other connection of the node pays: with our
            // programs and without.
            Mode::Direct | Mode::Ours => &Load::ALL,
            Mode::Iptables | Mode::Nftables => &Load::THROUGH_SERVICE,
        }
    }
}

impl Compared for Mode {
    type Load = Load;

    fn name(self) -> &'static str {
        Mode::name(self)
    }

    fn loads(self) -> &'static [Load] {
        Mode::loads(self)
    }
}

/// One kind of client load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    /// Connect, one request/response, close (RST): one new flow each.
    Tcp,
    /// A new connected UDP socket per request/response, as a DNS resolver
    /// uses: one new flow each.
    UdpFresh,
    /// One unconnected UDP socket per worker, `sendto` per request: after
    /// the first datagram, only per-packet costs remain.
    UdpLong,
    /// A UDP socket created, connected to an address that is no Service,
    /// and closed; nothing is sent. Direct (no program) and ours only.
    Connect,
}

impl Load {
    /// The loads through a Service.
    pub(crate) const THROUGH_SERVICE: [Load; 3] = [Load::Tcp, Load::UdpFresh, Load::UdpLong];
    pub(crate) const ALL: [Load; 4] = [Load::Tcp, Load::UdpFresh, Load::UdpLong, Load::Connect];
}

/// One mode at one N: every round's report, per load.
pub(crate) struct Row {
    pub mode: Mode,
    pub n: usize,
    pub runs: Rounds<Load>,
    /// Ours: what each of our socket programs ran during each load, over
    /// all rounds.
    pub programs: Vec<(Load, &'static str, Runs)>,
}

/// The row of `mode` at `n`.
pub(crate) fn find(rows: &[Row], mode: Mode, n: usize) -> &Row {
    rows.iter()
        .find(|r| r.mode == mode && r.n == n)
        .expect("every mode at every N")
}
