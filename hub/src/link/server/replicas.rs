//! This replica among the others: the record it publishes (advertised
//! address, tunnel ingress, session count) and the balancer that moves its
//! excess sessions to less loaded replicas.

use std::sync::Arc;

use crate::link::LinkState;

/// Publishes this replica's advertised link address (empty: it takes no
/// redirects), its tunnel ingress and its session count, with the lease
/// renewal: the others' view of it. Nothing when it has neither address.
pub(super) async fn publish_replica(state: &LinkState) {
    let tunnel_url = state.tunnel_url.get().cloned();
    if state.config.advertise_url.is_none() && tunnel_url.is_none() {
        return;
    }
    let record = crate::store::ReplicaRecord {
        replica_id: state.config.replica_id.clone(),
        advertise_url: state.config.advertise_url.clone().unwrap_or_default(),
        sessions: state.registry.len() as i64,
        heartbeat_at: state.store.now(),
        tunnel_url,
    };
    if let Err(e) = state.store.replica_heartbeat(&record).await {
        tracing::warn!(error = %e, "link.replica_publish_failed");
    }
}

/// Moves this replica's excess sessions to less loaded replicas, on a
/// jittered tick (see `balance.rs`): each moved spoke gets a GoAway
/// naming its new replica, and its lease is handed off to cover the move.
pub(super) async fn balancer(state: Arc<LinkState>) {
    let config = &state.config;
    let balance = &config.balance;
    loop {
        let wait = balance.jittered(rand::random::<f64>());
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let since = state.store.now()
            - chrono::Duration::from_std(config.replica_ttl()).unwrap_or(chrono::Duration::MAX);
        let live = match state.store.replicas_live(since).await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "link.store_error");
                continue;
            }
        };
        let loads: Vec<_> = live.iter().map(crate::link::replica_load).collect();
        let mine = state.registry.len();
        let targets = crate::link::balance::plan_moves(
            &config.replica_id,
            mine,
            &loads,
            balance,
            rand::random::<u32>() as usize,
        );
        if targets.is_empty() {
            continue;
        }
        let moved = state.registry.redirect(&targets);
        for (cluster, target) in &moved {
            tracing::info!(%cluster, %target, "link.session_redirected");
        }
        tracing::info!(
            replica = %config.replica_id,
            sessions = mine,
            replicas = loads.len(),
            moved = moved.len(),
            "link.rebalanced"
        );
    }
}
