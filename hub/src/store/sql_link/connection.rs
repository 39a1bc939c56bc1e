//! A cluster's connection state as the link records it (with its watch
//! event when it changes), and clusters found stale marked offline.

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};

use super::SqlStore;
use crate::model::{Cluster, ConnectionState};
use crate::store::sql::{CLUSTER_COLS, cluster_from_row, from_ms, ms};
use crate::store::{Result, SpokeHello};
use clawfed_proto::capacity::Capacity;

pub(super) async fn get_cluster_by_id(store: &SqlStore, id: &str) -> Result<Cluster> {
    let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE id = $1");
    store
        .read_by_key(sql, id, cluster_from_row, "cluster")
        .await
}

pub(super) async fn set_connection_state(
    store: &SqlStore,
    cluster_id: &str,
    state: ConnectionState,
    last_seen: DateTime<Utc>,
    hello: Option<SpokeHello<'_>>,
) -> Result<()> {
    let (version, capabilities, labels) = match hello {
        Some(h) => (
            Some(h.version.to_owned()),
            Some(serde_json::to_string(h.capabilities).unwrap_or_else(|_| "[]".into())),
            Some(serde_json::to_string(h.labels).unwrap_or_else(|_| "{}".into())),
        ),
        None => (None, None, None),
    };
    // With its watch event in one transaction: a change of state, or a
    // Hello that changes the version, capabilities or labels, is an event; a
    // heartbeat's last_seen is not, nor a Hello that changes nothing (a
    // spoke moving to another replica while its cluster stays online:
    // the event's sequence is one row every writer waits for, and a
    // failover would queue thousands of them for nothing).
    let mut tx = store.begin().await?;
    let query = sqlx::query(
        "SELECT connection_state, version, capabilities, labels FROM clusters WHERE id = $1",
    )
    .bind(cluster_id.to_owned());
    type Before = (String, Option<String>, Option<String>, Option<String>);
    let before: Option<Before> = store
        .row_in(&mut tx, query)
        .await?
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)));
    let hello_changes = match (&before, &version, &capabilities, &labels) {
        (Some((_, v0, c0, l0)), Some(v), Some(c), Some(l)) => {
            v0.as_deref() != Some(v.as_str())
                || c0.as_deref() != Some(c.as_str())
                || l0.as_deref() != Some(l.as_str())
        }
        _ => false,
    };
    let query = sqlx::query(
        "UPDATE clusters SET connection_state = $1, last_seen = $2, \
         version = COALESCE($3, version), capabilities = COALESCE($4, capabilities), \
         labels = COALESCE($5, labels) \
         WHERE id = $6 AND revoked_at IS NULL",
    )
    .bind(state.as_str())
    .bind(ms(last_seen))
    .bind(version)
    .bind(capabilities)
    .bind(labels)
    .bind(cluster_id.to_owned());
    let updated = store.run_in(&mut tx, query).await?;
    let changed = before.as_ref().map(|b| b.0.as_str()) != Some(state.as_str());
    let event = updated == 1 && (changed || hello_changes);
    if event {
        store
            .insert_cluster_event(&mut tx, cluster_id, Utc::now())
            .await?;
    }
    store.commit(tx).await?;
    if event {
        store.events_committed();
    }
    Ok(())
}

pub(super) async fn set_cluster_capacity(
    store: &SqlStore,
    cluster_id: &str,
    c: Capacity,
    at: DateTime<Utc>,
) -> Result<()> {
    let query = sqlx::query(
        "UPDATE clusters SET capacity_nodes = $1, capacity_allocatable_cpu_millis = $2, \
         capacity_allocatable_memory_bytes = $3, capacity_free_cpu_millis = $4, \
         capacity_free_memory_bytes = $5, capacity_reported_at = $6 WHERE id = $7",
    )
    .bind(i64::from(c.nodes))
    .bind(c.allocatable.cpu_millis)
    .bind(c.allocatable.memory_bytes)
    .bind(c.free.cpu_millis)
    .bind(c.free.memory_bytes)
    .bind(ms(at))
    .bind(cluster_id.to_owned());
    store.run(query).await?;
    Ok(())
}

pub(super) async fn mark_stale_offline(store: &SqlStore, before: DateTime<Utc>) -> Result<u64> {
    let mut tx = store.begin().await?;
    let stale: Vec<String> = sqlx::query(
        "SELECT id FROM clusters WHERE connection_state = 'online' AND revoked_at IS NULL \
         AND (last_seen IS NULL OR last_seen < $1)",
    )
    .bind(ms(before))
    .fetch_all(&mut *tx)
    .await
    .map_err(|e| store.classify(e))?
    .iter()
    .map(|r| r.get(0))
    .collect();
    let mut marked = 0;
    for id in &stale {
        marked += store
            .run_in(
                &mut tx,
                sqlx::query(
                    "UPDATE clusters SET connection_state = 'offline' \
             WHERE id = $1 AND connection_state = 'online' AND revoked_at IS NULL",
                )
                .bind(id.clone()),
            )
            .await?;
        store.insert_cluster_event(&mut tx, id, Utc::now()).await?;
    }
    store.commit(tx).await?;
    if !stale.is_empty() {
        store.events_committed();
    }
    Ok(marked)
}

// A method, not a function: `sql_session.rs` calls it too, and no store
// trait has a method of its name.
impl SqlStore {
    /// Appends a watch event with the cluster's state as `tx` sees it:
    /// connected, offline or revoked, with last seen, version,
    /// capabilities and the expiry of its newest unrevoked certificate.
    pub(in crate::store) async fn insert_cluster_event(
        &self,
        tx: &mut crate::store::sql::Tx,
        cluster_id: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        use crate::model::event::{ClusterEvent, EventBody};
        let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(cluster_id.to_owned())
            .fetch_one(&mut **tx)
            .await
            .map_err(|e| self.classify(e))?;
        let cluster = cluster_from_row(&row)?;
        let expires: Option<i64> = sqlx::query(
            "SELECT MAX(not_after) FROM cluster_certificates \
             WHERE cluster_id = $1 AND revoked_at IS NULL",
        )
        .bind(cluster_id.to_owned())
        .fetch_one(&mut **tx)
        .await
        .map_err(|e| self.classify(e))?
        .try_get(0)
        .map_err(|e| self.classify(e))?;
        let state = ClusterEvent {
            state: cluster.connection_state,
            last_seen: cluster.last_seen,
            version: cluster.version,
            capabilities: cluster.capabilities,
            certificate_expires_at: expires.map(from_ms),
        };
        let body = match cluster.connection_state {
            ConnectionState::Online => EventBody::ClusterConnected(state),
            ConnectionState::Revoked => EventBody::ClusterRevoked(state),
            _ => EventBody::ClusterOffline(state),
        };
        let event = crate::store::NewEvent {
            namespace_id: None,
            cluster: Some(cluster.name),
            body,
        };
        self.insert_event(tx, &event, now).await?;
        Ok(())
    }
}
