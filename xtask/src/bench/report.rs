//! The bench report: a markdown table (stdout and target/bench/), the
//! targets met or missed, and an SVG chart of connection rate against N.

use std::{fmt::Write as _, time::Duration};

use plotters::prelude::*;

use super::{
    Plan,
    control::Control,
    datapath::{Load, Mode, Row},
    percentile,
};

pub fn write(plan: &Plan, rows: &[Row], control: &Control, took: Duration) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let name = if plan.quick { "bench-quick" } else { "bench" };
    let chart = plan.out_dir.join(format!("{name}.svg"));
    let md = render(plan, rows, control, took, &chart.display().to_string());
    print!("{md}");
    std::fs::write(plan.out_dir.join(format!("{name}.md")), &md)?;
    draw(plan, rows, &chart)?;
    eprintln!(
        "wrote {} and {}",
        plan.out_dir.join(format!("{name}.md")).display(),
        chart.display()
    );
    Ok(())
}

fn find(rows: &[Row], mode: Mode, n: usize) -> &Row {
    rows.iter()
        .find(|r| r.mode == mode && r.n == n)
        .expect("every mode at every N")
}

fn render(plan: &Plan, rows: &[Row], c: &Control, took: Duration, chart: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# lb-agent benchmark{}\n",
        if plan.quick {
            " (--quick smoke run)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "{}\n", machine());
    let _ = writeln!(
        o,
        "Datapath: {} endpoints per Service (identity servers, each in its own netns), {} \
         concurrent clients, {} s per measurement, {} rounds per mode in ABBA order; each figure \
         is the median over rounds, and \"spread\" is the slowest and fastest round. The \
         measured Service is the last in rule order. iptables/nftables: kube-proxy v1.31's \
         layouts, loaded in the client's netns; conntrack is flushed before each measurement. \
         Ratios: to direct / to ours.\n",
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
            let (d, us) = (find(rows, Mode::Direct, n), find(rows, Mode::Ours, n));
            for mode in Mode::ALL {
                let r = find(rows, mode, n);
                let (lo, hi) = r.spread(load);
                let _ = writeln!(
                    o,
                    "| {n} | {} | {:.0} | {:.2} | {:.2} | {lo:.0}-{hi:.0} | {:.1} | {:.1} |",
                    mode.name(),
                    r.rate(load),
                    r.rate(load) / d.rate(load),
                    r.rate(load) / us.rate(load),
                    r.p50(load),
                    r.p99(load),
                );
            }
        }
        o.push('\n');
    }
    let failed: u64 = rows.iter().map(Row::failed).sum();
    let _ = writeln!(o, "Failed requests over all datapath runs: {failed}.\n");

    let _ = writeln!(
        o,
        "### Control plane: {} Services x {} endpoints\n",
        c.services, c.endpoints
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
                "Agent memory once programmed ({}): RSS {:.1} MiB, peak {:.1} MiB.\n",
                x.what,
                mib(rss.current),
                mib(rss.peak)
            );
        }
    }

    let _ = writeln!(o, "### Targets (measured, not asserted)\n");
    for (ok, text) in targets(plan, rows, c) {
        let _ = writeln!(o, "- [{}] {text}", if ok { "met" } else { "MISSED" });
    }
    let _ = writeln!(o, "\nChart: {chart}. Run took {:.0} s.", took.as_secs_f64());
    o
}

fn targets(plan: &Plan, rows: &[Row], c: &Control) -> Vec<(bool, String)> {
    let mut t = Vec::new();
    for &n in &plan.scales {
        let (d, us) = (find(rows, Mode::Direct, n), find(rows, Mode::Ours, n));
        let r = us.rate(Load::Tcp) / d.rate(Load::Tcp);
        t.push((
            r >= 0.95,
            format!("ours >= 95% of direct at N={n} (TCP): {:.1}%", r * 100.0),
        ));
        let nft = find(rows, Mode::Nftables, n).rate(Load::Tcp);
        t.push((
            us.rate(Load::Tcp) >= nft,
            format!(
                "ours >= nftables at N={n} (TCP): {:.2}x",
                us.rate(Load::Tcp) / nft
            ),
        ));
    }
    // The 2x target is set at 10,000 Services; a smoke run does not go there.
    if plan.scales.contains(&10_000) {
        let ipt = find(rows, Mode::Iptables, 10_000).rate(Load::Tcp);
        let r = find(rows, Mode::Ours, 10_000).rate(Load::Tcp) / ipt;
        t.push((
            r >= 2.0,
            format!("ours >= 2x iptables at N=10000 (TCP): {r:.2}x"),
        ));
    }
    for x in c.cold.iter().filter(|x| x.what.starts_with("ours")) {
        t.push((
            x.wall <= Duration::from_secs(1),
            format!(
                "cold programming of {}x{} <= 1 s ({}): {}",
                c.services,
                c.endpoints,
                x.what,
                ms(x.wall)
            ),
        ));
    }
    if let Some(u) = c.updates.first() {
        let p99 = percentile(&u.samples, 99.0);
        t.push((
            p99 <= Duration::from_millis(10),
            format!("one-endpoint update p99 <= 10 ms: {}", ms(p99)),
        ));
    }
    for x in &c.cold {
        if let Some(rss) = &x.rss {
            t.push((
                rss.current <= 150_000_000,
                format!(
                    "RSS <= 150 MB ({}): {:.1} MiB (peak {:.1} MiB)",
                    x.what,
                    mib(rss.current),
                    mib(rss.peak)
                ),
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
    let ymax = rows.iter().map(|r| r.rate(Load::Tcp)).fold(0.0, f64::max) * 1.15;
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
            .map(|(i, &n)| (i as f64, find(rows, *mode, n).rate(Load::Tcp)))
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
