//! The nodes of the NodePort bed, one per mode: what each runs. Both the
//! NodePort and the packets-per-second results are per node, so this sits
//! below both.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Direct,
    Ours,
    Iptables,
    Nftables,
    /// Our agent with `--bpf-lb-acceleration=native`: the XDP fast path on
    /// both devices, tc behind it.
    OursXdp,
}

impl Mode {
    pub(crate) const ALL: [Mode; 5] = [
        Mode::Direct,
        Mode::Ours,
        Mode::Iptables,
        Mode::Nftables,
        Mode::OursXdp,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Ours => "ours (tc)",
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
            Mode::OursXdp => "ours (XDP)",
        }
    }

    /// The extra flags of our agent in this mode's node; `None`: no agent
    /// of ours runs there.
    pub(crate) fn agent_flags(self) -> Option<&'static [&'static str]> {
        match self {
            Mode::Ours => Some(&[]),
            Mode::OursXdp => Some(&["--bpf-lb-acceleration=native"]),
            Mode::Direct | Mode::Iptables | Mode::Nftables => None,
        }
    }
}
