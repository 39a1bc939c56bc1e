//! The failover scan: every replica looks once a [`SCAN_INTERVAL`] for
//! failover-enabled Agents to move (`crate::failover::decide`) and deploys
//! their moves. Replicas scanning at once are harmless: a move is a
//! compare-and-swap on the Agent's latest revision, so one wins.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::WorkError;
use super::moves::{MoveOrder, deploy_move};
use crate::store::{Move, Store};

/// How often the scan runs: small beside the shortest margin the hub waits
/// past a lapsed lease (`clawfed_proto::failover`).
pub const SCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Runs the scan until `shutdown`.
pub async fn run(store: Arc<dyn Store>, max_attempts: i32, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(SCAN_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(error) = scan(&*store, max_attempts).await {
            tracing::warn!(%error, "failover.scan_failed");
        }
    }
}

/// One scan: the moves it deployed.
pub async fn scan(store: &dyn Store, max_attempts: i32) -> Result<usize, WorkError> {
    let now = store.now();
    let candidates = store
        .failover_candidates(
            crate::failover::scan_cutoff(now),
            crate::failover::retry_cutoff(now),
        )
        .await
        .map_err(WorkError::from_store)?;
    let mut moved = 0;
    for c in candidates {
        let Some(reason) = crate::failover::decide(&c, now) else {
            continue;
        };
        let rev = &c.revision;
        let Some(cluster) = rev.resolved_cluster.clone() else {
            continue;
        };
        let retried = (c.latest_revision != rev.number).then_some(c.latest_revision);
        tracing::warn!(cluster = %cluster, namespace = %rev.namespace, agent = %rev.agent,
            revision = rev.number, reason = %reason, retried, "failover.moving");
        let order = MoveOrder {
            namespace: &rev.namespace,
            agent: &rev.agent,
            detail: format!(
                "revision {} moved away from cluster {cluster}: {reason}; the new revision starts with a fresh workspace{}",
                rev.number,
                retried.map_or_else(String::new, |n| format!(
                    " (again: the move to revision {n} failed)"
                ))
            ),
            // A retry copies the failed move: the store moves only the
            // Agent's latest revision, and a move copies the spec as is.
            moved: Move {
                cluster,
                revision: c.latest_revision,
            },
            requested_by: None,
            actor: "system:failover",
            action: "agent.failover",
        };
        if deploy_move(store, order, now, max_attempts)
            .await?
            .is_some()
        {
            moved += 1;
        }
    }
    Ok(moved)
}
