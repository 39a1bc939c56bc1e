//! Measuring: waiting for a condition, one measured window of hub CPU and
//! committed events, and the verdict word.

use std::time::{Duration, Instant};

use clawfed_bench::procfs::cpu_secs;
use clawfed_hub::store::Store;

/// Polls `done` every 50 ms until it holds or `within` passes.
pub(super) async fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// One measured window: the hub's CPU seconds, the events the log got, the
/// wall time.
pub(super) struct Window {
    pub(super) cpu: f64,
    pub(super) events: i64,
    pub(super) wall: f64,
    pub(super) bench_cpu: f64,
}

pub(super) async fn measure(store: &dyn Store, pid: u32, seconds: u64) -> anyhow::Result<Window> {
    let me = std::process::id();
    let (cpu0, bench0, head0) = (
        cpu_secs(pid),
        cpu_secs(me),
        store.event_bounds().await?.head,
    );
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (cpu1, bench1, head1) = (
        cpu_secs(pid),
        cpu_secs(me),
        store.event_bounds().await?.head,
    );
    Ok(Window {
        cpu: cpu1 - cpu0,
        events: head1 - head0,
        wall: t0.elapsed().as_secs_f64(),
        bench_cpu: bench1 - bench0,
    })
}

pub(super) fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}
