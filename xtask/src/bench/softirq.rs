//! Softirq time per CPU (`/proc/stat`): where the kernel forwarded the
//! packets of a run.

use anyhow::Context as _;

/// Seconds of softirq time so far, per CPU (index = CPU).
pub(super) fn per_cpu() -> anyhow::Result<Vec<f64>> {
    parse(&std::fs::read_to_string("/proc/stat")?, clock_ticks())
}

/// `/proc/stat`'s `cpuN` lines: the 7th field is softirq, in clock ticks.
fn parse(stat: &str, ticks_per_s: f64) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        let Some(cpu) = f.next().and_then(|c| c.strip_prefix("cpu")) else {
            continue;
        };
        let Ok(i) = cpu.parse::<usize>() else {
            continue; // the "cpu" total line
        };
        let ticks: f64 = f
            .nth(6)
            .and_then(|t| t.parse().ok())
            .with_context(|| format!("softirq of {line:?}"))?;
        if out.len() <= i {
            out.resize(i + 1, 0.0);
        }
        out[i] = ticks / ticks_per_s;
    }
    Ok(out)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        t if t > 0 => t as f64,
        _ => 100.0,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn softirq_is_read_per_cpu() {
        let stat = "cpu  10 0 20 300 0 0 55 0 0 0\n\
                    cpu0 5 0 10 150 0 0 50 0 0 0\n\
                    cpu1 5 0 10 150 0 0 5 0 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(super::parse(stat, 100.0).unwrap(), [0.5, 0.05]);
        assert!(super::parse("cpu0 1 2\n", 100.0).is_err());
    }
}
