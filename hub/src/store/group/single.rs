//! Each write alone: how a write whose group failed is retried by itself
//! (on PostgreSQL as one autocommitted statement, on SQLite in a
//! transaction of its own), and the ack and report statements it uses.

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};

use super::{LinkWrite, ReportWrite, Written};
use crate::store::Result;
use crate::store::sql::{SqlStore, Tx, ms, not_found};

impl SqlStore {
    /// One write as one statement (PostgreSQL, a write whose group
    /// failed): the put through the `clawfed_outbox_put` function
    /// (migration 0011), the ack and the report as single statements.
    pub(super) async fn write_autocommit(&self, write: &LinkWrite) -> Result<Written> {
        match write {
            LinkWrite::Put {
                cluster_id,
                target,
                kind,
                generation,
                spec,
                now,
            } => {
                let sequence: Option<i64> =
                    sqlx::query("SELECT clawfed_outbox_put($1, $2, $3, $4, $5, $6)")
                        .bind(cluster_id.clone())
                        .bind(target.clone())
                        .bind(kind.clone())
                        .bind(*generation)
                        .bind(spec.clone())
                        .bind(ms(*now))
                        .fetch_one(self.pool())
                        .await
                        .map_err(|e| match &e {
                            sqlx::Error::Database(db) if db.code().as_deref() == Some("P0002") => {
                                not_found("cluster", cluster_id)
                            }
                            _ => self.classify(e),
                        })?
                        .get(0);
                Ok(Written::Put(sequence))
            }
            LinkWrite::Ack {
                cluster_id,
                sequence,
                target,
                generation,
                now,
            } => {
                let acked = ack_statement(cluster_id, *sequence, target, *generation, *now)
                    .execute(self.pool())
                    .await
                    .map_err(|e| self.classify(e))?
                    .rows_affected();
                Ok(Written::Ack(acked == 1))
            }
            LinkWrite::Report(report) => {
                self.run(report_statement(report)).await?;
                Ok(Written::Report)
            }
        }
    }

    /// Applies `writes` in order in one transaction, one by one (SQLite,
    /// a write whose group failed).
    pub(super) async fn apply_writes(&self, writes: &[&LinkWrite]) -> Result<Vec<Written>> {
        let mut tx = self.begin().await?;
        let mut results = Vec::with_capacity(writes.len());
        for write in writes {
            results.push(self.apply_write(&mut tx, write).await?);
        }
        self.commit(tx).await?;
        Ok(results)
    }

    async fn apply_write(&self, tx: &mut Tx, write: &LinkWrite) -> Result<Written> {
        match write {
            LinkWrite::Put {
                cluster_id,
                target,
                kind,
                generation,
                spec,
                now,
            } => {
                // Bumping the counter first also takes the cluster row's
                // lock on PostgreSQL, so puts to one cluster serialise and
                // sequences are dense and increasing.
                let query = sqlx::query(
                    "UPDATE clusters SET next_sequence = next_sequence + 1 WHERE id = $1 \
                     RETURNING next_sequence",
                )
                .bind(cluster_id.clone());
                let sequence: i64 = self.one_in(tx, query, "cluster", cluster_id).await?.get(0);
                let newest: Option<i64> = sqlx::query(
                    "SELECT MAX(generation) FROM outbox WHERE cluster_id = $1 AND target = $2",
                )
                .bind(cluster_id.clone())
                .bind(target.clone())
                .fetch_one(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?
                .get(0);
                if newest.is_some_and(|g| g >= *generation) {
                    // Already holds this generation or a newer one. The
                    // group commits, so the bump is undone here (nobody
                    // else bumped since: the row is ours until commit).
                    let query = sqlx::query(
                        "UPDATE clusters SET next_sequence = next_sequence - 1 WHERE id = $1",
                    )
                    .bind(cluster_id.clone());
                    self.run_in(tx, query).await?;
                    return Ok(Written::Put(None));
                }
                let query = sqlx::query(
                    "DELETE FROM outbox WHERE cluster_id = $1 AND target = $2 AND acked_at IS NULL",
                )
                .bind(cluster_id.clone())
                .bind(target.clone());
                self.run_in(tx, query).await?;
                let query = sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO outbox ({}, acked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
                    crate::store::sql_link::OUTBOX_COLS
                )))
                .bind(cluster_id.clone())
                .bind(sequence)
                .bind(target.clone())
                .bind(kind.clone())
                .bind(*generation)
                .bind(spec.clone())
                .bind(ms(*now));
                self.run_in(tx, query).await?;
                Ok(Written::Put(Some(sequence)))
            }
            LinkWrite::Ack {
                cluster_id,
                sequence,
                target,
                generation,
                now,
            } => {
                let acked = ack_statement(cluster_id, *sequence, target, *generation, *now)
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| self.classify(e))?
                    .rows_affected();
                Ok(Written::Ack(acked == 1))
            }
            LinkWrite::Report(report) => {
                self.run_in(tx, report_statement(report)).await?;
                Ok(Written::Report)
            }
        }
    }
}

type Statement = sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>;

/// The UPDATE of an ack: only the item of this cluster, sequence, target
/// and generation, and only while unacked.
fn ack_statement(
    cluster_id: &str,
    sequence: i64,
    target: &str,
    generation: i64,
    now: DateTime<Utc>,
) -> Statement {
    sqlx::query(
        "UPDATE outbox SET acked_at = $1 WHERE cluster_id = $2 AND sequence = $3 \
         AND target = $4 AND generation = $5 AND acked_at IS NULL",
    )
    .bind(ms(now))
    .bind(cluster_id.to_owned())
    .bind(sequence)
    .bind(target.to_owned())
    .bind(generation)
}

/// The upsert of a report, unless the stored one is for a newer
/// generation.
fn report_statement(report: &ReportWrite) -> Statement {
    sqlx::query(
        "INSERT INTO spoke_reports (cluster_id, target, kind, generation, body, \
         received_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (cluster_id, target, kind) DO UPDATE SET generation = $4, \
         body = $5, received_at = $6 WHERE spoke_reports.generation <= $4",
    )
    .bind(report.cluster_id.clone())
    .bind(report.target.clone())
    .bind(report.kind.clone())
    .bind(report.generation)
    .bind(report.body.clone())
    .bind(ms(report.now))
}
