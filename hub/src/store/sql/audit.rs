//! The `audit_events` table: the audit log every change of desired state
//! writes in its own transaction.

use chrono::{DateTime, Utc};
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};

use super::codec::{corrupt, from_ms, ms};
use super::{SqlStore, Tx};
use crate::model::AuditEvent;
use crate::store::{NewAudit, Result};

pub(super) async fn insert_audit(
    store: &SqlStore,
    tx: &mut Tx,
    a: &NewAudit,
    now: DateTime<Utc>,
) -> Result<()> {
    let query = sqlx::query(
        "INSERT INTO audit_events (at, actor, action, namespace, target, result, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(ms(now))
    .bind(a.actor.clone())
    .bind(a.action.clone())
    .bind(a.namespace.clone())
    .bind(a.target.clone())
    .bind(a.result.clone())
    .bind(a.detail.clone());
    store.run_in(tx, query).await?;
    Ok(())
}

pub(super) async fn append_audit(store: &SqlStore, event: &NewAudit) -> Result<()> {
    let mut tx = store.begin().await?;
    insert_audit(store, &mut tx, event, Utc::now()).await?;
    store.commit(tx).await
}

pub(super) async fn list_audit(
    store: &SqlStore,
    namespace: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditEvent>> {
    const COLS: &str = "id, at, actor, action, namespace, target, result, detail";
    let rows = match namespace {
        Some(ns) => {
            let sql = format!(
                "SELECT {COLS} FROM audit_events WHERE namespace = $1 ORDER BY id DESC LIMIT $2"
            );
            sqlx::query(AssertSqlSafe(sql))
                .bind(ns.to_owned())
                .bind(limit)
                .fetch_all(store.reader())
                .await
        }
        None => {
            let sql = format!("SELECT {COLS} FROM audit_events ORDER BY id DESC LIMIT $1");
            sqlx::query(AssertSqlSafe(sql))
                .bind(limit)
                .fetch_all(store.reader())
                .await
        }
    }
    .map_err(|e| store.classify(e))?;
    rows.iter()
        .map(|r| {
            Ok(AuditEvent {
                id: r.try_get("id").map_err(corrupt("audit event"))?,
                at: from_ms(r.try_get("at").map_err(corrupt("audit event"))?),
                actor: r.try_get("actor").map_err(corrupt("audit event"))?,
                action: r.try_get("action").map_err(corrupt("audit event"))?,
                namespace: r.try_get("namespace").map_err(corrupt("audit event"))?,
                target: r.try_get("target").map_err(corrupt("audit event"))?,
                result: r.try_get("result").map_err(corrupt("audit event"))?,
                detail: r.try_get("detail").map_err(corrupt("audit event"))?,
            })
        })
        .collect()
}
