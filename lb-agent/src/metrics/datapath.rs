//! `lbagent_datapath_events_total{hook,direction,family,reason}`: the eBPF
//! programs' per-CPU counters, read from their pinned map at each scrape.
//! Every counter the programs may count is shown, 0 until it counts.

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
            "What the eBPF programs did, by hook (sock, tc, xdp), direction, address \
             family and reason: translations, new flows, drops and refusals by cause, \
             pass-throughs.",
            None,
            MetricType::Counter,
        )?;
        for (key, n) in totals {
            let labels = [
                ("hook", key.at.hook.name()),
                ("direction", key.at.dir.name()),
                ("family", key.family.name()),
                ("reason", key.reason.name()),
            ];
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
