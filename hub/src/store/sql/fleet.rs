//! Counts across tables: the fleet summary, the staleness of in-progress
//! revision phases, and the clusters a tenant's revisions are placed on.

use std::time::Duration;

use chrono::{DateTime, Utc};
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in these files, never input.
use sqlx::{AssertSqlSafe, Row};

use super::SqlStore;
use super::codec::ms;
use super::revisions::REVISION_FROM;
use crate::model::{FleetSummary, RevisionPhase};
use crate::store::{PhaseStaleness, Result};

/// Names of the clusters the revisions of namespace `$1` are placed on.
const PLACED: &str = "SELECT DISTINCT r.resolved_cluster FROM agent_revisions r \
     JOIN agents a ON a.id = r.agent_id JOIN namespaces n ON n.id = a.namespace_id \
     WHERE n.name = $1 AND r.resolved_cluster IS NOT NULL";
/// Whether Agent `a` has a revision that actually runs. By phase, not by
/// `a.active_revision`: that pointer moves to a new revision before it
/// enters `active` (its predecessor still serves) and is cleared on a stop
/// before the Harness is gone.
const ACTIVE_REVISION: &str =
    "SELECT 1 FROM agent_revisions ar WHERE ar.agent_id = a.id AND ar.phase = 'active'";

pub(super) async fn fleet_summary(
    store: &SqlStore,
    namespace: Option<&str>,
) -> Result<FleetSummary> {
    // `$1 IS NULL OR …` keeps one statement for both scopes. A tenant's
    // clusters are those its revisions are placed on; its work items are
    // matched by namespace id, so a re-created namespace of the same name
    // does not count the old one's.
    let ns = namespace.map(str::to_owned);
    let sql = format!(
        "SELECT \
           (SELECT COUNT(*) FROM namespaces WHERE $1 IS NULL OR name = $1), \
           (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
              WHERE ($1 IS NULL OR n.name = $1) AND a.deleted_at IS NULL), \
           (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
              WHERE ($1 IS NULL OR n.name = $1) AND a.desired_state = 'running' \
              AND a.deleted_at IS NULL), \
           (SELECT COUNT(*) FROM clusters WHERE $1 IS NULL OR name IN ({PLACED})), \
           (SELECT COUNT(*) FROM clusters WHERE ($1 IS NULL OR name IN ({PLACED})) \
              AND connection_state = 'online'), \
           (SELECT COUNT(*) FROM work_items WHERE ($1 IS NULL OR namespace_id IN \
              (SELECT id FROM namespaces WHERE name = $1)) \
              AND state IN ('pending', 'claimed')), \
           (SELECT COUNT(*) FROM work_items WHERE ($1 IS NULL OR namespace_id IN \
              (SELECT id FROM namespaces WHERE name = $1)) \
              AND state = 'failed'), \
           (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
              WHERE ($1 IS NULL OR n.name = $1) AND a.deleted_at IS NULL \
              AND EXISTS ({ACTIVE_REVISION})), \
           (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
              WHERE ($1 IS NULL OR n.name = $1) AND a.desired_state = 'running' \
              AND a.deleted_at IS NULL AND NOT EXISTS ({ACTIVE_REVISION}))"
    );
    let counts = sqlx::query(AssertSqlSafe(sql))
        .bind(ns.clone())
        .fetch_one(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    let phases = sqlx::query(AssertSqlSafe(format!(
        "SELECT r.phase, COUNT(*) FROM {REVISION_FROM} WHERE $1 IS NULL OR n.name = $1 \
         GROUP BY r.phase"
    )))
    .bind(ns)
    .fetch_all(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    let agents: i64 = counts.get(1);
    let desired_running: i64 = counts.get(2);
    Ok(FleetSummary {
        namespaces: counts.get(0),
        agents,
        agents_running: counts.get(7),
        agents_stopped: agents - desired_running,
        agents_desired_running: desired_running,
        agents_not_running: counts.get(8),
        revisions_by_phase: phases
            .iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect(),
        clusters: counts.get(3),
        clusters_online: counts.get(4),
        work_pending: counts.get(5),
        work_failed: counts.get(6),
    })
}

pub(super) async fn revision_staleness(
    store: &SqlStore,
    now: DateTime<Utc>,
) -> Result<Vec<PhaseStaleness>> {
    let in_progress = [
        RevisionPhase::Pending,
        RevisionPhase::Provisioning,
        RevisionPhase::Preparing,
        RevisionPhase::WaitingReady,
        RevisionPhase::Stopping,
    ];
    let list = in_progress
        .iter()
        .map(|p| format!("'{}'", p.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT phase, COUNT(*), MIN(updated_at) FROM agent_revisions \
         WHERE phase IN ({list}) GROUP BY phase ORDER BY phase"
    )))
    .fetch_all(&store.pool)
    .await
    .map_err(|e| store.classify(e))?;
    Ok(rows
        .iter()
        .map(|r| PhaseStaleness {
            phase: r.get(0),
            revisions: r.get(1),
            oldest_update_age: Duration::from_millis(
                u64::try_from(ms(now) - r.get::<i64, _>(2)).unwrap_or(0),
            ),
        })
        .collect())
}

pub(super) async fn placed_clusters(store: &SqlStore, namespace: &str) -> Result<Vec<String>> {
    let sql = format!("{PLACED} ORDER BY 1");
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .fetch_all(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
}
