//! Test harness: network namespaces, a test cgroup, the real `lb-agent`
//! binary, and `lbt` (identity backends and clients) run inside the netns.
//!
//! * The harness: [`netns`] (the topology builder: namespaces, veths,
//!   routes, cleanup; the star [`netns::Topology`]), [`rig`] (one agent and
//!   its pins, cgroup and manifest: start, wait, metrics, dump, kill),
//!   [`agent`] (the `lb-agent` process and its pin directory), [`cgroup`],
//!   [`probe`] (`lbt` servers and clients), and the beds built from them:
//!   [`scenario`] (one node) and [`two_nodes`] (traffic from outside).
//! * Tools of their own: [`apiserver`] (the stand-in apiserver),
//!   [`kubeproxy`] (kube-proxy's rule generators), [`pktgen`] (a packet
//!   generator and counter on XDP), [`soak`], [`manifests`] (renders and
//!   validates `manifests/`), and `lbt` (`src/bin/lbt`).
//!
//! Network safety: every address used lives on veths inside namespaces the
//! harness created; the root namespace gets no interface, route or packet.
//! Everything is torn down by `Drop`, also when a test panics.

pub mod agent;
pub mod apiserver;
pub mod cgroup;
pub mod container;
pub mod golden;
pub mod http;
pub mod install;
pub mod kubeproxy;
pub mod layouts;
pub mod manifests;
pub mod maps;
pub mod metrics;
pub mod netns;
mod orphans;
pub mod percentile;
pub mod pktgen;
pub mod probe;
pub mod procnet;
pub mod progstats;
pub mod promql;
pub mod rig;
pub mod scenario;
pub mod snmp;
pub mod soak;
pub mod two_nodes;

use std::path::PathBuf;

/// Fails loudly (never skips) when the harness lacks root.
pub use lb_test_netns::require_root;

/// A unique prefix for names this process creates (netns, cgroups, pins,
/// temp directories): [`lb_test_netns::unique`]. The first call also
/// removes what dead test processes left behind under such names.
pub fn unique(tag: &str) -> String {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(orphans::sweep);
    lb_test_netns::unique(tag)
}

/// Path of a binary built next to the running test or tool
/// (`target/<profile>/<name>`), or from `env` if set.
pub fn sibling_binary(name: &str, env: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found; build it first (`cargo xtask test` does) or set {env}",
        path.display()
    );
    path
}
