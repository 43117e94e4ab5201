//! `cargo xtask bench --scale`: the agent's cold programming, one-endpoint
//! change latency and memory at 1,000 to 100,000 Services x 10 endpoints,
//! from a file and from the stand-in apiserver, with a chart of each figure
//! against N. Measured, not asserted: the targets are printed as met or
//! missed.

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use lb_tests::{apiserver::ApiServer, kubeproxy, scenario::Bed};
use plotters::prelude::*;

use super::{
    control::{self, Rss},
    datapath, percentile,
};

/// Services measured, and endpoints per Service.
pub const SCALES: [usize; 4] = [1_000, 10_000, 50_000, 100_000];
const ENDPOINTS: usize = 10;
/// One-endpoint changes per N, through the apiserver.
const UPDATES: usize = 200;

/// One source at one N.
struct Row {
    n: usize,
    source: &'static str,
    /// Agent start until the first full sync is done.
    cold: Duration,
    /// The first full sync alone (compute and write).
    write: Option<Duration>,
    rss: Rss,
    /// Watch event to map write, sorted; apiserver only.
    changes: Vec<Duration>,
}

const FILE: &str = "file";
const API: &str = "apiserver";

/// Capacities for `n` Services of one port and [`ENDPOINTS`] endpoints:
/// two frontends each (the port and the ClusterIP's wildcard), a slot and a
/// distinct backend per endpoint, and room for revisions in flight.
fn capacity_flags(n: usize) -> Vec<String> {
    let fe = (2 * n + 1024).max(65_536);
    let be = (n * ENDPOINTS + 1024).max(131_072);
    let slots = (2 * n * ENDPOINTS).max(262_144);
    vec![
        format!("--bpf-lb-service-map-max={fe}"),
        format!("--bpf-lb-service-backend-map-max={be}"),
        format!("--bpf-lb-slot-map-max={slots}"),
    ]
}

pub fn run(out_dir: &Path, scales: &[usize]) -> anyhow::Result<()> {
    lb_tests::require_root();
    let started = Instant::now();
    let mut rows = Vec::new();
    for &n in scales {
        let specs = kubeproxy::filler_services(n, ENDPOINTS);
        let yaml = datapath::manifests(&specs);
        let flags = capacity_flags(n);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        eprintln!("== scale, {n} x {ENDPOINTS}");
        {
            let mut bed = Bed::new()?;
            bed.write_manifest(&yaml)?;
            let start = Instant::now();
            let agent = bed.spawn_agent(&flags)?;
            let c = control::ours_cold("ours, --from-file", start, agent, n)?;
            rows.push(Row {
                n,
                source: FILE,
                cold: c.wall,
                write: c.write,
                rss: c.rss.expect("ours"),
                changes: Vec::new(),
            });
        }
        {
            let mut bed = Bed::new()?;
            let api = ApiServer::start()?;
            lb_tests::scenario::apply_yaml(&api, &yaml)?;
            let start = Instant::now();
            let agent = bed.spawn_agent_kube(&api, &flags)?;
            let c = control::ours_cold("ours, apiserver watch", start, agent, n)?;
            let mut changes = control::lone_changes(&mut bed, &api, &specs, UPDATES)?;
            changes.sort_unstable();
            let rss = control::rss(bed.agent().pid())?;
            eprintln!(
                "   {n}: change p50 {:?} p99 {:?}, RSS after the changes {} MiB",
                percentile(&changes, 50.0),
                percentile(&changes, 99.0),
                rss.current >> 20
            );
            rows.push(Row {
                n,
                source: API,
                cold: c.wall,
                write: c.write,
                rss: c.rss.expect("ours"),
                changes,
            });
        }
    }
    std::fs::create_dir_all(out_dir)?;
    let md_path = out_dir.join("bench-scale.md");
    let svg_path = out_dir.join("bench-scale.svg");
    let md = render(&rows, started.elapsed(), &svg_path);
    print!("{md}");
    std::fs::write(&md_path, &md)?;
    draw(&rows, &svg_path)?;
    eprintln!("wrote {} and {}", md_path.display(), svg_path.display());
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn render(rows: &[Row], took: Duration, chart: &Path) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# lb-agent at scale: N Services x {ENDPOINTS} endpoints\n\n\
         Release build, one run per N and source ({:.0} s in all). Cold: agent start \
         until its first full sync is done (the file read and parsed, or the initial \
         lists; the programs loaded; every entry written), of which the sync itself. \
         Change: {UPDATES} one-endpoint EndpointSlice changes through the stand-in \
         apiserver, each applied once the previous is written, from the agent \
         receiving the watch event to the end of its map write. RSS: once programmed \
         (2 s after the first sync), and the peak (VmHWM, the initial list). Map \
         capacities set by flag for each N.\n",
        took.as_secs_f64()
    );
    let _ = writeln!(
        o,
        "| N | source | cold | first sync | change p50 | change p99 | RSS | peak RSS |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let (p50, p99) = if r.changes.is_empty() {
            ("-".to_owned(), "-".to_owned())
        } else {
            (
                format!("{:.3} ms", ms(percentile(&r.changes, 50.0))),
                format!("{:.3} ms", ms(percentile(&r.changes, 99.0))),
            )
        };
        let _ = writeln!(
            o,
            "| {} | {} | {:.0} ms | {} | {p50} | {p99} | {:.0} MiB | {:.0} MiB |",
            r.n,
            r.source,
            ms(r.cold),
            r.write.map_or("-".into(), |w| format!("{:.0} ms", ms(w))),
            mib(r.rss.current),
            mib(r.rss.peak),
        );
    }
    let _ = writeln!(o, "\nTargets (measured, not asserted):\n");
    for (met, what) in targets(rows) {
        let _ = writeln!(o, "- {} {what}", if met { "met:" } else { "MISSED:" });
    }
    let _ = writeln!(o, "\nChart: {}", chart.display());
    o
}

fn targets(rows: &[Row]) -> Vec<(bool, String)> {
    let mut t = Vec::new();
    for r in rows {
        if r.n == 100_000 {
            t.push((
                r.cold <= Duration::from_secs(8),
                format!(
                    "cold 100,000 x 10 in <= 8 s ({}): {:.1} s",
                    r.source,
                    r.cold.as_secs_f64()
                ),
            ));
            t.push((
                r.rss.current <= 400 << 20,
                format!(
                    "RSS <= 400 MiB at 100,000 x 10 ({}): {:.0} MiB",
                    r.source,
                    mib(r.rss.current)
                ),
            ));
        }
        if r.n == 10_000 {
            t.push((
                r.rss.current <= 100 << 20,
                format!(
                    "RSS <= 100 MiB at 10,000 x 10 ({}): {:.0} MiB",
                    r.source,
                    mib(r.rss.current)
                ),
            ));
        }
        if !r.changes.is_empty() {
            let p99 = percentile(&r.changes, 99.0);
            t.push((
                p99 <= Duration::from_millis(1),
                format!("change p99 <= 1 ms at {} : {:.3} ms", r.n, ms(p99)),
            ));
        }
    }
    // At most linear: per-Service cost at the largest N no more than 1.5x
    // that at the next one down (noise allowance). Against the smallest N
    // the fixed start-up cost would hide any superlinear growth.
    for source in [FILE, API] {
        let of: Vec<&Row> = rows.iter().filter(|r| r.source == source).collect();
        if let [.., a, b] = of[..] {
            let per = |r: &Row, v: f64| v / r.n as f64;
            for (what, ratio) in [
                ("cold", per(b, ms(b.cold)) / per(a, ms(a.cold))),
                (
                    "RSS",
                    per(b, mib(b.rss.current)) / per(a, mib(a.rss.current)),
                ),
            ] {
                t.push((
                    ratio <= 1.5,
                    format!(
                        "{what} grows at most linearly ({source}): per Service at {} / at {} = {ratio:.2}",
                        b.n, a.n
                    ),
                ));
            }
        }
    }
    t
}

/// Three panels against N: cold start, change latency, RSS.
fn draw(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1320, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let xmax = rows.iter().map(|r| r.n).max().unwrap_or(1) as f64 * 1.05;
    type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);
    let line = |source: &'static str, f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.source == source)
            .map(|r| (r.n as f64, f(r)))
            .collect()
    };
    let cold: Vec<Series<'_>> = vec![
        ("file", BLUE, line(FILE, &|r| r.cold.as_secs_f64())),
        ("apiserver", RED, line(API, &|r| r.cold.as_secs_f64())),
    ];
    let change: Vec<Series<'_>> = vec![
        (
            "p50",
            BLACK,
            line(API, &|r| ms(percentile(&r.changes, 50.0))),
        ),
        ("p99", RED, line(API, &|r| ms(percentile(&r.changes, 99.0)))),
    ];
    let rss: Vec<Series<'_>> = vec![
        ("file", BLUE, line(FILE, &|r| mib(r.rss.current))),
        ("apiserver", RED, line(API, &|r| mib(r.rss.current))),
    ];
    for (area, (title, ylabel, series)) in panels.iter().zip([
        ("Cold programming", "seconds", cold),
        ("One-endpoint change (apiserver)", "ms", change),
        ("Agent RSS once programmed", "MiB", rss),
    ]) {
        let ymax = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax.max(1e-3))?;
        chart
            .configure_mesh()
            .x_labels(6)
            .x_label_formatter(&|x| format!("{}k", (x / 1000.0).round()))
            .x_desc("Services (N)")
            .y_desc(ylabel)
            .draw()?;
        for (name, color, points) in series {
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
