//! `process_cpu_seconds_total` and `process_resident_memory_bytes`, the
//! names Prometheus' own client libraries use, read from `/proc/self` at
//! scrape time (prometheus-client has no process collector).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// This process's CPU time and resident memory. Linux only: elsewhere (or
/// when `/proc` is unreadable) the series are left out rather than zero.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// CPU seconds (user + system) this process has used, from
/// `/proc/self/stat`.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name in parentheses may hold spaces: split after it.
    // utime and stime are fields 14 and 15 overall, 12 and 13 after it.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second();
    (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
}

/// Resident set size in bytes, from `VmRSS` in `/proc/self/status`.
pub fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(cpu) = cpu_seconds() {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        if let Some(rss) = resident_bytes() {
            let gauge = ConstGauge::new(rss);
            gauge.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let cpu = cpu_seconds().expect("cpu seconds on Linux");
        assert!(cpu >= 0.0, "{cpu}");
        let rss = resident_bytes().expect("VmRSS on Linux");
        assert!(
            rss > 1024 * 1024,
            "a test process holds more than 1 MiB: {rss}"
        );
    }
}
