//! `--scale`'s results: the agent alone at each N, from a file and from
//! the stand-in apiserver.

use std::time::Duration;

use super::control::{Phases, Rss};

/// Endpoints per Service.
pub(crate) const ENDPOINTS: usize = 10;
/// One-endpoint changes per N, through the apiserver.
pub(crate) const UPDATES: usize = 200;

/// One source at one N.
pub(crate) struct Row {
    pub n: usize,
    pub source: &'static str,
    /// Agent start until the first full sync is done.
    pub cold: Duration,
    /// Where the time went.
    pub phases: Option<Phases>,
    pub rss: Rss,
    /// Watch event to map write, sorted; apiserver only.
    pub changes: Vec<Duration>,
}

pub(crate) const FILE: &str = "file";
pub(crate) const API: &str = "apiserver";
