//! Requests attempted, answered and failed; answers from the wrong pod.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
};

use crate::{
    snmp::Counters,
    soak::{
        outcome::{Results, wrong_answers},
        wire::{Phase, Socket},
    },
};

pub(super) fn render(o: &mut String, r: &Results, t: &dyn Fn(u64) -> f64) {
    let rec = &r.received;
    let _ = writeln!(o, "## Requests\n");
    let _ = writeln!(
        o,
        "| socket | attempted | answered | failed, Service serving | failed, Service being created | failed, Service being deleted | answered after reconnecting a destroyed stale UDP socket |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    let mut total = [0u64; 6];
    for socket in Socket::ALL {
        let ok: u64 = rec
            .answers
            .iter()
            .filter(|((k, _), _)| k.socket == socket)
            .map(|(_, a)| a.n)
            .sum();
        let failed = |p: Phase| -> u64 {
            rec.failures
                .iter()
                .filter(|((k, _), _)| k.socket == socket && k.phase == p)
                .map(|(_, f)| f.n)
                .sum()
        };
        let (fs, fc, fd) = (
            failed(Phase::Stable),
            failed(Phase::Creating),
            failed(Phase::Deleting),
        );
        let reconnected: u64 = rec
            .reconnects
            .iter()
            .filter(|(k, _)| k.socket == socket)
            .map(|(_, n)| n)
            .sum();
        let row = [ok + fs + fc + fd, ok, fs, fc, fd, reconnected];
        for (sum, x) in total.iter_mut().zip(row) {
            *sum += x;
        }
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            socket.name(),
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5]
        );
    }
    let _ = writeln!(
        o,
        "| all | {} | {} | {} | {} | {} | {} |\n",
        total[0], total[1], total[2], total[3], total[4], total[5]
    );
    let _ = writeln!(
        o,
        "Late replies (to an earlier, timed-out request) read by the long-lived UDP sockets: {}.\n",
        rec.late_replies
    );

    let _ = writeln!(
        o,
        "### Failed requests to Services with a serving endpoint, by cause\n"
    );
    let stable: Vec<_> = rec
        .failures
        .iter()
        .filter(|((k, _), _)| k.phase == Phase::Stable)
        .collect();
    if stable.is_empty() {
        let _ = writeln!(o, "None.\n");
    } else {
        let mut by_cause: BTreeMap<(&str, Socket), (u64, Vec<&str>)> = BTreeMap::new();
        for ((k, cause), f) in &stable {
            let e = by_cause.entry((cause.as_str(), k.socket)).or_default();
            e.0 += f.n;
            e.1.push(k.svc.as_str());
        }
        let _ = writeln!(
            o,
            "| cause | socket | requests | Services |\n|---|---|---:|---|"
        );
        for ((cause, socket), (n, svcs)) in by_cause {
            let _ = writeln!(
                o,
                "| {cause} | {} | {n} | {} |",
                socket.name(),
                svcs.join(" ")
            );
        }
        let _ = writeln!(
            o,
            "\nWhen, with what happened within 3 s before (at most 30):\n"
        );
        for f in rec
            .failure_log
            .iter()
            .filter(|f| f.key.phase == Phase::Stable)
            .take(30)
        {
            let around: Vec<String> = r
                .events
                .iter()
                .filter(|(at, _)| *at + 3_000_000_000 >= f.first_start_ns && *at <= f.last_end_ns)
                .map(|(at, what)| format!("{:.2} s {what}", t(*at)))
                .collect();
            let _ = writeln!(
                o,
                "* {:.2}-{:.2} s: {} x {} to {} ({}); {}",
                t(f.first_start_ns),
                t(f.last_end_ns),
                f.n,
                f.cause,
                f.key.svc,
                f.key.socket.name(),
                if around.is_empty() {
                    "nothing".into()
                } else {
                    around.join("; ")
                }
            );
        }
        o.push('\n');
    }

    kernel(o, r);

    let _ = writeln!(
        o,
        "### Requests to Services being created or deleted that failed (expected, not counted as failures)\n"
    );
    let mut unsettled: BTreeMap<(Phase, &str), u64> = BTreeMap::new();
    for ((k, cause), f) in &rec.failures {
        if k.phase != Phase::Stable {
            *unsettled.entry((k.phase, cause.as_str())).or_default() += f.n;
        }
    }
    if unsettled.is_empty() {
        let _ = writeln!(o, "None.\n");
    } else {
        let _ = writeln!(o, "| phase | cause | requests |\n|---|---|---:|");
        for ((phase, cause), n) in unsettled {
            let _ = writeln!(o, "| {phase:?} | {cause} | {n} |");
        }
        o.push('\n');
    }

    let wrong = wrong_answers(rec, &r.lives);
    let _ = writeln!(
        o,
        "### Answers from a backend that was not serving the Service then\n"
    );
    if wrong.is_empty() {
        let backends = rec.answers.keys().map(|(_, b)| b).collect::<BTreeSet<_>>();
        let _ = writeln!(
            o,
            "None: every answer came from a pod of its Service, between its endpoint's addition and the moment the maps stopped sending it new requests ({} pods answered).\n",
            backends.len()
        );
    } else {
        let _ = writeln!(
            o,
            "| Service | socket | phase | backend | requests | why |\n|---|---|---|---|---:|---|"
        );
        for w in wrong {
            let _ = writeln!(
                o,
                "| {} | {} | {:?} | {} | {} | {} |",
                w.key.svc,
                w.key.socket.name(),
                w.key.phase,
                w.backend,
                w.n,
                w.why
            );
        }
        o.push('\n');
    }
}

/// The kernel's drop counters in the clients' and the pods' namespaces,
/// beside the failures: a timed-out request next to a rise of
/// `Udp.RcvbufErrors` where its request or reply was to be read was
/// dropped by the kernel, outside the agent's programs.
fn kernel(o: &mut String, r: &Results) {
    let _ = writeln!(
        o,
        "### The kernel's drop counters (`/proc/net/snmp`, `/proc/net/snmp6`)\n"
    );
    for (ns, c) in &r.kernel.clients.0 {
        let _ = writeln!(
            o,
            "* client namespace {ns}, while the clients ran: {}",
            c.drops_text()
        );
    }
    let mut total = Counters::default();
    let mut dropping = Vec::new();
    for (pod, c) in &r.kernel.pods {
        total.add(c);
        if !c.drops().is_empty() {
            dropping.push(format!("{pod} ({})", c.drops_text()));
        }
    }
    let _ = writeln!(
        o,
        "* the {} pods' namespaces, over their lives: {}{}\n",
        r.kernel.pods.len(),
        total.drops_text(),
        if dropping.is_empty() {
            String::new()
        } else {
            format!("; {}", dropping.join(", "))
        }
    );
}
