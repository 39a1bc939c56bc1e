//! Failover with fencing as the store keeps it: each cluster's newest
//! execution lease renewal and the targets its spoke fenced, and the
//! revisions a failover scan looks at.

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::SqlStore;
use super::codec::{from_ms, get, ms};
use super::revisions::{REVISION_COLS, REVISION_FROM, revision_from_row};
use crate::store::{FailoverCandidate, Result};

/// Records the renewal received at `at` (the database's clock).
pub(in crate::store) async fn renew_execution_lease(
    store: &SqlStore,
    cluster_id: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    let query = sqlx::query(
        "UPDATE clusters SET lease_renewed_at = $1, last_seen = $1 \
         WHERE id = $2 AND revoked_at IS NULL",
    )
    .bind(ms(at))
    .bind(cluster_id.to_owned());
    store.run(query).await?;
    Ok(())
}

pub(in crate::store) async fn set_fenced_targets(
    store: &SqlStore,
    cluster_id: &str,
    targets: &[String],
) -> Result<()> {
    let json = (!targets.is_empty())
        .then(|| serde_json::to_string(targets).unwrap_or_else(|_| "[]".into()));
    // A session's first heartbeat reports its list even when unchanged:
    // no row is written then.
    let query = sqlx::query(
        "UPDATE clusters SET fenced_targets = $1 \
         WHERE id = $2 AND COALESCE(fenced_targets, '') <> COALESCE($1, '')",
    )
    .bind(json)
    .bind(cluster_id.to_owned());
    store.run(query).await?;
    Ok(())
}

pub(super) async fn execution_lease(
    store: &SqlStore,
    cluster: &str,
) -> Result<Option<DateTime<Utc>>> {
    let query = sqlx::query("SELECT lease_renewed_at FROM clusters WHERE name = $1")
        .bind(cluster.to_owned());
    Ok(store
        .read_optional(query, |r| {
            get::<Option<i64>>(r, "clusters", "lease_renewed_at")
        })
        .await?
        .flatten()
        .map(from_ms))
}

pub(super) async fn failover_candidates(
    store: &SqlStore,
    lapsed_before: DateTime<Utc>,
    retry_before: DateTime<Utc>,
) -> Result<Vec<FailoverCandidate>> {
    // Active revisions of running failover-enabled Agents on a cluster
    // that reported a fence, or whose lease may have lapsed (no renewal
    // since `lapsed_before`, the shortest period's cut-off; the exact
    // period of each is the caller's to apply). The active revision is the
    // Agent's latest, or the latest is a move of it off that cluster that
    // failed before `retry_before` (for example: no cluster took it).
    let sql = format!(
        "SELECT {REVISION_COLS}, n.id AS namespace_id, a.latest_revision, \
         c.lease_renewed_at, c.fenced_targets \
         FROM {REVISION_FROM} JOIN clusters c ON c.name = r.resolved_cluster \
         LEFT JOIN agent_revisions l ON l.agent_id = a.id AND l.number = a.latest_revision \
         WHERE r.failover_after_seconds IS NOT NULL AND r.phase = 'active' \
         AND (a.latest_revision = r.number OR (l.phase = 'failed' \
              AND l.moved_from = r.resolved_cluster AND l.updated_at < $2)) \
         AND a.desired_state = 'running' \
         AND a.deleted_at IS NULL AND c.revoked_at IS NULL \
         AND (c.fenced_targets IS NOT NULL OR c.lease_renewed_at IS NULL \
              OR c.lease_renewed_at < $1) \
         ORDER BY r.created_at"
    );
    let query = sqlx::query(AssertSqlSafe(sql))
        .bind(ms(lapsed_before))
        .bind(ms(retry_before));
    store
        .read_all(query, |r| {
            const W: &str = "failover candidate";
            let fenced: Option<String> = get(r, W, "fenced_targets")?;
            Ok(FailoverCandidate {
                revision: revision_from_row(r)?,
                latest_revision: get(r, W, "latest_revision")?,
                namespace_id: get(r, W, "namespace_id")?,
                lease_renewed_at: get::<Option<i64>>(r, W, "lease_renewed_at")?.map(from_ms),
                fenced_targets: fenced
                    .and_then(|j| serde_json::from_str(&j).ok())
                    .unwrap_or_default(),
            })
        })
        .await
}
