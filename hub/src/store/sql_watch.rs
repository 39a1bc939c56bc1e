//! [`WatchStore`] over the shared SQL (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::sql::{SqlStore, Tx, from_ms, ms};
use super::watch::{EventBounds, NewEvent, WatchStore};
use super::{Result, StoreError};
use crate::model::event::{EventBody, WatchEvent};

const COLS: &str = "seq, at, namespace_id, namespace, cluster, body";

fn event_from_row(r: &AnyRow) -> Result<WatchEvent> {
    let corrupt = |detail: String| StoreError::Corrupt {
        what: "watch event",
        detail,
    };
    let get_err = |e: sqlx::Error| corrupt(e.to_string());
    let body: String = r.try_get("body").map_err(get_err)?;
    let body: EventBody = serde_json::from_str(&body).map_err(|e| corrupt(e.to_string()))?;
    Ok(WatchEvent {
        cursor: r.try_get("seq").map_err(get_err)?,
        at: from_ms(r.try_get("at").map_err(get_err)?),
        namespace_id: r.try_get("namespace_id").map_err(get_err)?,
        namespace: r.try_get("namespace").map_err(get_err)?,
        cluster: r.try_get("cluster").map_err(get_err)?,
        body,
    })
}

impl SqlStore {
    /// Appends `event` inside `tx`; the caller commits and then raises
    /// the `events` signal ([`SqlStore::events_committed`]).
    pub(super) async fn insert_event(
        &self,
        tx: &mut Tx,
        event: &NewEvent,
        now: DateTime<Utc>,
    ) -> Result<i64> {
        // The head row's lock is held until commit: the next writer waits,
        // so sequences commit in order and a rollback returns its number.
        let seq: i64 =
            sqlx::query("UPDATE watch_head SET seq = seq + 1 WHERE id = 1 RETURNING seq")
                .fetch_one(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?
                .get(0);
        let body = serde_json::to_string(&event.body).map_err(|e| StoreError::Corrupt {
            what: "watch event",
            detail: e.to_string(),
        })?;
        let query = sqlx::query(
            "INSERT INTO watch_events (seq, at, kind, namespace_id, namespace, cluster, body) \
             VALUES ($1, $2, $3, $4, (SELECT name FROM namespaces WHERE id = $4), $5, $6)",
        )
        .bind(seq)
        .bind(ms(now))
        .bind(event.body.kind())
        .bind(event.namespace_id.clone())
        .bind(event.cluster.clone())
        .bind(body);
        self.run_in(tx, query).await?;
        Ok(seq)
    }

    /// Wakes the watch feed after a commit that appended events.
    pub(super) fn events_committed(&self) {
        self.store_signals().events.notify();
    }
}

#[async_trait]
impl WatchStore for SqlStore {
    async fn append_event(&self, event: &NewEvent) -> Result<i64> {
        let mut tx = self.begin().await?;
        let seq = self.insert_event(&mut tx, event, Utc::now()).await?;
        self.commit(tx).await?;
        self.events_committed();
        Ok(seq)
    }

    async fn events_after(&self, cursor: i64, limit: i64) -> Result<Vec<WatchEvent>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM watch_events WHERE seq > $1 ORDER BY seq LIMIT $2"
        )))
        .bind(cursor)
        .bind(limit)
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter().map(event_from_row).collect()
    }

    async fn event_bounds(&self) -> Result<EventBounds> {
        let row = sqlx::query(
            "SELECT (SELECT MIN(seq) FROM watch_events), \
             (SELECT seq FROM watch_head WHERE id = 1)",
        )
        .fetch_one(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        Ok(EventBounds {
            oldest: row.try_get(0).map_err(|e| self.classify(e))?,
            head: row.try_get(1).map_err(|e| self.classify(e))?,
        })
    }

    async fn trim_events(&self, keep: i64) -> Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM watch_events WHERE seq <= (SELECT seq FROM watch_head WHERE id = 1) - $1",
        )
        .bind(keep.max(0))
        .execute(self.pool())
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected())
    }
}
