//! The bench report: a markdown table (stdout and target/bench/), the
//! targets met or missed, and an SVG chart of connection rate against N.

use std::{fmt::Write as _, time::Duration};

use plotters::prelude::*;

use super::{
    Plan,
    control::Control,
    datapath::{Load, Mode, Row},
    percentile,
    target::{Measured, Target},
};

/// What the machine was doing when the run started.
pub struct Conditions {
    pub load_before: String,
}

impl Conditions {
    pub fn now() -> Self {
        Self {
            load_before: loadavg(),
        }
    }
}

/// The NodePort section's markdown and its targets.
pub type Section = (String, Vec<Target>);

pub fn write(
    plan: &Plan,
    rows: &[Row],
    nodeport: Option<&Section>,
    control: &Control,
    took: Duration,
    cond: &Conditions,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let mut name = String::from(if plan.quick { "bench-quick" } else { "bench" });
    if plan.control_only {
        name += "-control";
    }
    let md_path = plan.out_dir.join(format!("{name}.md"));
    let chart = (!plan.control_only).then(|| plan.out_dir.join(format!("{name}.svg")));
    let chart_name = chart.as_ref().map(|c| c.display().to_string());
    let md = render(
        plan,
        rows,
        nodeport,
        control,
        took,
        cond,
        chart_name.as_deref(),
    );
    print!("{md}");
    std::fs::write(&md_path, &md)?;
    match &chart {
        Some(chart) => {
            draw(plan, rows, chart)?;
            eprintln!("wrote {} and {}", md_path.display(), chart.display());
        }
        None => eprintln!("wrote {}", md_path.display()),
    }
    Ok(())
}

/// `/proc/loadavg`'s three load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

fn find(rows: &[Row], mode: Mode, n: usize) -> &Row {
    rows.iter()
        .find(|r| r.mode == mode && r.n == n)
        .expect("every mode at every N")
}

/// `--nodeport-only`: the NodePort section alone, in bench-nodeport.md.
pub fn write_nodeport(
    plan: &Plan,
    section: &str,
    targets: &[Target],
    took: Duration,
    cond: &Conditions,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let mut o = String::new();
    let _ = writeln!(o, "# lb-agent NodePort benchmark\n\n{}\n", machine());
    let _ = writeln!(
        o,
        "Load average (1, 5, 15 min) at the start: {}, at the end: {}.\n",
        cond.load_before,
        loadavg()
    );
    o.push_str(section);
    write_targets(&mut o, targets);
    let _ = writeln!(o, "\nRun took {:.0} s.", took.as_secs_f64());
    print!("{o}");
    let path = plan.out_dir.join("bench-nodeport.md");
    std::fs::write(&path, &o)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn write_targets(o: &mut String, targets: &[Target]) {
    let _ = writeln!(o, "### Targets (measured, not asserted)\n");
    for t in targets {
        let _ = writeln!(
            o,
            "- [{}] {}: {}",
            if t.met { "met" } else { "MISSED" },
            t.goal,
            measured(&t.measured)
        );
    }
}

/// A measured figure as the targets list shows it.
fn measured(m: &Measured) -> String {
    match m {
        Measured::Times(x) => format!("{x:.2}x"),
        Measured::Percent(f) => format!("{:.1}%", f * 100.0),
        Measured::Time(d) => ms(*d),
        Measured::Nanos(ns) => format!("{ns:.0} ns"),
        Measured::Text(s) => s.clone(),
        Measured::Missing => "not measured".into(),
    }
}

fn render(
    plan: &Plan,
    rows: &[Row],
    nodeport: Option<&Section>,
    c: &Control,
    took: Duration,
    cond: &Conditions,
    chart: Option<&str>,
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# lb-agent benchmark{}{}\n",
        if plan.quick {
            " (--quick smoke run)"
        } else {
            ""
        },
        if plan.control_only {
            " (--control-only)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "{}\n", machine());
    let _ = writeln!(
        o,
        "Agent: `{}`. Load average (1, 5, 15 min) at the start: {}, at the end: {}; \
         other work on the machine competes for the same cores.\n",
        plan.agent_bin.display(),
        cond.load_before,
        loadavg()
    );
    if !plan.control_only {
        datapath_tables(&mut o, plan, rows);
    }
    if let Some((section, _)) = nodeport {
        o.push_str(section);
    }
    control_tables(&mut o, plan, c);
    let mut all = targets(plan, rows, c);
    all.extend(nodeport.into_iter().flat_map(|(_, t)| t.iter().cloned()));
    write_targets(&mut o, &all);
    if let Some(chart) = chart {
        let _ = writeln!(o, "\nChart: {chart}.");
    }
    let _ = writeln!(o, "\nRun took {:.0} s.", took.as_secs_f64());
    o
}

fn datapath_tables(o: &mut String, plan: &Plan, rows: &[Row]) {
    let _ = writeln!(
        o,
        "Datapath: {} endpoints per Service (identity servers, each in its own netns), {} \
         concurrent clients, {} s per measurement, {} rounds per mode in ABBA order; each figure \
         is the median over rounds, and \"spread\" is the slowest and fastest round. The \
         measured Service is the last in rule order. iptables/nftables: kube-proxy v1.31's \
         layouts, loaded in the client's netns; conntrack is flushed before each measurement. \
         Ratios: to direct / to ours. \"ours, ClientIP affinity\" and \"ours, iTP Local\" \
         reach the same pods through a Service with `sessionAffinity: ClientIP` (all of one \
         client's connections go to one pod) and one with `internalTrafficPolicy: Local` \
         (every endpoint on this node): two Services more in our maps.\n",
        plan.endpoints, plan.concurrency, plan.seconds, plan.rounds
    );
    for (load, title, unit) in [
        (
            Load::Tcp,
            "TCP short connections (connect, one request/response, close)",
            "conn/s",
        ),
        (
            Load::UdpFresh,
            "UDP request/response, a new socket per request (as a DNS resolver)",
            "req/s",
        ),
        (
            Load::UdpLong,
            "UDP request/response, one long-lived socket per client",
            "req/s",
        ),
    ] {
        let lat = if load == Load::Tcp {
            "connect"
        } else {
            "round trip"
        };
        let _ = writeln!(o, "### {title}\n");
        let _ = writeln!(
            o,
            "| N | mode | {unit} | vs direct | vs ours | spread | {lat} p50 µs | {lat} p99 µs |"
        );
        let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|---:|");
        for &n in &plan.scales {
            let us = find(rows, Mode::Ours, n);
            for mode in Mode::EVERY
                .into_iter()
                .filter(|m| m.loads().contains(&load))
            {
                let r = find(rows, mode, n);
                let d = find(rows, mode.direct(), n);
                let (lo, hi) = r.runs.spread(load);
                let _ = writeln!(
                    o,
                    "| {n} | {} | {:.0} | {:.2} | {:.2} | {lo:.0}-{hi:.0} | {:.1} | {:.1} |",
                    mode.name(),
                    r.runs.rate(load),
                    r.runs.rate(load) / d.runs.rate(load),
                    r.runs.rate(load) / us.runs.rate(load),
                    r.runs.p50(load),
                    r.runs.p99(load),
                );
            }
        }
        o.push('\n');
    }
    let failed: u64 = rows.iter().map(|r| r.runs.failed()).sum();
    let _ = writeln!(o, "Failed requests over all datapath runs: {failed}.\n");
    program_costs(o, plan, rows);
}

/// Our programs' mean run time per call during each of our runs.
fn program_costs(o: &mut String, plan: &Plan, rows: &[Row]) {
    let _ = writeln!(
        o,
        "### Our programs' cost per call\n\n\
         The kernel's BPF statistics (`run_time_ns` / `run_cnt`, as `bpftool prog show` prints \
         them with `kernel.bpf_stats_enabled=1`), enabled during our runs only, over all rounds; \
         programs that did not run are left out.\n"
    );
    let _ = writeln!(o, "| N | mode | load | program | calls | ns per call |");
    let _ = writeln!(o, "|---:|---|---|---|---:|---:|");
    for &n in &plan.scales {
        for row in rows.iter().filter(|r| r.n == n) {
            for (load, prog, runs) in row.programs.iter().filter(|(_, _, r)| r.count > 0) {
                let _ = writeln!(
                    o,
                    "| {n} | {} | {load:?} | {prog} | {} | {:.0} |",
                    row.mode.name(),
                    runs.count,
                    runs.ns_per_run()
                );
            }
        }
    }
    o.push('\n');
}

fn control_tables(o: &mut String, plan: &Plan, c: &Control) {
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
            x.write.map_or("-".into(), ms),
            x.wall.as_secs_f64() / ours.as_secs_f64()
        );
    }
    let ours_p50 = c
        .updates
        .first()
        .map_or(Duration::ZERO, |u| percentile(&u.samples, 50.0));
    let _ = writeln!(
        o,
        "\n| one endpoint changed, until it is in the dataplane | samples | p50 | p99 | max | p50 vs ours |"
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

fn targets(plan: &Plan, rows: &[Row], c: &Control) -> Vec<Target> {
    let mut t = Vec::new();
    for &n in &plan.scales {
        let (d, us) = (find(rows, Mode::Direct, n), find(rows, Mode::Ours, n));
        let r = us.runs.rate(Load::Tcp) / d.runs.rate(Load::Tcp);
        t.push(Target::at_least(
            format!("ours >= 95% of direct at N={n} (TCP)"),
            r,
            0.95,
            Measured::Percent(r),
        ));
        let nft = find(rows, Mode::Nftables, n).runs.rate(Load::Tcp);
        let ours = us.runs.rate(Load::Tcp);
        t.push(Target::at_least(
            format!("ours >= nftables at N={n} (TCP)"),
            ours,
            nft,
            Measured::Times(ours / nft),
        ));
    }
    for &n in &plan.scales {
        let ratio = |ours, direct| {
            find(rows, ours, n).runs.rate(Load::Tcp) / find(rows, direct, n).runs.rate(Load::Tcp)
        };
        let (v4, v6) = (
            ratio(Mode::Ours, Mode::Direct),
            ratio(Mode::Ours6, Mode::Direct6),
        );
        t.push(Target::at_least(
            format!("IPv6: ours/direct within 5 points of IPv4's at N={n} (TCP)"),
            v6,
            v4 - 0.05,
            Measured::Text(format!("{:.1}% vs {:.1}%", v6 * 100.0, v4 * 100.0)),
        ));
    }
    if let Some(&n) = plan.scales.last() {
        let us = find(rows, Mode::Ours, n).runs.rate(Load::Tcp);
        let r = find(rows, Mode::OursAffinity, n).runs.rate(Load::Tcp) / us;
        t.push(Target::new(
            format!("ClientIP affinity costs <= 3% of ours' rate at N={n} (TCP)"),
            Measured::Percent(1.0 - r),
            r >= 0.97,
        ));
    }
    // The 2x target is set at 10,000 Services; a smoke run does not go there.
    if plan.scales.contains(&10_000) {
        let ipt = find(rows, Mode::Iptables, 10_000).runs.rate(Load::Tcp);
        let r = find(rows, Mode::Ours, 10_000).runs.rate(Load::Tcp) / ipt;
        t.push(Target::at_least(
            "ours >= 2x iptables at N=10000 (TCP)",
            r,
            2.0,
            Measured::Times(r),
        ));
    }
    for x in c.cold.iter().filter(|x| x.what.starts_with("ours")) {
        t.push(Target::within(
            format!(
                "cold programming of {}x{} <= 1 s ({})",
                c.services, c.endpoints, x.what
            ),
            x.wall,
            Duration::from_secs(1),
        ));
    }
    for x in &c.cold {
        for p in x.health.iter().filter(|p| p.path == "/livez") {
            let max = p.latencies.last().copied().unwrap_or_default();
            t.push(Target::new(
                format!(
                    "/livez answers within 100 ms at every moment after the listener binds ({})",
                    x.what
                ),
                Measured::Text(format!("max {}, {} without an answer", ms(max), p.failed)),
                p.failed == 0 && max <= Duration::from_millis(100),
            ));
        }
    }
    if let Some(u) = c.updates.first() {
        t.push(Target::within(
            "one-endpoint update p99 <= 10 ms",
            percentile(&u.samples, 99.0),
            Duration::from_millis(10),
        ));
    }
    for x in &c.cold {
        if let Some(rss) = &x.rss {
            t.push(Target::new(
                format!("RSS <= 150 MB ({})", x.what),
                Measured::Text(format!(
                    "{:.1} MiB (peak {:.1} MiB)",
                    mib(rss.current),
                    mib(rss.peak)
                )),
                rss.current <= 150_000_000,
            ));
        }
    }
    t
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn ms(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.3} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                Some(
                    l.strip_prefix("model name")?
                        .split(':')
                        .nth(1)?
                        .trim()
                        .to_owned(),
                )
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let version = |cmd: &str| {
        std::process::Command::new(cmd)
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| Some(String::from_utf8(o.stdout).ok()?.lines().next()?.to_owned()))
            .unwrap_or_else(|| format!("{cmd}: unknown"))
    };
    format!(
        "Machine: {cores} cores ({cpu}), kernel {}; {}, {}.",
        kernel.trim(),
        version("iptables"),
        version("nft")
    )
}

fn draw(plan: &Plan, rows: &[Row], path: &std::path::Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (860, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = rows
        .iter()
        .map(|r| r.runs.rate(Load::Tcp))
        .fold(0.0, f64::max)
        * 1.15;
    let xs = plan.scales.len() as f64 - 1.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "TCP short connections per second vs number of Services",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2..xs + 0.2, 0.0..ymax)?;
    let scales = plan.scales.clone();
    chart
        .configure_mesh()
        .x_labels(scales.len())
        .x_label_formatter(&|x| {
            let i = x.round() as usize;
            if (x - x.round()).abs() < 1e-6 {
                scales.get(i).map_or(String::new(), |n| n.to_string())
            } else {
                String::new()
            }
        })
        .x_desc("Services (N)")
        .y_desc("connections / s")
        .draw()?;
    for (mode, color) in Mode::ALL.iter().zip([BLACK, BLUE, RED, GREEN]) {
        let points: Vec<(f64, f64)> = plan
            .scales
            .iter()
            .enumerate()
            .map(|(i, &n)| (i as f64, find(rows, *mode, n).runs.rate(Load::Tcp)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(mode.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
