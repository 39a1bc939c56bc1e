//! The durable per-cluster outbox: puts and acks (through the group
//! commit), pending items, what was acked, resends and depth.

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};

use super::{SqlStore, mismatch};
use crate::store::group::{LinkWrite, Written};
use crate::store::link::{OutboxItem, OutboxSummary};
use crate::store::sql::{from_ms, ms};
use crate::store::{Result, StoreError};

pub(in crate::store) const OUTBOX_COLS: &str =
    "cluster_id, sequence, target, kind, generation, spec, created_at";

fn outbox_from_row(r: &sqlx::any::AnyRow) -> Result<OutboxItem> {
    let corrupt = |e: sqlx::Error| StoreError::Corrupt {
        what: "outbox item",
        detail: e.to_string(),
    };
    Ok(OutboxItem {
        cluster_id: r.try_get("cluster_id").map_err(corrupt)?,
        sequence: r.try_get("sequence").map_err(corrupt)?,
        target: r.try_get("target").map_err(corrupt)?,
        kind: r.try_get("kind").map_err(corrupt)?,
        generation: r.try_get("generation").map_err(corrupt)?,
        spec: r.try_get("spec").map_err(corrupt)?,
        created_at: from_ms(r.try_get("created_at").map_err(corrupt)?),
    })
}

pub(super) async fn outbox_put(
    store: &SqlStore,
    cluster_id: &str,
    target: &str,
    kind: &str,
    generation: i64,
    spec: &str,
) -> Result<Option<i64>> {
    let written = store
        .link_write(LinkWrite::Put {
            cluster_id: cluster_id.to_owned(),
            target: target.to_owned(),
            kind: kind.to_owned(),
            generation,
            spec: spec.to_owned(),
            now: Utc::now(),
        })
        .await?;
    match written {
        Written::Put(sequence) => Ok(sequence),
        other => Err(mismatch(other)),
    }
}

pub(super) async fn outbox_pending(
    store: &SqlStore,
    cluster_id: &str,
    after_sequence: i64,
    limit: i64,
) -> Result<Vec<OutboxItem>> {
    let query = sqlx::query(AssertSqlSafe(format!(
        "SELECT {OUTBOX_COLS} FROM outbox WHERE cluster_id = $1 AND acked_at IS NULL \
         AND sequence > $2 ORDER BY sequence LIMIT $3"
    )))
    .bind(cluster_id.to_owned())
    .bind(after_sequence)
    .bind(limit);
    store.read_all(query, outbox_from_row).await
}

pub(super) async fn outbox_ack(
    store: &SqlStore,
    cluster_id: &str,
    sequence: i64,
    target: &str,
    generation: i64,
    now: DateTime<Utc>,
) -> Result<bool> {
    let written = store
        .link_write(LinkWrite::Ack {
            cluster_id: cluster_id.to_owned(),
            sequence,
            target: target.to_owned(),
            generation,
            now,
        })
        .await?;
    match written {
        Written::Ack(acked) => Ok(acked),
        other => Err(mismatch(other)),
    }
}

pub(super) async fn outbox_ack_applied(
    store: &SqlStore,
    cluster_id: &str,
    applied: &[(String, i64)],
    now: DateTime<Utc>,
) -> Result<u64> {
    if applied.is_empty() {
        return Ok(0);
    }
    let mut tx = store.begin().await?;
    let mut acked = 0;
    for (target, generation) in applied {
        acked += store
            .run_in(
                &mut tx,
                sqlx::query(
                    "UPDATE outbox SET acked_at = $1 WHERE cluster_id = $2 AND target = $3 \
             AND generation <= $4 AND acked_at IS NULL",
                )
                .bind(ms(now))
                .bind(cluster_id.to_owned())
                .bind(target.clone())
                .bind(*generation),
            )
            .await?;
    }
    store.commit(tx).await?;
    Ok(acked)
}

pub(super) async fn outbox_knows_target(
    store: &SqlStore,
    cluster_id: &str,
    target: &str,
) -> Result<bool> {
    Ok(outbox_latest_generation(store, cluster_id, target)
        .await?
        .is_some())
}

pub(super) async fn outbox_target_exists(store: &SqlStore, target: &str) -> Result<bool> {
    Ok(
        sqlx::query("SELECT 1 FROM outbox WHERE target = $1 LIMIT 1")
            .bind(target.to_owned())
            .fetch_optional(store.reader())
            .await
            .map_err(|e| store.classify(e))?
            .is_some(),
    )
}

pub(super) async fn outbox_latest_generation(
    store: &SqlStore,
    cluster_id: &str,
    target: &str,
) -> Result<Option<i64>> {
    Ok(
        sqlx::query("SELECT MAX(generation) FROM outbox WHERE cluster_id = $1 AND target = $2")
            .bind(cluster_id.to_owned())
            .bind(target.to_owned())
            .fetch_one(store.reader())
            .await
            .map_err(|e| store.classify(e))?
            .get(0),
    )
}

pub(super) async fn outbox_acked_latest(
    store: &SqlStore,
    cluster_id: &str,
) -> Result<Vec<(String, String, i64)>> {
    let rows = sqlx::query(
        "SELECT o.target, o.kind, o.generation FROM outbox o \
         WHERE o.cluster_id = $1 AND o.acked_at IS NOT NULL \
         AND o.generation = (SELECT MAX(i.generation) FROM outbox i \
           WHERE i.cluster_id = o.cluster_id AND i.target = o.target \
           AND i.acked_at IS NOT NULL) \
         ORDER BY o.target, o.sequence",
    )
    .bind(cluster_id.to_owned())
    .fetch_all(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    let mut out: Vec<(String, String, i64)> = Vec::with_capacity(rows.len());
    for r in &rows {
        let target: String = r.get(0);
        // A resent copy shares the generation: one entry per target.
        if out.last().is_some_and(|(t, _, _)| *t == target) {
            continue;
        }
        out.push((target, r.get(1), r.get(2)));
    }
    Ok(out)
}

pub(super) async fn outbox_resend(
    store: &SqlStore,
    cluster_id: &str,
    targets: &[String],
) -> Result<Vec<i64>> {
    let mut sequences = Vec::new();
    for target in targets {
        let now = Utc::now();
        let mut tx = store.begin().await?;
        // The counter bump first: it serialises puts to this cluster.
        let query = sqlx::query(
            "UPDATE clusters SET next_sequence = next_sequence + 1 WHERE id = $1 \
             RETURNING next_sequence",
        )
        .bind(cluster_id.to_owned());
        let sequence: i64 = store
            .one_in(&mut tx, query, "cluster", cluster_id)
            .await?
            .get(0);
        let query = sqlx::query(
            "SELECT 1 FROM outbox WHERE cluster_id = $1 AND target = $2 AND acked_at IS NULL",
        )
        .bind(cluster_id.to_owned())
        .bind(target.clone());
        let queued = store.row_in(&mut tx, query).await?.is_some();
        if queued {
            continue;
        }
        let query = sqlx::query(AssertSqlSafe(format!(
            "SELECT {OUTBOX_COLS} FROM outbox WHERE cluster_id = $1 AND target = $2 \
             AND acked_at IS NOT NULL ORDER BY generation DESC, sequence DESC LIMIT 1"
        )))
        .bind(cluster_id.to_owned())
        .bind(target.clone());
        let latest = store.row_in(&mut tx, query).await?;
        let Some(item) = latest.as_ref().map(outbox_from_row).transpose()? else {
            continue;
        };
        let query = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO outbox ({OUTBOX_COLS}, acked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)"
        )))
        .bind(cluster_id.to_owned())
        .bind(sequence)
        .bind(item.target)
        .bind(item.kind)
        .bind(item.generation)
        .bind(item.spec)
        .bind(ms(now));
        store.run_in(&mut tx, query).await?;
        store.commit(tx).await?;
        sequences.push(sequence);
    }
    Ok(sequences)
}

pub(super) async fn outbox_summary(store: &SqlStore) -> Result<Vec<OutboxSummary>> {
    let rows = sqlx::query(
        "SELECT o.cluster_id, c.name, COUNT(*), MAX(o.sequence) FROM outbox o \
         JOIN clusters c ON c.id = o.cluster_id WHERE o.acked_at IS NULL \
         GROUP BY o.cluster_id, c.name",
    )
    .fetch_all(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    Ok(rows
        .iter()
        .map(|r| OutboxSummary {
            cluster_id: r.get(0),
            cluster_name: r.get(1),
            depth: r.get(2),
            max_sequence: r.get(3),
        })
        .collect())
}
