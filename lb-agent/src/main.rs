//! `lb-agent`: the node agent binary: parses the command line and calls
//! into the library.

use anyhow::Context as _;
use clap::Parser as _;
use lb_agent::{
    cli::{Cli, Command},
    config::RunConfig,
    datapath::table::Bpf,
    datapath::{conntrack, pins::Pins, stats},
    dump, memory,
    reconcile::{Family, LbTables, LbView, StoreError, Table as _},
};

fn main() -> anyhow::Result<()> {
    memory::keep_trimming();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Run(args) => {
            lb_agent::fd_limit::raise_or_warn();
            let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
            let config = RunConfig::resolve(args, std::env::var("NODE_NAME").ok(), host_name)?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(lb_agent::agent::run(config))
        }
        Command::Cleanup(args) => {
            let pins = Pins::new(&args.bpffs_dir);
            let removed = lb_agent::datapath::loader::uninstall(&pins)?;
            println!(
                "removed {} link(s) and {} map(s) under {}",
                removed.links.len(),
                removed.maps.len(),
                pins.dir().display()
            );
            // clsact filters (`--enable-tcx=false`, or kernels before 6.6)
            // have no pins: ours are found by name on every interface.
            let devices = lb_agent::datapath::tc::detach_clsact_everywhere();
            if !devices.is_empty() {
                println!("removed the tc filters from {}", devices.join(", "));
            }
            Ok(())
        }
        Command::Dump(args) => {
            let pins = Pins::new(&args.bpffs_dir);
            let text = if args.stats {
                let totals = stats::read(&pins.maps_dir()).with_context(|| {
                    format!("reading the counters under {}", pins.maps_dir().display())
                })?;
                dump::render_stats(stats::named(&totals))
            } else if args.conntrack {
                let entries = conntrack::read(&pins.maps_dir()).with_context(|| {
                    format!("reading the conntrack under {}", pins.maps_dir().display())
                })?;
                dump::render_conntrack(&entries, conntrack::now())
            } else {
                dump::render(&read_view(&pins)?)
            };
            match std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes()) {
                // `lb-agent dump | head` is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => Ok(other?),
            }
        }
    }
}

/// The pinned maps of this layout, read whole.
fn read_view(pins: &Pins) -> anyhow::Result<LbView> {
    let tables = lb_agent::datapath::read_only_tables(pins).with_context(|| {
        format!(
            "no maps of layout {} pinned under {}; is lb-agent running?",
            lb_common::LAYOUT_VERSION,
            pins.maps_dir().display()
        )
    })?;
    let read = |e| anyhow::Error::new(e).context("reading the pinned maps");
    Ok(family_view(&tables.v4)
        .map_err(read)?
        .merge(family_view(&tables.v6).map_err(read)?))
}

/// One family's pinned maps, read whole.
fn family_view<F: Family>(tables: &LbTables<F, Bpf>) -> Result<LbView, StoreError> {
    Ok(LbView::of::<F>(
        &tables.frontends.read()?.into_iter().collect(),
        &tables.states.read()?.into_iter().collect(),
        &tables.slots.read()?.into_iter().collect(),
        &tables.members.read()?.into_iter().collect(),
        &tables.backends.read()?.into_iter().collect(),
    ))
}
