//! Small measuring helpers: the CPU the hub and this generator used since
//! a mark, and the machine's load average.

use std::time::Instant;

use clawfed_bench::procfs::cpu_secs;

/// "hub X s + generator Y s CPU in Z s" since `(hub0, gen0, t0)`.
pub(super) fn cpu_note(hub: u32, since: (f64, f64, Instant)) -> String {
    let me = std::process::id();
    let wall = since.2.elapsed().as_secs_f64();
    let h = cpu_secs(hub) - since.0;
    let g = cpu_secs(me) - since.1;
    format!(
        "CPU: hub {h:.1} s + generator {g:.1} s in {wall:.1} s wall ({:.0}% of 2 cores)",
        (h + g) / (2.0 * wall) * 100.0
    )
}

pub(super) fn cpu_mark(hub: u32) -> (f64, f64, Instant) {
    (cpu_secs(hub), cpu_secs(std::process::id()), Instant::now())
}

/// The 1-minute load average.
pub(super) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
