//! The link's watchers: revocations (the deny-list and live streams) and
//! outbox growth from outside this process (wake-ups and the per-cluster
//! gauges).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use crate::link::LinkState;
use crate::link::metrics::ClusterLabel;

/// Picks up revocations (also those made by `clawfed-hub cluster revoke`
/// in another process or replica): the serial joins the handshake
/// deny-list and the cluster's live stream is closed. Paged by revocation
/// sequence from `seen` (what the start-up load covered), which commits in
/// order, so no revocation is missed however late it commits or however
/// wrong its revoker's clock.
pub(super) async fn revocation_watcher(state: Arc<LinkState>, mut seen: i64) {
    // A revocation committed in this process wakes the watcher at once; the
    // tick is the safety poll for revocations by other processes.
    let mut revoked_here = state.store.signals().revocations.subscribe();
    let mut tick = tokio::time::interval(state.config.poll_interval);
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tick.tick() => {}
            _ = revoked_here.notified() => {}
        }
        revoked_here.mark_seen();
        match state.store.revoked_after(seen).await {
            Ok(revoked) => {
                for r in &revoked {
                    if state.registry.revoke(&r.cluster_id) {
                        tracing::warn!(clusterId = %r.cluster_id, "link.revoked_session_closed");
                    }
                }
                seen = revoked.iter().map(|r| r.sequence).max().unwrap_or(seen);
                state.deny.insert_all(revoked.into_iter().map(|r| r.serial));
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
    }
}

/// Wakes sessions whose outbox grew from outside this process (puts in
/// this process wake their session directly): at once when the store
/// tells (another replica's put, on PostgreSQL), else on the safety poll,
/// which also keeps the per-cluster gauges current.
pub(super) async fn outbox_poller(state: Arc<LinkState>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut heads: HashMap<String, i64> = HashMap::new();
    let mut tick =
        tokio::time::interval(state.config.poll_interval.max(Duration::from_millis(500)));
    let mut grown = state.store.signals().outbox.subscribe();
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tick.tick() => {}
            wake = grown.recv() => match wake {
                Ok(crate::wake::OutboxWake::Cluster { id, head }) => {
                    state.registry.wake(&id, head);
                    continue;
                }
                // Maybe missed: the poll below wakes every session whose
                // outbox head moved.
                Ok(crate::wake::OutboxWake::All) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
        }
        match state.store.outbox_summary().await {
            Ok(summary) => {
                state.metrics.outbox_depth.clear();
                for s in summary {
                    state
                        .metrics
                        .outbox_depth
                        .get_or_create(&ClusterLabel {
                            cluster: s.cluster_name.clone(),
                        })
                        .set(s.depth);
                    if heads.insert(s.cluster_id.clone(), s.max_sequence) != Some(s.max_sequence) {
                        state.registry.wake(&s.cluster_id, Some(s.max_sequence));
                    }
                }
                // A connected cluster with nothing unacked shows 0, not no
                // data.
                for (cluster, _) in state.registry.last_heard() {
                    let _ = state
                        .metrics
                        .outbox_depth
                        .get_or_create(&ClusterLabel { cluster });
                }
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
        let now = Utc::now().timestamp_millis();
        for (cluster, heard) in state.registry.last_heard() {
            state
                .metrics
                .last_seen_age
                .get_or_create(&ClusterLabel { cluster })
                .set((now - heard) as f64 / 1000.0);
        }
    }
}
