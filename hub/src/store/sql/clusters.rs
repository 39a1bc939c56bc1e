//! The `clusters` table as the [`Store`](crate::store::Store) sees it:
//! upserted, listed and read by name; cordoned and drained.

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::AssertSqlSafe;
use uuid::Uuid;

use super::codec::{from_json, from_ms, get, ms, not_found, parse_enum, to_json};
use super::revisions::{REVISION_COLS, REVISION_FROM, revision_from_row};
use super::{SqlStore, Tx};
use crate::model::{
    AgentRevision, Cluster, ClusterCapacity, ConnectionState, Drain, ResourceAmounts,
};
use crate::store::{ClusterRecord, Effects, Result};

/// What the spoke's session writes (the upsert's columns).
const CLUSTER_SESSION_COLS: &str = "id, name, labels, capabilities, certificate_serials, \
     connection_state, last_seen, version, created_at";

/// The columns [`cluster_from_row`] reads.
pub(in crate::store) const CLUSTER_COLS: &str = "id, name, labels, capabilities, certificate_serials, \
     connection_state, last_seen, version, created_at, cordoned_at, drain_started_at, \
     drain_finished_at, drain_parallelism, drain_requested_by, capacity_nodes, \
     capacity_allocatable_cpu_millis, capacity_allocatable_memory_bytes, \
     capacity_free_cpu_millis, capacity_free_memory_bytes, capacity_reported_at";

pub(super) async fn upsert_cluster(store: &SqlStore, c: &ClusterRecord) -> Result<Cluster> {
    let now = Utc::now();
    let sql = format!(
        "INSERT INTO clusters ({CLUSTER_SESSION_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
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
        cordoned_at: get::<Option<i64>>(r, W, "cordoned_at")?.map(from_ms),
        drain: match get::<Option<i64>>(r, W, "drain_started_at")? {
            None => None,
            Some(started) => Some(Drain {
                parallelism: u32::try_from(
                    get::<Option<i64>>(r, W, "drain_parallelism")?.unwrap_or(1),
                )
                .unwrap_or(1),
                started_at: from_ms(started),
                finished_at: get::<Option<i64>>(r, W, "drain_finished_at")?.map(from_ms),
                progress: None,
                requested_by: get(r, W, "drain_requested_by")?,
            }),
        },
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

/// The revision phases that may still run a Harness: placed and not
/// finished.
const UNFINISHED: &str = "('pending', 'provisioning', 'preparing', 'waiting-ready', 'active', \
     'stopping')";

pub(super) async fn set_cordon(
    store: &SqlStore,
    name: &str,
    cordoned_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    fx: &Effects,
) -> Result<Cluster> {
    // Cordoning twice keeps the first time. Uncordoning ends a running
    // drain: its moves in flight finish, no new one starts (the cluster
    // takes placements again).
    let query = sqlx::query(
        "UPDATE clusters SET cordoned_at = CASE WHEN $1 IS NULL THEN NULL \
         ELSE COALESCE(cordoned_at, $1) END, drain_finished_at = CASE \
         WHEN $1 IS NULL AND drain_started_at IS NOT NULL AND drain_finished_at IS NULL \
         THEN $2 ELSE drain_finished_at END WHERE name = $3",
    )
    .bind(cordoned_at.map(ms))
    .bind(ms(now))
    .bind(name.to_owned());
    change_scheduling(store, name, query, now, fx).await
}

pub(super) async fn start_drain(
    store: &SqlStore,
    name: &str,
    parallelism: u32,
    requested_by: &str,
    now: DateTime<Utc>,
    fx: &Effects,
) -> Result<Cluster> {
    // A drain that still runs keeps its start (its moves count) and takes
    // the new parallelism; otherwise a new drain starts now.
    let query = sqlx::query(
        "UPDATE clusters SET cordoned_at = COALESCE(cordoned_at, $1), \
         drain_started_at = CASE WHEN drain_started_at IS NOT NULL AND drain_finished_at IS NULL \
         THEN drain_started_at ELSE $1 END, \
         drain_finished_at = NULL, drain_parallelism = $2, drain_requested_by = $3 \
         WHERE name = $4",
    )
    .bind(ms(now))
    .bind(i64::from(parallelism))
    .bind(requested_by.to_owned())
    .bind(name.to_owned());
    change_scheduling(store, name, query, now, fx).await
}

/// Runs `update` of cluster `name`'s cordon or drain with its effects
/// and its watch event, in one transaction; the cluster as it is after.
async fn change_scheduling(
    store: &SqlStore,
    name: &str,
    update: super::run::Query<'_>,
    now: DateTime<Utc>,
    fx: &Effects,
) -> Result<Cluster> {
    let mut tx = store.begin().await?;
    if store.run_in(&mut tx, update).await? == 0 {
        return Err(not_found("cluster", name));
    }
    scheduling_event(store, &mut tx, name, now).await?;
    store.commit_with_effects(tx, fx, now).await?;
    store.events_committed();
    get_cluster(store, name).await
}

pub(super) async fn finish_drain(
    store: &SqlStore,
    name: &str,
    started_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let query = sqlx::query(
        "UPDATE clusters SET drain_finished_at = $1 \
         WHERE name = $2 AND drain_started_at = $3 AND drain_finished_at IS NULL",
    )
    .bind(ms(now))
    .bind(name.to_owned())
    .bind(ms(started_at));
    let mut tx = store.begin().await?;
    if store.run_in(&mut tx, query).await? == 0 {
        store.commit(tx).await?;
        return Ok(false);
    }
    scheduling_event(store, &mut tx, name, now).await?;
    store.commit(tx).await?;
    store.events_committed();
    Ok(true)
}

/// Records cluster `name`'s scheduling as it is in `tx` on the watch
/// stream (`cluster.scheduling`), so views update without polling.
async fn scheduling_event(
    store: &SqlStore,
    tx: &mut Tx,
    name: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    use crate::model::event::{EventBody, SchedulingEvent};
    let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE name = $1");
    let query = sqlx::query(AssertSqlSafe(sql)).bind(name.to_owned());
    let cluster = cluster_from_row(&store.one_in(tx, query, "cluster", name).await?)?;
    let event = crate::store::NewEvent {
        namespace_id: None,
        cluster: Some(cluster.name.clone()),
        body: EventBody::ClusterScheduling(SchedulingEvent {
            draining: cluster.draining(),
            cordoned_at: cluster.cordoned_at,
        }),
    };
    store.insert_event(tx, &event, now).await?;
    Ok(())
}

pub(super) async fn drain_revisions(
    store: &SqlStore,
    name: &str,
    since: DateTime<Utc>,
) -> Result<Vec<AgentRevision>> {
    // The Agents concerned: one of their revisions still runs (or may)
    // on the cluster, or one moved away from it since the drain began.
    let sql = format!(
        "SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE r.agent_id IN (\
         SELECT agent_id FROM agent_revisions WHERE (resolved_cluster = $1 AND phase IN {UNFINISHED}) \
         OR (moved_from = $1 AND created_at >= $2)) \
         AND (r.phase IN {UNFINISHED} OR (r.moved_from = $1 AND r.created_at >= $2)) \
         ORDER BY n.name, a.name, r.number"
    );
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(name.to_owned())
        .bind(ms(since));
    store.read_all(query, revision_from_row).await
}
