//! `lbagent_datapath_events_total{event}`: the eBPF programs' per-CPU
//! counters, read from their pinned map at each scrape.

use std::{
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _},
    metrics::{MetricType, counter::ConstCounter},
};

use crate::datapath::stats;

/// Reads the `LB_STATS` map pinned under the directory, once it is set.
#[derive(Debug)]
pub(super) struct Events(pub(super) Arc<OnceLock<PathBuf>>);

impl Collector for Events {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(dir) = self.0.get() else {
            return Ok(());
        };
        // Absent while an older layout's programs still run (a migration).
        let Ok(totals) = stats::read(dir) else {
            return Ok(());
        };
        let mut family = encoder.encode_descriptor(
            "lbagent_datapath_events",
            "What the eBPF programs did, by event: translations, reverse translations, \
             refusals by reason, pass-throughs.",
            None,
            MetricType::Counter,
        )?;
        for (event, n) in stats::named(&totals) {
            ConstCounter::new(n).encode(family.encode_family(&[("event", event)])?)?;
        }
        Ok(())
    }
}
