//! The standard `process_*` metrics, named and explained as Prometheus' Go
//! and Python clients export them (the usual kube-proxy dashboards chart
//! them), read from `/proc/self` at each scrape. A value that cannot be read
//! is left out of that scrape.

use std::fmt;

use procfs::process::{LimitValue, Process as Proc};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric as _},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};

#[derive(Debug)]
pub(super) struct Process;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let me = match Proc::myself() {
            Ok(me) => me,
            Err(e) => {
                tracing::debug!(error = &e as &dyn std::error::Error, "reading /proc/self");
                return Ok(());
            }
        };
        let e = &mut encoder;
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            let cpu = e.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new((stat.utime + stat.stime) as f64 / ticks).encode(cpu)?;
            gauge(
                e,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.vsize,
            )?;
            gauge(
                e,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.rss * procfs::page_size(),
            )?;
            if let Ok(boot) = procfs::boot_time_secs() {
                gauge(
                    e,
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    boot as f64 + stat.starttime as f64 / ticks,
                )?;
            }
        }
        if let Ok(n) = me.fd_count() {
            gauge(
                e,
                "process_open_fds",
                "Number of open file descriptors.",
                n as u64,
            )?;
        }
        if let Ok(limits) = me.limits()
            && let LimitValue::Value(max) = limits.max_open_files.soft_limit
        {
            gauge(
                e,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                max,
            )?;
        }
        Ok(())
    }
}

fn gauge<V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: V,
) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}
