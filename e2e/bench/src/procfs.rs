//! Per-process figures read from `/proc`.

use anyhow::Context;

/// Resident set size of `pid`, KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}

/// The thread count of `pid` as /proc writes it; empty when unreadable.
pub fn threads(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_default()
}

/// CPU seconds (user + system) `pid` has used so far; NaN when unreadable.
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the parenthesised command name; utime and stime are
    // the 14th and 15th fields overall, in clock ticks (100 Hz on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / 100.0
}

/// Busy and total clock ticks of the whole machine (first line of
/// /proc/stat), to tell how much of the cores other work took.
pub fn machine_ticks() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    let total: f64 = v.iter().take(8).sum();
    (total - idle, total)
}

/// CPU over a span: the machine's busy cores and this process's.
pub struct CpuSpan {
    machine: (f64, f64),
    own: f64,
    at: std::time::Instant,
}

impl CpuSpan {
    pub fn start() -> Self {
        Self {
            machine: machine_ticks(),
            own: cpu_secs(std::process::id()),
            at: std::time::Instant::now(),
        }
    }

    /// "machine B of N cores busy over W s, this process C cores".
    pub fn note(&self) -> String {
        let wall = self.at.elapsed().as_secs_f64().max(1e-9);
        let (busy, total) = machine_ticks();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let share = (busy - self.machine.0) / (total - self.machine.1).max(1.0);
        let own = (cpu_secs(std::process::id()) - self.own) / wall;
        format!(
            "machine {:.2} of {cores:.0} cores busy over {wall:.1} s, of which this process {own:.2}",
            share * cores
        )
    }
}
