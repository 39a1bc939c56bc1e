//! Group commit of the link's hot writes: outbox puts, acks and spoke
//! reports. Writers that arrive while a commit is in progress queue up, and
//! the next one to get a turn commits all of them in one transaction (a
//! leader per group, no timer: an idle hub commits each write at once, a
//! busy one in batches that grow with the load).
//!
//! On SQLite every write goes through one connection and each commit
//! appends the touched pages to the WAL, so one transaction per ack made the
//! single writer the bottleneck; a group runs its writes one by one in one
//! transaction, one group at a time. On PostgreSQL a commit per write (3 per
//! item: put, ack, report) made the server's CPU the limit at 1,000 items/s;
//! a group there is set-based: all its puts, acks and reports in ONE
//! statement ([`GROUP_SQL`]), after one statement that locks the put
//! clusters' rows, in one transaction, with [`PG_COMMITTERS`] groups
//! committing at once on separate connections.
//!
//! Every write is answered only after its group committed, so an ack is
//! durable before anyone is told. When a group fails, each of its writes is
//! retried in a transaction of its own, so one bad write fails alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::{Semaphore, oneshot};

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
pub(super) struct GroupCommit {
    queue: Mutex<Vec<Pending>>,
    /// One permit per group that may commit at once.
    turns: Arc<Semaphore>,
    /// Groups committed whole, and the writes in them.
    groups: AtomicU64,
    grouped_writes: AtomicU64,
}

/// How the link's writes were committed so far (benchmarks and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// Groups committed whole (a group that failed and was retried write by
    /// write is not counted).
    pub groups: u64,
    /// Writes in those groups.
    pub writes: u64,
}

/// Groups committing at once on PostgreSQL. Each holds one pooled
/// connection for its few round trips; more than one lets a group's
/// statements run while another waits for its WAL flush, and the cluster
/// rows are locked in id order, so two groups never deadlock on them.
pub(super) const PG_COMMITTERS: usize = 2;

impl GroupCommit {
    pub(super) fn new(committers: usize) -> Self {
        Self {
            queue: Mutex::default(),
            turns: Arc::new(Semaphore::new(committers.max(1))),
            groups: AtomicU64::new(0),
            grouped_writes: AtomicU64::new(0),
        }
    }

    /// One group at a time on SQLite (one writer), [`PG_COMMITTERS`] on
    /// PostgreSQL.
    pub(super) fn for_backend(backend: Backend) -> Self {
        match backend {
            Backend::Postgres => Self::new(PG_COMMITTERS),
            Backend::Sqlite => Self::new(1),
        }
    }
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self::new(1)
    }
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
    /// How the link's writes were committed so far.
    pub fn link_group_stats(&self) -> GroupStats {
        let group = self.group_commit();
        GroupStats {
            groups: group.groups.load(Ordering::Relaxed),
            writes: group.grouped_writes.load(Ordering::Relaxed),
        }
    }

    /// Commits `write` grouped with the writes queued beside it.
    pub(super) async fn link_write(&self, write: LinkWrite) -> Result<Written> {
        let group: Arc<GroupCommit> = self.group_commit();
        let (reply, mut answer) = oneshot::channel();
        lock(&group.queue).push(Pending { write, reply });
        loop {
            let turn = tokio::select! {
                biased;
                result = &mut answer => return result.unwrap_or_else(|_| Err(interrupted())),
                turn = group.turns.clone().acquire_owned() => turn.map_err(|_| interrupted())?,
            };
            let batch: Vec<Pending> = {
                let mut queue = lock(&group.queue);
                let n = queue.len().min(MAX_GROUP);
                queue.drain(..n).collect()
            };
            if batch.is_empty() {
                // Ours is in a group another writer is committing.
                drop(turn);
                return answer.await.unwrap_or_else(|_| Err(interrupted()));
            }
            // On a task of its own, holding the turn: if this caller is
            // dropped mid-commit, the group still finishes and every writer
            // in it is answered. The group may not hold this writer's own
            // write (more than MAX_GROUP were queued before it): then it
            // loops for the next turn.
            let store = self.clone();
            let _ = tokio::spawn(async move {
                store.commit_group(batch).await;
                drop(turn);
            })
            .await;
        }
    }

    async fn commit_group(&self, batch: Vec<Pending>) {
        if batch.is_empty() {
            return;
        }
        let writes: Vec<&LinkWrite> = batch.iter().map(|p| &p.write).collect();
        let grouped = match self.backend() {
            Backend::Postgres => self.apply_group_pg(&writes).await,
            Backend::Sqlite => self
                .apply_writes(&writes)
                .await
                .map(|written| written.into_iter().map(Ok).collect()),
        };
        match grouped {
            Ok(results) => {
                let group = self.group_commit();
                group.groups.fetch_add(1, Ordering::Relaxed);
                group
                    .grouped_writes
                    .fetch_add(results.len() as u64, Ordering::Relaxed);
                for (pending, result) in batch.into_iter().zip(results) {
                    let _ = pending.reply.send(result);
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
                    let result = match self.backend() {
                        Backend::Postgres => self.write_autocommit(&pending.write).await,
                        Backend::Sqlite => self
                            .apply_writes(&[&pending.write])
                            .await
                            .map(|mut r| r.remove(0)),
                    };
                    let _ = pending.reply.send(result);
                }
            }
        }
    }

    /// One write as one statement (PostgreSQL, a write whose group
    /// failed): the put through the `clawfed_outbox_put` function
    /// (migration 0011), the ack and the report as single statements.
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

/// The cluster rows of a group's puts, locked in id order until the
/// group commits (`$1`: JSON array of cluster ids). Taken in a statement
/// of its own so that [`GROUP_SQL`], the next statement, reads the outbox
/// in a snapshot taken after the lock: every put to these clusters that
/// committed before is visible to its newest-generation check, as in
/// `clawfed_outbox_put`. NO KEY UPDATE, as the counter bump takes: reports
/// inserted meanwhile (their foreign key takes KEY SHARE) do not wait.
/// Returns the ids that exist.
const LOCK_CLUSTERS_SQL: &str = "SELECT id FROM clusters \
     WHERE id IN (SELECT json_array_elements_text($1::json)) \
     ORDER BY id FOR NO KEY UPDATE";

/// A whole group in one statement (PostgreSQL): `$1` puts, `$2` acks,
/// `$3` reports, each a JSON array of records (`i` is the write's index in
/// the group). The result is as if the group's acks ran first, then its
/// puts in index order, then its reports:
/// - a put is fresh when its generation is above the newest stored for
///   its target and above every earlier put of the target in the group;
///   fresh puts get the cluster's next sequences in index order (the
///   counter bumped once per cluster), the newest fresh put of a target is
///   inserted and every unacked item of the target is deleted, except one
///   this group acks (already acked when the put runs);
/// - an ack sets `acked_at` on its item if unacked;
/// - reports are upserted unless the stored one is newer (the caller sends
///   one per target and kind: data-modifying statements may not touch a
///   row twice).
///
/// Rows: `(0, i, sequence)` per fresh put, `(1, i, 0)` per ack that acked.
const GROUP_SQL: &str = "\
WITH p AS (
    SELECT * FROM json_to_recordset($1::json)
        AS x(i BIGINT, c TEXT, t TEXT, k TEXT, g BIGINT, s TEXT, ts BIGINT)
), a AS (
    SELECT * FROM json_to_recordset($2::json)
        AS x(i BIGINT, c TEXT, q BIGINT, t TEXT, g BIGINT, ts BIGINT)
), r AS (
    SELECT * FROM json_to_recordset($3::json)
        AS x(c TEXT, t TEXT, k TEXT, g BIGINT, b TEXT, ts BIGINT)
), fresh AS (
    SELECT e.*,
        ROW_NUMBER() OVER (PARTITION BY e.c ORDER BY e.i) AS n,
        ROW_NUMBER() OVER (PARTITION BY e.c, e.t ORDER BY e.i DESC) AS newest
    FROM (
        SELECT p.*,
            MAX(p.g) OVER (PARTITION BY p.c, p.t ORDER BY p.i
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS earlier,
            (SELECT MAX(ob.generation) FROM outbox ob
                WHERE ob.cluster_id = p.c AND ob.target = p.t) AS stored
        FROM p
    ) e
    WHERE (e.stored IS NULL OR e.g > e.stored) AND (e.earlier IS NULL OR e.g > e.earlier)
), bumped AS (
    UPDATE clusters k SET next_sequence = k.next_sequence + f.cnt
    FROM (SELECT c, COUNT(*) AS cnt FROM fresh GROUP BY c) f
    WHERE k.id = f.c
    RETURNING k.id, k.next_sequence - f.cnt AS base
), numbered AS (
    SELECT fresh.*, bumped.base + fresh.n AS seq
    FROM fresh JOIN bumped ON bumped.id = fresh.c
), acked AS (
    UPDATE outbox ob SET acked_at = a.ts FROM a
    WHERE ob.cluster_id = a.c AND ob.sequence = a.q AND ob.target = a.t
        AND ob.generation = a.g AND ob.acked_at IS NULL
    RETURNING a.i
), superseded AS (
    DELETE FROM outbox ob USING (SELECT DISTINCT c, t FROM fresh) f
    WHERE ob.cluster_id = f.c AND ob.target = f.t AND ob.acked_at IS NULL
        AND NOT EXISTS (SELECT 1 FROM a WHERE a.c = ob.cluster_id AND a.q = ob.sequence
            AND a.t = ob.target AND a.g = ob.generation)
), inserted AS (
    INSERT INTO outbox (cluster_id, sequence, target, kind, generation, spec, created_at)
    SELECT c, seq, t, k, g, s, ts FROM numbered WHERE newest = 1
), reported AS (
    INSERT INTO spoke_reports (cluster_id, target, kind, generation, body, received_at)
    SELECT c, t, k, g, b, ts FROM r
    ON CONFLICT (cluster_id, target, kind) DO UPDATE SET generation = excluded.generation,
        body = excluded.body, received_at = excluded.received_at
    WHERE spoke_reports.generation <= excluded.generation
)
SELECT 0::BIGINT AS w, i, seq AS v FROM numbered
UNION ALL SELECT 1::BIGINT, i, 0::BIGINT FROM acked";

impl SqlStore {
    /// A group on PostgreSQL: without puts one statement
    /// ([`GROUP_SQL`], its own transaction); with puts BEGIN, the cluster
    /// lock, that statement, COMMIT. Puts to unknown clusters fail alone.
    async fn apply_group_pg(&self, writes: &[&LinkWrite]) -> Result<Vec<Result<Written>>> {
        use serde_json::json;
        let mut results: Vec<Option<Result<Written>>> = writes.iter().map(|_| None).collect();
        let mut puts = Vec::new();
        let mut acks = Vec::new();
        // The report that stands last per (cluster, target, kind) when the
        // group's reports run in order: the last of the highest generation.
        let mut reports: std::collections::HashMap<(&str, &str, &str), serde_json::Value> =
            std::collections::HashMap::new();
        let mut put_clusters = std::collections::BTreeSet::new();
        for (i, write) in writes.iter().enumerate() {
            match write {
                LinkWrite::Put {
                    cluster_id,
                    target,
                    kind,
                    generation,
                    spec,
                    now,
                } => {
                    put_clusters.insert(cluster_id.as_str());
                    puts.push((
                        cluster_id.as_str(),
                        json!({"i": i, "c": cluster_id, "t": target, "k": kind,
                               "g": generation, "s": spec, "ts": ms(*now)}),
                    ));
                }
                LinkWrite::Ack {
                    cluster_id,
                    sequence,
                    target,
                    generation,
                    now,
                } => acks.push(json!({"i": i, "c": cluster_id, "q": sequence, "t": target,
                                      "g": generation, "ts": ms(*now)})),
                LinkWrite::Report {
                    cluster_id,
                    target,
                    kind,
                    generation,
                    body,
                    now,
                } => {
                    results[i] = Some(Ok(Written::Report));
                    let key = (cluster_id.as_str(), target.as_str(), kind.as_str());
                    let stands = reports
                        .get(&key)
                        .is_none_or(|kept| kept["g"].as_i64() <= Some(*generation));
                    if stands {
                        reports.insert(
                            key,
                            json!({"c": cluster_id, "t": target, "k": kind, "g": generation,
                                   "b": body, "ts": ms(*now)}),
                        );
                    }
                }
            }
        }
        let reports: Vec<serde_json::Value> = reports.into_values().collect();
        let rows = if put_clusters.is_empty() {
            self.group_statement(&[], &acks, &reports)
                .fetch_all(self.pool())
                .await
                .map_err(|e| self.classify(e))?
        } else {
            let mut tx = self.begin().await?;
            let ids = serde_json::to_string(&put_clusters).unwrap_or_else(|_| "[]".into());
            let known: std::collections::HashSet<String> = sqlx::query(LOCK_CLUSTERS_SQL)
                .bind(ids)
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
                .iter()
                .map(|r| r.get::<String, _>(0))
                .collect();
            let mut put_json = Vec::with_capacity(puts.len());
            for (cluster_id, put) in puts {
                if known.contains(cluster_id) {
                    put_json.push(put);
                } else if let Some(i) = put["i"].as_u64() {
                    results[i as usize] = Some(Err(not_found("cluster", cluster_id)));
                }
            }
            let rows = self
                .group_statement(&put_json, &acks, &reports)
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?;
            self.commit(tx).await?;
            rows
        };
        for row in &rows {
            let (what, i, value): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let slot = usize::try_from(i).ok().and_then(|i| results.get_mut(i));
            match (what, slot) {
                (0, Some(slot)) => *slot = Some(Ok(Written::Put(Some(value)))),
                (1, Some(slot)) => *slot = Some(Ok(Written::Ack(true))),
                _ => {
                    return Err(StoreError::Corrupt {
                        what: "group commit result",
                        detail: format!("row ({what}, {i}, {value}) names no write of the group"),
                    });
                }
            }
        }
        // What the statement did not name: stale puts and acks that found
        // nothing unacked.
        Ok(writes
            .iter()
            .zip(results)
            .map(|(write, result)| {
                result.unwrap_or(match write {
                    LinkWrite::Put { .. } => Ok(Written::Put(None)),
                    LinkWrite::Ack { .. } => Ok(Written::Ack(false)),
                    LinkWrite::Report { .. } => Ok(Written::Report),
                })
            })
            .collect())
    }

    fn group_statement(
        &self,
        puts: &[serde_json::Value],
        acks: &[serde_json::Value],
        reports: &[serde_json::Value],
    ) -> Statement {
        let array =
            |v: &[serde_json::Value]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
        sqlx::query(GROUP_SQL)
            .bind(array(puts))
            .bind(array(acks))
            .bind(array(reports))
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
