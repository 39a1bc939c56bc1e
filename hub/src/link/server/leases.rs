//! The session keeper: this replica's session leases renewed, superseded
//! sessions closed, clusters whose lease lapsed marked offline (and its own
//! restored after a stall), and the leases handed off on shutdown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::replicas::publish_replica;
use crate::link::LinkState;

/// Keeps this replica's sessions fenced: renews the leases of all its
/// sessions in one statement, closes those the renewal shows a newer
/// session (on any replica) took over, and marks offline the clusters
/// whose lease lapsed (their replica died). Every replica sweeps; the
/// store marks each cluster once.
pub(super) async fn session_keeper(state: Arc<LinkState>) {
    let config = &state.config;
    let mut tick = tokio::time::interval(config.lease_renew_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the last renewal that succeeded started: the leases it gave
    // last until then plus a lease.
    let mut renewed_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return hand_off_leases(&state).await,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        // Taken before the renewal: a session claimed after the snapshot
        // is not judged by a renewal that may have run before its claim.
        let claimed = state.registry.claimed();
        let lease_until = state.store.now()
            + chrono::Duration::from_std(config.lease_ttl()).unwrap_or(chrono::Duration::MAX);
        // No session claimed here, no lease to renew: an idle replica
        // costs the database its sweep only (issue 14, idle load). A claim
        // committing meanwhile carries a fresh lease until the next tick.
        let renewed = if claimed.is_empty() {
            Ok(Vec::new())
        } else {
            state
                .store
                .session_renew(&config.replica_id, lease_until)
                .await
        };
        match renewed {
            Ok(held) => {
                let held: std::collections::HashSet<(String, i64)> = held.into_iter().collect();
                for cluster in state.registry.close_superseded(&claimed, &held) {
                    tracing::info!(%cluster, replica = %config.replica_id, "link.superseded");
                }
                // Renewals stalled past the lease (a slow database, a
                // paused process): another replica's sweep may have marked
                // these clusters offline while their sessions lived on.
                let lapsed = renewed_at.is_some_and(|at| at.elapsed() >= config.lease_ttl());
                renewed_at = Some(started);
                if lapsed {
                    restore_online(&state, &claimed, &held).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "link.lease_renew_failed"),
        }
        publish_replica(&state).await;
        match state
            .store
            .offline_where_lease_expired(state.store.now(), false)
            .await
        {
            Ok(marked) => {
                for cluster_id in marked {
                    tracing::warn!(clusterId = %cluster_id, "link.lease_lapsed_offline");
                }
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
    }
}

/// Re-marks online the clusters of `claimed` this replica still holds
/// (`held`) after its leases lapsed, with a fresh lease, so they show
/// offline for the stall only, not until their next last-seen write.
async fn restore_online(
    state: &LinkState,
    claimed: &[(String, i64)],
    held: &std::collections::HashSet<(String, i64)>,
) {
    let live: Vec<(String, i64)> = claimed
        .iter()
        .filter(|c| held.contains(*c))
        .cloned()
        .collect();
    let lease_until = state.store.now()
        + chrono::Duration::from_std(state.config.lease_ttl()).unwrap_or(chrono::Duration::MAX);
    match state
        .store
        .session_restore_online(&state.config.replica_id, &live, lease_until)
        .await
    {
        Ok(marked) => {
            for cluster_id in marked {
                tracing::warn!(clusterId = %cluster_id, replica = %state.config.replica_id, "link.lease_restored_online");
            }
        }
        Err(e) => tracing::warn!(error = %e, "link.store_error"),
    }
}

/// On shutdown, the sessions are told to reconnect after a jittered
/// retry-after: their leases are extended over it (plus one lease), so
/// no replica marks a cluster offline while its spoke is on its way to
/// another; one that does not come back is marked when the lease lapses.
async fn hand_off_leases(state: &LinkState) {
    let config = &state.config;
    let window =
        Duration::from_secs(crate::link::session::GO_AWAY_RETRY.1.into()) + config.lease_ttl();
    let lease_until =
        state.store.now() + chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    match state
        .store
        .session_renew(&config.replica_id, lease_until)
        .await
    {
        Ok(held) => tracing::info!(sessions = held.len(), ?window, "link.leases_handed_off"),
        Err(e) => tracing::warn!(error = %e, "link.lease_renew_failed"),
    }
    // No more redirects to a replica on its way out.
    if config.advertise_url.is_some()
        && let Err(e) = state.store.replica_remove(&config.replica_id).await
    {
        tracing::warn!(error = %e, "link.replica_remove_failed");
    }
}
