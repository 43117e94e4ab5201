//! `lb-agent`: the node agent binary.

mod run;

use anyhow::Context as _;
use clap::Parser as _;
use lb_agent::{
    bpf::{loader, pins::Pins, store::BpfStore},
    cli::{Cli, Command},
    config::RunConfig,
    dump, memory,
    reconcile::MapStore as _,
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
            let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
            let config = RunConfig::resolve(args, std::env::var("NODE_NAME").ok(), host_name)?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(run::run(config))
        }
        Command::Cleanup(args) => {
            let pins = Pins::new(&args.bpffs_dir);
            let removed = loader::uninstall(&pins)?;
            println!(
                "removed {} link(s) and {} map(s) under {}",
                removed.links.len(),
                removed.maps.len(),
                pins.dir().display()
            );
            Ok(())
        }
        Command::Dump(args) => {
            let pins = Pins::new(&args.bpffs_dir);
            let store = BpfStore::open(&pins).with_context(|| {
                format!(
                    "no maps pinned under {}; is lb-agent running?",
                    pins.dir().display()
                )
            })?;
            let text = dump::render(&store.read()?);
            match std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes()) {
                // `lb-agent dump | head` is not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => Ok(other?),
            }
        }
    }
}
