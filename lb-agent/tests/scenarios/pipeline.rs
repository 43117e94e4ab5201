//! The agent's pure pipeline as a golden scenario's agent: what `lb-agent
//! run --from-file` does with the objects, without BPF. The flags go through
//! the agent's own `cli` and `RunConfig`; the manifest through the file
//! source's parser, into the agent's [`Syncer`] (model, reconciler, metrics)
//! over in-memory maps of the configured capacities; the dump is
//! `lb-agent dump`'s rendering of those maps. Left out: the programs, tc,
//! sockets and conntrack, which do not change the maps' contents.

use std::{sync::Arc, time::Instant};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use lb_agent::model::maglev::MaglevParams;
use lb_agent::{
    cli::{Cli, Command as CliCommand},
    config::{RunConfig, Source},
    dump,
    model::NodeContext,
    reconcile::{
        DualReconciler, Found, V4, V6,
        mem::{Journal, ManualGrace, Mem, MemSettings, lb_tables},
    },
    shared::Shared,
    source::{Change, file, file_poll, interfaces::Interfaces},
    syncer::{NodeWait, Syncer},
};
use lb_fixtures::golden::{Executor, script::Command};

/// The samples the pipeline drives as the running agent does: what the
/// syncer wrote and what the model reported, and the file source's skipped
/// documents. The others (timings, sockets, tc, conntrack, the process)
/// only the running agent has.
const IN_PROCESS_METRICS: &[&str] = &[
    "lbagent_services_programmed",
    "lbagent_frontends_programmed",
    "lbagent_backends_programmed",
    "lbagent_frontends_programmed_per_family",
    "lbagent_backends_programmed_per_family",
    "lbagent_excluded_endpoints_total",
    "lbagent_invalid_objects_total",
    "lbagent_skipped_documents_total",
    "lbagent_ignored_objects_total",
    "lbagent_unsupported_features_total",
];

/// The manifest's name, as the real runner's agent reads it: only the
/// model's reports of skipped documents show it.
const MANIFEST: &str = "services.yaml";

/// The pipeline, once `agent` started it.
#[derive(Default)]
pub(crate) struct Pipeline(Option<Agent>);

struct Agent {
    syncer: Syncer<Mem, ManualGrace, MemSettings>,
    /// Passes the grace periods of retired revisions, as the running
    /// agent's reaper sees them pass.
    grace: ManualGrace,
    shared: Arc<Shared>,
    /// `--from-file`, naming the manifest in the file source's reports.
    origin: String,
    node_name: String,
}

impl Pipeline {
    fn agent(&mut self) -> anyhow::Result<&mut Agent> {
        self.0
            .as_mut()
            .context("the agent is not started (`agent`)")
    }
}

impl Executor for Pipeline {
    fn start(&mut self, manifest: &str, flags: &[String]) -> anyhow::Result<()> {
        let mut agent = Agent::new(flags)?;
        agent.read(manifest);
        // The agent reads its interfaces' addresses before its first sync.
        if let Some(ips) = Interfaces::default().changed() {
            agent
                .syncer
                .apply(Change::LocalAddresses(ips), Instant::now());
        }
        agent.sync()?;
        self.0 = Some(agent);
        Ok(())
    }

    fn update(&mut self, manifest: &str) -> anyhow::Result<()> {
        let agent = self.agent()?;
        agent.read(manifest);
        agent.sync()
    }

    fn dump(&mut self) -> anyhow::Result<String> {
        Ok(dump::render(&self.agent()?.syncer.view()))
    }

    fn metric(&mut self, sample: &str) -> anyhow::Result<f64> {
        let text = self.agent()?.shared.metrics.render();
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
            .with_context(|| format!("no sample {sample} in\n{text}"))?;
        let value = value.split_whitespace().next().unwrap_or_default();
        value
            .parse()
            .with_context(|| format!("{sample} has the value {value:?}"))
    }

    fn unsupported(&self, command: &Command) -> Option<String> {
        let Command::Metric { sample, .. } = command else {
            return None;
        };
        let name = sample.split('{').next().unwrap_or(sample);
        (!IN_PROCESS_METRICS.contains(&name)).then(|| {
            format!(
                "{name} is not computed in-process, only by the running agent \
                 (lb-tests' scenarios)"
            )
        })
    }
}

impl Agent {
    /// What `lb-agent run --from-file` sets up from `flags`, over maps in
    /// memory.
    fn new(flags: &[String]) -> anyhow::Result<Self> {
        let argv = ["lb-agent", "run", "--from-file", MANIFEST]
            .map(String::from)
            .into_iter()
            .chain(flags.iter().cloned());
        let CliCommand::Run(args) = Cli::try_parse_from(argv)?.command else {
            bail!("not `lb-agent run`");
        };
        // As the agent's main resolves them.
        let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
        let config = RunConfig::resolve(args, std::env::var("NODE_NAME").ok(), host_name)?;
        let Source::File(path) = &config.source else {
            bail!("--from-file is not the source");
        };
        let journal = Journal::default();
        let grace = ManualGrace::new(&journal);
        let c = config.capacities;
        let reconciler = DualReconciler::adopt(
            lb_tables::<V4>(c.frontends, c.slots, c.backends, &journal),
            lb_tables::<V6>(c.frontends, c.slots, c.backends, &journal),
            grace.clone(),
            Found::Created,
            MaglevParams::default(),
        )?;
        let shared = Arc::new(Shared::default());
        let syncer = Syncer::new(
            reconciler,
            MemSettings::default(),
            config.excluded.clone(),
            NodeContext::named(&config.node_name),
            // From files, as the agent: nothing to wait for.
            NodeWait::none(),
            config.node_port_addresses.clone(),
            shared.clone(),
        );
        Ok(Self {
            syncer,
            grace,
            shared,
            origin: path.display().to_string(),
            node_name: config.node_name,
        })
    }

    /// One read of the manifest, as the file source hands it to the sync
    /// loop: every Service, every slice, this node's Node.
    fn read(&mut self, manifest: &str) {
        let mut objects = file::Objects::default();
        file::parse_into(&self.origin, manifest, &mut objects);
        let changes = file_poll::changes(objects, &self.node_name, &self.shared, Instant::now());
        for (change, read) in changes {
            self.syncer.apply(change, read);
        }
    }

    /// Writes what the reads changed, then lets the grace periods pass and
    /// deletes what waited for them, as the running agent does before
    /// `dump` shows no revision retired.
    fn sync(&mut self) -> anyhow::Result<()> {
        // What fails to be written (a full map) stays out of the maps,
        // as the dump then shows.
        self.syncer
            .sync(Instant::now())
            .context("nothing to sync after a read")?;
        self.grace.elapse();
        self.syncer.reap();
        anyhow::ensure!(!self.syncer.retiring(), "retired revisions never reaped");
        Ok(())
    }
}
