//! The control plane section of the report.

use std::{fmt::Write as _, time::Duration};

use super::super::{
    plan::Plan,
    results::control::Control,
    stats::percentile,
    units::{mib, ms},
};

/// The control plane tables: cold programming, updates, memory, health.
pub(super) fn tables(o: &mut String, plan: &Plan, c: &Control) {
    let _ = writeln!(
        o,
        "### Control plane: {} Services x {} endpoints\n",
        c.services, c.endpoints
    );
    let _ = writeln!(
        o,
        "Objects: {}.\n",
        if plan.realistic {
            "as a real cluster serves them (`--realistic-objects`: managedFields, Helm labels \
             and annotations, kubectl's last-applied-configuration, owner references, endpoint \
             targetRef/nodeName/zone)"
        } else {
            "bare (only the fields the agent reads, no managedFields or annotations)"
        }
    );
    let ours = c.cold.first().map_or(Duration::ZERO, |x| x.wall);
    let _ = writeln!(
        o,
        "| cold programming | until programmed | of which compute + write | vs ours (file) |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|");
    for x in &c.cold {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {:.2} |",
            x.what,
            ms(x.wall),
            x.phases.map_or("-".into(), |p| ms(p.first_sync)),
            x.wall.as_secs_f64() / ours.as_secs_f64()
        );
    }
    o.push('\n');
    let timelines: Vec<_> = c
        .cold
        .iter()
        .filter_map(|x| Some((x.what.to_owned(), x.wall, x.phases?)))
        .collect();
    super::phases::table(o, &timelines);
    let ours_p50 = c
        .updates
        .first()
        .map_or(Duration::ZERO, |u| percentile(&u.samples, 50.0));
    let _ = writeln!(
        o,
        "| one endpoint changed, until it is in the dataplane | samples | p50 | p99 | max | p50 vs ours |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    for u in &c.updates {
        let p50 = percentile(&u.samples, 50.0);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.0} |",
            u.what,
            u.samples.len(),
            ms(p50),
            ms(percentile(&u.samples, 99.0)),
            ms(u.samples.last().copied().unwrap_or_default()),
            p50.as_secs_f64() / ours_p50.as_secs_f64()
        );
    }
    let _ = writeln!(
        o,
        "\nkube-proxy's own sync timing is not included: it waits at least \
         `minSyncPeriod` (1 s by default) between syncs.\n"
    );
    for x in &c.cold {
        if let Some(rss) = &x.rss {
            let _ = writeln!(
                o,
                "Agent memory once programmed ({}): RSS {:.1} MiB, peak {:.1} MiB (VmHWM: \
                 the initial list and first sync).\n",
                x.what,
                mib(rss.current),
                mib(rss.peak)
            );
        }
    }
    health_table(o, c);
}

fn health_table(o: &mut String, c: &Control) {
    let _ = writeln!(
        o,
        "Health endpoints during the cold start: a GET on a fresh loopback connection every \
         10 ms per path (open loop: probes do not wait for each other, but at most 50 per \
         path are pending, so that the listen backlog of 128 never overflows; the others \
         are skipped), from the moment the healthz listener is bound until 2 s after the \
         first full sync. Any status is an answer (503 until the first sync); latency is \
         connect to the end of the response; no answer within 60 s counts as none.\n"
    );
    let _ = writeln!(
        o,
        "| source | path | answers | statuses | p50 | p99 | max | no answer | skipped |"
    );
    let _ = writeln!(o, "|---|---|---:|---|---:|---:|---:|---:|---:|");
    for x in &c.cold {
        for p in &x.health {
            let statuses: Vec<String> = p
                .statuses
                .iter()
                .map(|(s, n)| format!("{s}: {n}"))
                .collect();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                x.what,
                p.path,
                p.latencies.len(),
                statuses.join(", "),
                ms(percentile(&p.latencies, 50.0)),
                ms(percentile(&p.latencies, 99.0)),
                ms(p.latencies.last().copied().unwrap_or_default()),
                p.failed,
                p.skipped
            );
        }
    }
    o.push('\n');
}
