//! Tenant quotas: what a tenant has in use, and the check a write makes in
//! its own transaction (`Effects::quotas`).
//!
//! The check counts after the write. On PostgreSQL it first locks the
//! tenant's row (`FOR NO KEY UPDATE`, which does not conflict with the
//! key-share locks the write's foreign keys took), so the writes of one
//! tenant that carry a quota check pass it one at a time, and each counts
//! under READ COMMITTED what those before it committed. SQLite's
//! transactions are `BEGIN IMMEDIATE`: one writer at a time already.

use chrono::{DateTime, Utc};
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// fragments defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};

use super::codec::{ms, not_found};
use super::{SqlStore, Tx};
use crate::quota::{QuotaExceeded, QuotaKind, QuotaUsage};
use crate::store::{Backend, QuotaCheck, Result};

/// How long `revisionsPerHour` looks back.
const REVISION_WINDOW: chrono::Duration = chrono::Duration::hours(1);

/// The tenant's Agents not deleted.
const AGENTS: &str = "SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
     WHERE n.name = $1 AND a.deleted_at IS NULL";

const RUNNING_AGENTS: &str = "SELECT COUNT(*) FROM agents a \
     JOIN namespaces n ON n.id = a.namespace_id \
     WHERE n.name = $1 AND a.deleted_at IS NULL AND a.desired_state = 'running'";

/// Revisions its deploys and rollbacks made since $2 (a hub's moves,
/// `moved_from` set, are the hub's, not the tenant's); deleted Agents'
/// kept revisions count too, so deleting does not reset the window.
const REVISIONS_SINCE: &str = "SELECT COUNT(*) FROM agent_revisions r \
     JOIN agents a ON a.id = r.agent_id JOIN namespaces n ON n.id = a.namespace_id \
     WHERE n.name = $1 AND r.moved_from IS NULL AND r.created_at >= $2";

const CREDENTIALS: &str = "SELECT COUNT(*) FROM agent_credentials c \
     JOIN agents a ON a.id = c.agent_id JOIN namespaces n ON n.id = a.namespace_id \
     WHERE n.name = $1 AND a.deleted_at IS NULL";

fn count_sql(kind: QuotaKind) -> &'static str {
    match kind {
        QuotaKind::Agents => AGENTS,
        QuotaKind::RunningAgents => RUNNING_AGENTS,
        QuotaKind::RevisionsPerHour => REVISIONS_SINCE,
        QuotaKind::Credentials => CREDENTIALS,
    }
}

pub(super) async fn quota_usage(
    store: &SqlStore,
    namespace: &str,
    now: DateTime<Utc>,
) -> Result<QuotaUsage> {
    // One statement: the four counts of one snapshot.
    let sql = format!(
        "SELECT ({AGENTS}), ({RUNNING_AGENTS}), ({REVISIONS_SINCE}), ({CREDENTIALS}), \
         (SELECT COUNT(*) FROM namespaces WHERE name = $1)"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(namespace.to_owned())
        .bind(ms(now - REVISION_WINDOW))
        .fetch_one(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    if row.get::<i64, _>(4) == 0 {
        return Err(not_found("namespace", namespace));
    }
    Ok(QuotaUsage {
        agents: row.get(0),
        running_agents: row.get(1),
        revisions_last_hour: row.get(2),
        credentials: row.get(3),
    })
}

/// Refuses (and so rolls back) the write in `tx` when it took the tenant
/// past `check`'s limit.
pub(super) async fn check(
    store: &SqlStore,
    tx: &mut Tx,
    check: &QuotaCheck,
    now: DateTime<Utc>,
) -> Result<()> {
    if store.backend == Backend::Postgres {
        let lock = sqlx::query("SELECT id FROM namespaces WHERE name = $1 FOR NO KEY UPDATE")
            .bind(check.namespace.clone());
        store
            .one_in(tx, lock, "namespace", &check.namespace)
            .await?;
    }
    let mut query = sqlx::query(count_sql(check.kind)).bind(check.namespace.clone());
    if check.kind == QuotaKind::RevisionsPerHour {
        query = query.bind(ms(now - REVISION_WINDOW));
    }
    let used: i64 = store.row_in(tx, query).await?.map_or(0, |row| row.get(0));
    if used > check.limit {
        return Err(QuotaExceeded {
            kind: check.kind,
            namespace: check.namespace.clone(),
            limit: check.limit,
            // A write adds at most one of each kind.
            used: used - 1,
        }
        .into());
    }
    Ok(())
}
