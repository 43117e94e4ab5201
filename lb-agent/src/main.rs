//! `lb-agent`: the node agent binary.

mod cli;
mod run;

use anyhow::Context as _;
use clap::Parser as _;
use lb_agent::{
    bpf::{loader, pins::Pins, store::BpfStore},
    dump,
    reconcile::MapStore as _,
};

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        cli::Command::Run(args) => {
            let config = args.into_config()?;
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(run::run(config))
        }
        cli::Command::Cleanup(args) => {
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
        cli::Command::Dump(args) => {
            let pins = Pins::new(&args.bpffs_dir);
            let store = BpfStore::open(&pins).with_context(|| {
                format!(
                    "no maps pinned under {}; is lb-agent running?",
                    pins.dir().display()
                )
            })?;
            print!("{}", dump::render(&store.read()?));
            Ok(())
        }
    }
}
