//! How flows from outside the node reach a backend on another node
//! (Cilium's `--bpf-lb-mode` and `service.cilium.io/forwarding-mode`): SNAT
//! to the node's address, so the reply comes back through this node, or
//! direct server return (DSR), where the backend's node answers the client
//! itself with the service address.

use std::{fmt, str::FromStr};

use super::Proto;

/// `--bpf-lb-mode`: the node's default for Services that do not choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LbMode {
    /// SNAT every protocol (today's behaviour).
    #[default]
    Snat,
    /// DSR every protocol.
    Dsr,
    /// DSR for TCP, SNAT for UDP (Cilium's `hybrid`).
    Hybrid,
}

/// A Service's forwarding-mode annotation: it overrides [`LbMode`] for
/// every protocol of the Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForwardingMode {
    Snat,
    Dsr,
}

/// `--bpf-lb-dsr-dispatch`: how the LB node tells the backend's node the
/// service address. Only Cilium's `opt` (an IPv4 option, an IPv6
/// destination-options header) for now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DsrDispatch {
    #[default]
    Opt,
}

/// A forwarding setting that names no mode we know.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ForwardingError {
    #[error("load-balancer mode {0:?} is none of \"snat\", \"dsr\", \"hybrid\"")]
    Mode(String),
    #[error("forwarding mode {0:?} is neither \"snat\" nor \"dsr\"")]
    Forwarding(String),
    #[error("DSR dispatch {0:?} is not \"opt\"")]
    Dispatch(String),
}

impl LbMode {
    /// Whether new flows of `proto` to remote backends go DSR, unless the
    /// Service's annotation says otherwise.
    pub fn dsr(self, proto: Proto, service: Option<ForwardingMode>) -> bool {
        match (service, self) {
            (Some(ForwardingMode::Dsr), _) => true,
            (Some(ForwardingMode::Snat), _) | (None, LbMode::Snat) => false,
            (None, LbMode::Dsr) => true,
            (None, LbMode::Hybrid) => proto == Proto::Tcp,
        }
    }
}

impl FromStr for LbMode {
    type Err = ForwardingError;

    fn from_str(s: &str) -> Result<Self, ForwardingError> {
        match s {
            "snat" => Ok(Self::Snat),
            "dsr" => Ok(Self::Dsr),
            "hybrid" => Ok(Self::Hybrid),
            other => Err(ForwardingError::Mode(other.to_owned())),
        }
    }
}

impl fmt::Display for LbMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Snat => "snat",
            Self::Dsr => "dsr",
            Self::Hybrid => "hybrid",
        })
    }
}

impl FromStr for ForwardingMode {
    type Err = ForwardingError;

    fn from_str(s: &str) -> Result<Self, ForwardingError> {
        match s {
            "snat" => Ok(Self::Snat),
            "dsr" => Ok(Self::Dsr),
            other => Err(ForwardingError::Forwarding(other.to_owned())),
        }
    }
}

impl FromStr for DsrDispatch {
    type Err = ForwardingError;

    fn from_str(s: &str) -> Result<Self, ForwardingError> {
        match s {
            "opt" => Ok(Self::Opt),
            other => Err(ForwardingError::Dispatch(other.to_owned())),
        }
    }
}

impl fmt::Display for DsrDispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("opt")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_overrides_the_mode_for_every_protocol() {
        use ForwardingMode::{Dsr, Snat};
        let cases = [
            (LbMode::Snat, None, [false, false]),
            (LbMode::Dsr, None, [true, true]),
            (LbMode::Hybrid, None, [true, false]),
            (LbMode::Snat, Some(Dsr), [true, true]),
            (LbMode::Hybrid, Some(Dsr), [true, true]),
            (LbMode::Dsr, Some(Snat), [false, false]),
            (LbMode::Hybrid, Some(Snat), [false, false]),
        ];
        for (mode, service, [tcp, udp]) in cases {
            assert_eq!(mode.dsr(Proto::Tcp, service), tcp, "{mode} {service:?} tcp");
            assert_eq!(mode.dsr(Proto::Udp, service), udp, "{mode} {service:?} udp");
        }
    }

    #[test]
    fn flag_values_parse_and_print_alike() {
        for mode in [LbMode::Snat, LbMode::Dsr, LbMode::Hybrid] {
            assert_eq!(mode.to_string().parse::<LbMode>(), Ok(mode));
        }
        assert_eq!(
            "geneve".parse::<DsrDispatch>(),
            Err(ForwardingError::Dispatch("geneve".to_owned()))
        );
        assert_eq!(
            "hybrid".parse::<ForwardingMode>(),
            Err(ForwardingError::Forwarding("hybrid".to_owned()))
        );
    }
}
