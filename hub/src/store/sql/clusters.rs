//! The `clusters` table as the [`Store`](crate::store::Store) sees it:
//! upserted, listed and read by name.

use chrono::Utc;
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::SqlStore;
use super::codec::{from_json, from_ms, get, ms, parse_enum, to_json};
use crate::model::{Cluster, ClusterCapacity, ConnectionState, ResourceAmounts};
use crate::store::{ClusterRecord, Result};

/// The columns an upsert writes.
const CLUSTER_WRITE_COLS: &str = "id, name, labels, capabilities, certificate_serials, \
     connection_state, last_seen, version, created_at";

/// The columns [`cluster_from_row`] reads.
pub(in crate::store) const CLUSTER_COLS: &str = "id, name, labels, capabilities, certificate_serials, \
     connection_state, last_seen, version, created_at, capacity_nodes, \
     capacity_allocatable_cpu_millis, capacity_allocatable_memory_bytes, \
     capacity_free_cpu_millis, capacity_free_memory_bytes, capacity_reported_at";

pub(super) async fn upsert_cluster(store: &SqlStore, c: &ClusterRecord) -> Result<Cluster> {
    let now = Utc::now();
    let sql = format!(
        "INSERT INTO clusters ({CLUSTER_WRITE_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (name) DO UPDATE SET labels = $3, capabilities = $4, \
         certificate_serials = $5, connection_state = $6, last_seen = $7, version = $8 \
         RETURNING {CLUSTER_COLS}"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(Uuid::now_v7().to_string())
        .bind(c.name.clone())
        .bind(to_json(&c.labels)?)
        .bind(to_json(&c.capabilities)?)
        .bind(to_json(&c.certificate_serials)?)
        .bind(c.connection_state.as_str())
        .bind(c.last_seen.map(ms))
        .bind(c.version.clone())
        .bind(ms(now))
        .fetch_one(&store.pool)
        .await
        .map_err(|e| store.classify(e))?;
    cluster_from_row(&row)
}

pub(super) async fn list_clusters(store: &SqlStore) -> Result<Vec<Cluster>> {
    let sql = format!("SELECT {CLUSTER_COLS} FROM clusters ORDER BY name");
    let query = sqlx::query(AssertSqlSafe(sql));
    store.read_all(query, cluster_from_row).await
}

pub(super) async fn get_cluster(store: &SqlStore, name: &str) -> Result<Cluster> {
    let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE name = $1");
    store
        .read_by_key(sql, name, cluster_from_row, "cluster")
        .await
}

pub(in crate::store) fn cluster_from_row(r: &AnyRow) -> Result<Cluster> {
    const W: &str = "cluster";
    let state: String = get(r, W, "connection_state")?;
    let capabilities: Vec<String> = from_json(W, &get::<String>(r, W, "capabilities")?)?;
    Ok(Cluster {
        id: get(r, W, "id")?,
        name: get(r, W, "name")?,
        labels: from_json(W, &get::<String>(r, W, "labels")?)?,
        provider: clawfed_proto::capability::sandbox_driver_of(&capabilities).map(str::to_owned),
        capabilities,
        certificate_serials: from_json(W, &get::<String>(r, W, "certificate_serials")?)?,
        connection_state: parse_enum(W, &state, ConnectionState::parse)?,
        last_seen: get::<Option<i64>>(r, W, "last_seen")?.map(from_ms),
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        outbox_depth: None,
        certificate_expires_at: None,
        capacity: capacity_from_row(r)?,
    })
}

/// The cluster's last capacity report, if it made one.
fn capacity_from_row(r: &AnyRow) -> Result<Option<ClusterCapacity>> {
    const W: &str = "cluster";
    let Some(at) = get::<Option<i64>>(r, W, "capacity_reported_at")? else {
        return Ok(None);
    };
    let n = |col: &str| -> Result<i64> { Ok(get::<Option<i64>>(r, W, col)?.unwrap_or(0)) };
    Ok(Some(ClusterCapacity {
        nodes: u32::try_from(n("capacity_nodes")?).unwrap_or(u32::MAX),
        allocatable: ResourceAmounts {
            cpu_millis: n("capacity_allocatable_cpu_millis")?,
            memory_bytes: n("capacity_allocatable_memory_bytes")?,
        },
        free: ResourceAmounts {
            cpu_millis: n("capacity_free_cpu_millis")?,
            memory_bytes: n("capacity_free_memory_bytes")?,
        },
        reported_at: from_ms(at),
    }))
}
