//! The `audit_events` table: the audit log every change of desired state
//! writes in its own transaction, and its stream's cursor (`seq`), stamped
//! on committed rows by [`sequence_audit`] (migration 0024 says why).

use chrono::{DateTime, Utc};
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};

use super::codec::{corrupt, from_ms, ms};
use super::{SqlStore, Tx};
use crate::model::AuditEvent;
use crate::store::{AuditSequenced, NewAudit, Result};

const COLS: &str = "id, seq, at, actor, action, namespace, target, result, detail";

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
    store.commit(tx).await?;
    store.store_signals().audit.notify();
    Ok(())
}

/// Gives committed rows without a cursor the next cursors of `audit_head`,
/// oldest id first, at most `limit` of them, in one transaction that holds
/// the head row's lock (SQLite: the writer lock) until it commits. Rows a
/// transaction commits later get later numbers, whatever their ids.
pub(super) async fn sequence_audit(store: &SqlStore, limit: i64) -> Result<AuditSequenced> {
    // The common case, nothing to stamp, takes no lock and writes nothing.
    let pending = sqlx::query("SELECT 1 FROM audit_events WHERE seq IS NULL LIMIT 1")
        .fetch_optional(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    if pending.is_none() {
        return Ok(AuditSequenced {
            head: audit_head(store).await?,
            stamped: 0,
        });
    }
    let mut tx = store.begin().await?;
    let head: i64 = store
        .one_in(
            &mut tx,
            sqlx::query("UPDATE audit_head SET seq = seq WHERE id = 1 RETURNING seq"),
            "audit head",
            "1",
        )
        .await?
        .try_get(0)
        .map_err(corrupt("audit head"))?;
    // Read after the head's lock was taken: under READ COMMITTED this
    // statement sees what a stamper before this one committed.
    let stamp = sqlx::query(
        "UPDATE audit_events SET seq = $1 + todo.n FROM (\
           SELECT id, row_number() OVER (ORDER BY id) AS n FROM audit_events \
           WHERE seq IS NULL ORDER BY id LIMIT $2) AS todo \
         WHERE audit_events.id = todo.id",
    )
    .bind(head)
    .bind(limit);
    let stamped = store.run_in(&mut tx, stamp).await?;
    let head = head + stamped as i64;
    if stamped > 0 {
        let query = sqlx::query("UPDATE audit_head SET seq = $1 WHERE id = 1").bind(head);
        store.run_in(&mut tx, query).await?;
    }
    store.commit(tx).await?;
    Ok(AuditSequenced { head, stamped })
}

/// The newest cursor given out (0: none).
pub(super) async fn audit_head(store: &SqlStore) -> Result<i64> {
    let row = sqlx::query("SELECT seq FROM audit_head WHERE id = 1")
        .fetch_one(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    row.try_get(0).map_err(corrupt("audit head"))
}

/// Sequenced events after `cursor`, in cursor order, at most `limit`;
/// `namespace` restricts to one tenant's.
pub(super) async fn audit_after(
    store: &SqlStore,
    cursor: i64,
    namespace: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditEvent>> {
    let rows = match namespace {
        Some(ns) => {
            let sql = format!(
                "SELECT {COLS} FROM audit_events WHERE namespace = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3"
            );
            sqlx::query(AssertSqlSafe(sql))
                .bind(ns.to_owned())
                .bind(cursor)
                .bind(limit)
                .fetch_all(store.reader())
                .await
        }
        None => {
            let sql =
                format!("SELECT {COLS} FROM audit_events WHERE seq > $1 ORDER BY seq LIMIT $2");
            sqlx::query(AssertSqlSafe(sql))
                .bind(cursor)
                .bind(limit)
                .fetch_all(store.reader())
                .await
        }
    }
    .map_err(|e| store.classify(e))?;
    rows.iter().map(event_from_row).collect()
}

pub(super) async fn list_audit(
    store: &SqlStore,
    namespace: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditEvent>> {
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
    rows.iter().map(event_from_row).collect()
}

fn event_from_row(r: &sqlx::any::AnyRow) -> Result<AuditEvent> {
    Ok(AuditEvent {
        id: r.try_get("id").map_err(corrupt("audit event"))?,
        cursor: r.try_get("seq").map_err(corrupt("audit event"))?,
        at: from_ms(r.try_get("at").map_err(corrupt("audit event"))?),
        actor: r.try_get("actor").map_err(corrupt("audit event"))?,
        action: r.try_get("action").map_err(corrupt("audit event"))?,
        namespace: r.try_get("namespace").map_err(corrupt("audit event"))?,
        target: r.try_get("target").map_err(corrupt("audit event"))?,
        result: r.try_get("result").map_err(corrupt("audit event"))?,
        detail: r.try_get("detail").map_err(corrupt("audit event"))?,
    })
}
