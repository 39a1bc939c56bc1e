//! Group commit of the link's hot writes on SQLite: outbox puts, acks and
//! spoke reports. On SQLite every write goes through one connection and each
//! commit appends the touched pages to the WAL, so one transaction per ack
//! makes the single writer the bottleneck under load. Here writers that
//! arrive while a commit is in progress queue up, and the next one to get
//! the turn commits all of them in one transaction (a leader per group, no
//! timer: an idle hub commits each write at once, a busy one in batches
//! that grow with the load).
//!
//! Every write is answered only after its group committed, so an ack is
//! durable before anyone is told. When a group fails, each of its writes is
//! retried in a transaction of its own, so one bad write fails alone.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;

use super::sql::{SqlStore, Tx, ms, not_found};
use super::{Backend, Result, Store, StoreError};

/// Writes committed together at most (bounds one transaction's time).
const MAX_GROUP: usize = 256;

/// One write of the link.
#[derive(Debug)]
pub(super) enum LinkWrite {
    Put {
        cluster_id: String,
        target: String,
        kind: String,
        generation: i64,
        spec: String,
        now: DateTime<Utc>,
    },
    Ack {
        cluster_id: String,
        sequence: i64,
        target: String,
        generation: i64,
        now: DateTime<Utc>,
    },
    Report {
        cluster_id: String,
        target: String,
        kind: String,
        generation: i64,
        body: String,
        now: DateTime<Utc>,
    },
}

/// What a write did.
#[derive(Debug)]
pub(super) enum Written {
    /// The new sequence, or `None` when this generation or a newer one was
    /// already queued.
    Put(Option<i64>),
    /// Whether the item was unacked before.
    Ack(bool),
    Report,
}

struct Pending {
    write: LinkWrite,
    reply: oneshot::Sender<Result<Written>>,
}

/// The queue of writes waiting for their group, shared by a store's clones.
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Vec<Pending>>,
    /// Held by the writer committing a group.
    turn: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit").finish_non_exhaustive()
    }
}

fn interrupted() -> StoreError {
    StoreError::FailedPrecondition(
        "the group commit carrying this write was interrupted (runtime shutdown); its outcome is unknown".into(),
    )
}

impl SqlStore {
    /// Commits `write`: on SQLite grouped with the writes queued beside
    /// it, on PostgreSQL in a transaction of its own.
    pub(super) async fn link_write(&self, write: LinkWrite) -> Result<Written> {
        if self.backend() == Backend::Postgres {
            // PostgreSQL commits concurrent transactions on the pool's
            // connections in parallel and flushes its WAL for all of them
            // at once; funnelling them through one connection here made
            // link-bench's dispatch→ack p50 12.7 s (652 of 1000 items/s).
            // Each write is one statement in its own implicit transaction:
            // no connection waits "idle in transaction" for the hub's next
            // statement.
            return self.write_autocommit(&write).await;
        }
        let group: Arc<GroupCommit> = self.group_commit();
        let (reply, mut answer) = oneshot::channel();
        lock(&group.queue).push(Pending { write, reply });
        loop {
            let turn = group.turn.lock().await;
            match answer.try_recv() {
                Ok(result) => return result,
                Err(TryRecvError::Closed) => return Err(interrupted()),
                // Still queued: this writer commits the next group, which
                // holds it unless more than MAX_GROUP were queued before it.
                Err(TryRecvError::Empty) => {}
            }
            let batch: Vec<Pending> = {
                let mut queue = lock(&group.queue);
                let n = queue.len().min(MAX_GROUP);
                queue.drain(..n).collect()
            };
            // On a task of its own: if this caller is dropped mid-commit,
            // the group still finishes and every writer in it is answered.
            let store = self.clone();
            let _ = tokio::spawn(async move { store.commit_group(batch).await }).await;
            drop(turn);
        }
    }

    async fn commit_group(&self, batch: Vec<Pending>) {
        if batch.is_empty() {
            return;
        }
        let writes: Vec<&LinkWrite> = batch.iter().map(|p| &p.write).collect();
        let grouped = self.apply_writes(&writes).await;
        match grouped {
            Ok(results) => {
                for (pending, result) in batch.into_iter().zip(results) {
                    let _ = pending.reply.send(Ok(result));
                }
            }
            Err(e) if batch.len() == 1 => {
                if let Some(pending) = batch.into_iter().next() {
                    let _ = pending.reply.send(Err(e));
                }
            }
            Err(e) => {
                tracing::debug!(writes = batch.len(), error = %e, "store.group_commit_split");
                for pending in batch {
                    let result = self
                        .apply_writes(&[&pending.write])
                        .await
                        .map(|mut r| r.remove(0));
                    let _ = pending.reply.send(result);
                }
            }
        }
    }

    /// One write as one statement (PostgreSQL): the put through the
    /// `clawfed_outbox_put` function (migration 0011), the ack and the
    /// report as they are in a group.
    async fn write_autocommit(&self, write: &LinkWrite) -> Result<Written> {
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
            LinkWrite::Report {
                cluster_id,
                target,
                kind,
                generation,
                body,
                now,
            } => {
                report_statement(cluster_id, target, kind, *generation, body, *now)
                    .execute(self.pool())
                    .await
                    .map_err(|e| self.classify(e))?;
                Ok(Written::Report)
            }
        }
    }

    /// Applies `writes` in order in one transaction.
    async fn apply_writes(&self, writes: &[&LinkWrite]) -> Result<Vec<Written>> {
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
                let sequence: i64 = sqlx::query(
                    "UPDATE clusters SET next_sequence = next_sequence + 1 WHERE id = $1 \
                     RETURNING next_sequence",
                )
                .bind(cluster_id.clone())
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?
                .ok_or_else(|| not_found("cluster", cluster_id))?
                .get(0);
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
                    sqlx::query(
                        "UPDATE clusters SET next_sequence = next_sequence - 1 WHERE id = $1",
                    )
                    .bind(cluster_id.clone())
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| self.classify(e))?;
                    return Ok(Written::Put(None));
                }
                sqlx::query(
                    "DELETE FROM outbox WHERE cluster_id = $1 AND target = $2 AND acked_at IS NULL",
                )
                .bind(cluster_id.clone())
                .bind(target.clone())
                .execute(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?;
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO outbox ({}, acked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
                    super::sql_link::OUTBOX_COLS
                )))
                .bind(cluster_id.clone())
                .bind(sequence)
                .bind(target.clone())
                .bind(kind.clone())
                .bind(*generation)
                .bind(spec.clone())
                .bind(ms(*now))
                .execute(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?;
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
            LinkWrite::Report {
                cluster_id,
                target,
                kind,
                generation,
                body,
                now,
            } => {
                report_statement(cluster_id, target, kind, *generation, body, *now)
                    .execute(&mut **tx)
                    .await
                    .map_err(|e| self.classify(e))?;
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
fn report_statement(
    cluster_id: &str,
    target: &str,
    kind: &str,
    generation: i64,
    body: &str,
    now: DateTime<Utc>,
) -> Statement {
    sqlx::query(
        "INSERT INTO spoke_reports (cluster_id, target, kind, generation, body, \
         received_at) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (cluster_id, target, kind) DO UPDATE SET generation = $4, \
         body = $5, received_at = $6 WHERE spoke_reports.generation <= $4",
    )
    .bind(cluster_id.to_owned())
    .bind(target.to_owned())
    .bind(kind.to_owned())
    .bind(generation)
    .bind(body.to_owned())
    .bind(ms(now))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
