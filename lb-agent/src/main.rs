//! `lb-agent`: the node agent binary: parses the command line and calls
//! into the library.

use anyhow::Context as _;
use clap::Parser as _;
use lb_agent::{
    cli::{Cli, Command},
    config::RunConfig,
    datapath::{conntrack, pins::Pins, settings::BpfSettings, sock_netns, stats, tc},
    dump, memory,
    reconcile::SettingsStore as _,
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
                "removed {} link(s), {} map(s) and {} program pin(s) under {}",
                removed.links.len(),
                removed.maps.len(),
                removed.programs.len(),
                pins.dir().display()
            );
            // clsact filters (`--enable-tcx=false`, or kernels before 6.6)
            // have no pins: ours are found by name on every interface.
            let tc = tc::detach_clsact_everywhere();
            if !tc.removed.is_empty() {
                println!("removed the tc filters from {}", tc.removed.join(", "));
            }
            if let Some((device, e)) = tc.refused.first() {
                anyhow::bail!(
                    "the tc filters on {device} (and {} more) could not be removed: {e} \
                     (cleanup needs CAP_NET_ADMIN in the node's network namespace)",
                    tc.refused.len() - 1
                );
            }
            Ok(())
        }
        Command::MountBpffs(args) => {
            let dir = &args.dir;
            if lb_agent::datapath::bpffs::mount_bpffs(dir)? {
                println!("mounted bpffs on {}", dir.display());
            } else {
                println!("{} is on bpffs already", dir.display());
            }
            Ok(())
        }
        Command::Pause => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                // As PID 1 of a container a signal without a handler is
                // ignored, so both are handled.
                let mut term = signal(SignalKind::terminate())?;
                let mut int = signal(SignalKind::interrupt())?;
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                Ok(())
            }),
        Command::Dump(args) => {
            let pins = Pins::new(&args.bpffs_dir);
            let text = if args.stats {
                let totals = stats::read(&pins.maps_dir()).with_context(|| {
                    format!("reading the counters under {}", pins.maps_dir().display())
                })?;
                dump::render_stats(&totals)
            } else if args.conntrack {
                let entries = conntrack::read(&pins.maps_dir()).with_context(|| {
                    format!("reading the conntrack under {}", pins.maps_dir().display())
                })?;
                dump::render_conntrack(&entries, conntrack::now())
            } else if args.dsr {
                let maps = pins.maps_dir();
                let read = || -> Result<_, lb_agent::reconcile::StoreError> {
                    let settings = BpfSettings::open(&maps)?;
                    Ok(dump::render_dsr(
                        &settings.node_nets()?,
                        &settings.dsr_endpoints()?,
                    ))
                };
                read()
                    .with_context(|| format!("reading the DSR tables under {}", maps.display()))?
            } else {
                let mut text = dump::render(&lb_agent::datapath::read_view(&pins)?);
                let maps = pins.maps_dir();
                let netns = sock_netns::read(&maps)
                    .with_context(|| format!("reading LB_SOCK_NETNS under {}", maps.display()))?;
                let devices = tc::linked_pod_devices(&pins)?;
                let ranges = BpfSettings::open(&maps)
                    .and_then(|s| s.source_ranges())
                    .with_context(|| {
                        format!("reading the source ranges under {}", maps.display())
                    })?;
                text.push_str(&dump::render_source_ranges(&ranges));
                text.push_str(&dump::render_opt_outs(&netns, &devices));
                text
            };
            match std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes()) {
                // `lb-agent dump | head` is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => Ok(other?),
            }
        }
    }
}
