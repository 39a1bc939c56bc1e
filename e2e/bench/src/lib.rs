//! What the benchmark programs share.

use std::path::Path;

/// "release", "debug" or "custom" for a binary in a cargo target dir.
pub fn profile_of(bin: &Path) -> &'static str {
    match bin
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
    {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "custom",
    }
}

/// Per-process figures read from `/proc`.
pub mod procfs {
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
}
