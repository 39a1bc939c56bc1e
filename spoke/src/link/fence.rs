//! The fence loop: stops each failover-enabled Harness whose execution
//! lease lapsed (`crate::failover`), whether or not a session is open.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::WorkApplier;
use crate::failover::ExecutionLease;

/// How often the lease is checked: well inside the margin the hub waits
/// past it (`clawfed_proto::failover::FENCE_SETTLE`).
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Checks the lease every [`CHECK_EVERY`] until `shutdown`.
pub(super) async fn run(
    applier: Arc<dyn WorkApplier>,
    lease: Arc<ExecutionLease>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let state = match applier.failover().await {
            Ok(s) => s,
            Err(error) => {
                tracing::warn!(%error, "spoke.failover.state_unreadable");
                continue;
            }
        };
        let now = Instant::now();
        for leased in state.running {
            if now < lease.fence_at(&leased) {
                continue;
            }
            // A failure is retried on the next check: the record says
            // stopped first, so drift repair never restarts it meanwhile.
            if let Err(error) = applier.fence(&leased.target).await {
                tracing::error!(target_ = %leased.target, %error, "spoke.failover.fence_failed");
            }
        }
    }
}
