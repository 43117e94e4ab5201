//! Control-plane figures: cold programming of N x E, the time until one
//! changed endpoint is in the dataplane, and the agent's memory.

use std::{net::IpAddr, time::Instant};

use anyhow::Context as _;
use lb_tests::{
    agent::Agent,
    apiserver::ApiServer,
    kubeproxy::{self, SvcSpec},
    netns::{self, Topology},
    scenario::{Bed, apply_yaml},
    unique,
};

use super::{
    cluster::CLUSTER_CIDR,
    manifests::manifests,
    ours::{change, lone_changes, ours_cold},
    plan::Plan,
    realistic,
    results::control::{Cold, Control, Update},
};

pub(super) fn measure(plan: &Plan) -> anyhow::Result<Control> {
    let (n, e) = plan.cold;
    let specs = kubeproxy::filler_services(n, e);
    let yaml = if plan.realistic {
        realistic::manifests(&specs)
    } else {
        manifests(&[&specs])
    };
    let mut cold = Vec::new();
    let mut updates = Vec::new();

    // Ours, from a file.
    {
        let mut bed = Bed::new()?;
        bed.write_manifest(&yaml)?;
        let start = Instant::now();
        let agent = bed.spawn_agent(&[])?;
        cold.push(ours_cold("ours, --from-file", start, agent, n)?);
        cold.push(restart(
            &mut bed,
            "ours, --from-file, restarted",
            n,
            |bed| bed.spawn_agent(&[]),
        )?);
    }

    // Ours, from the stand-in apiserver; then lone endpoint changes.
    {
        let mut bed = Bed::new()?;
        let api = ApiServer::start()?;
        apply_yaml(&api, &yaml)?;
        drop(yaml);
        let start = Instant::now();
        let agent = bed.spawn_agent_kube(&api, &[])?;
        cold.push(ours_cold("ours, apiserver watch", start, agent, n)?);
        let samples = lone_changes(&mut bed, &api, &specs, plan.updates)?;
        updates.push(Update {
            what: "ours (watch event -> map write)",
            samples,
        });
        cold.push(restart(
            &mut bed,
            "ours, apiserver watch, restarted",
            n,
            |bed| bed.spawn_agent_kube(&api, &[]),
        )?);
    }

    if !plan.ours_only {
        kube_proxy(plan, &specs, &mut cold, &mut updates)?;
    }

    for u in &mut updates {
        u.samples.sort_unstable();
    }
    Ok(Control {
        services: n,
        endpoints: e,
        cold,
        updates,
    })
}

/// kube-proxy's layouts: the first full sync, then the partial syncs that
/// one-endpoint changes cause, in a namespace of their own.
fn kube_proxy(
    plan: &Plan,
    specs: &[SvcSpec],
    cold: &mut Vec<Cold>,
    updates: &mut Vec<Update>,
) -> anyhow::Result<()> {
    let topo = Topology::new(&unique("kp"))?;
    let ns = topo.hub();
    let start = Instant::now();
    kubeproxy::load_iptables(ns, &kubeproxy::iptables_restore(specs, CLUSTER_CIDR))?;
    cold.push(Cold {
        what: "iptables-restore (kube-proxy full sync)",
        wall: start.elapsed(),
        phases: None,
        rss: None,
        health: Vec::new(),
    });
    eprintln!("   iptables-restore: {:?}", start.elapsed());
    let mut changed = specs.to_vec();
    let mut samples = Vec::new();
    for u in 0..plan.partial_syncs {
        let i = move_endpoint(&mut changed, u).0;
        let rules = kubeproxy::iptables_partial_restore(&changed, &[i], CLUSTER_CIDR);
        let start = Instant::now();
        kubeproxy::load_iptables_partial(ns, &rules)?;
        samples.push(start.elapsed());
    }
    updates.push(Update {
        what: "iptables: partial sync (iptables-restore --noflush)",
        samples,
    });
    netns::exec(ns, &["nft", "flush", "ruleset"])?;

    let start = Instant::now();
    kubeproxy::load_nft(ns, &kubeproxy::nft_ruleset(specs, CLUSTER_CIDR))?;
    cold.push(Cold {
        what: "nft -f (kube-proxy full sync)",
        wall: start.elapsed(),
        phases: None,
        rss: None,
        health: Vec::new(),
    });
    eprintln!("   nft -f: {:?}", start.elapsed());
    let mut changed = specs.to_vec();
    let mut samples = Vec::new();
    let mut stale: Vec<String> = Vec::new();
    for u in 0..plan.partial_syncs {
        let (i, old) = move_endpoint(&mut changed, u);
        let old_chain = kubeproxy::nft_endpoint_chain(&changed[i], old.0, old.1);
        let tx = kubeproxy::nft_partial_sync(
            &changed,
            &[i],
            std::slice::from_ref(&old_chain),
            CLUSTER_CIDR,
        );
        let delete = (!stale.is_empty()).then(|| kubeproxy::nft_delete_chains(&stale));
        // What v1.31's syncProxyRules runs, in order: delete the chains the
        // previous sync left stale (its own transaction), list chains and
        // sets, then the sync's transaction.
        let start = Instant::now();
        if let Some(delete) = &delete {
            kubeproxy::load_nft(ns, delete)?;
        }
        kubeproxy::nft_list(ns, "chains")?;
        kubeproxy::nft_list(ns, "sets")?;
        kubeproxy::load_nft(ns, &tx)?;
        samples.push(start.elapsed());
        stale = vec![old_chain];
    }
    updates.push(Update {
        what: "nftables: partial sync (nft -f, with its lists and stale-chain delete)",
        samples,
    });
    netns::exec(ns, &["nft", "flush", "ruleset"])?;
    Ok(())
}

/// Applies the `u`-th change to `specs`; returns the Service's index and
/// the endpoint it replaced.
fn move_endpoint(specs: &mut [SvcSpec], u: usize) -> (usize, (IpAddr, u16)) {
    let (i, ip) = change(specs.len(), u);
    let old = specs[i].endpoints[0];
    specs[i].endpoints[0].0 = ip.into();
    (i, old)
}

/// Stops the bed's agent (SIGTERM: its programs, links and maps stay) and
/// starts the same build again with `spawn`, as a DaemonSet's pod restart
/// does: [`ours_cold`] of the second start.
fn restart(
    bed: &mut Bed,
    what: &'static str,
    services: usize,
    spawn: impl FnOnce(&mut Bed) -> anyhow::Result<&mut Agent>,
) -> anyhow::Result<Cold> {
    let mut first = bed.agent.take().context("no agent to restart")?;
    anyhow::ensure!(first.terminate()?, "{what}: the first agent failed to stop");
    let start = Instant::now();
    let agent = spawn(bed)?;
    ours_cold(what, start, agent, services)
}
