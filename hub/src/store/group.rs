//! Group commit of the link's hot writes: outbox puts, acks and spoke
//! reports. Writers that arrive while a commit is in progress queue up, and
//! the next one to get a turn commits all of them in one transaction (a
//! leader per group, no timer: an idle hub commits each write at once, a
//! busy one in batches that grow with the load).
//!
//! On SQLite every write goes through one connection and each commit
//! appends the touched pages to the WAL, so one transaction per ack made the
//! single writer the bottleneck; a group is one transaction, one group at a
//! time, of at most seven set-based statements whatever its size
//! ([`SqlStore::apply_group_sqlite`]). On PostgreSQL a commit per write (3 per
//! item: put, ack, report) made the server's CPU the limit at 1,000 items/s;
//! a group there is set-based: all its puts, acks and reports in ONE
//! round trip ([`GROUP_FN_SQL`]: a function that locks the put clusters'
//! rows, then runs one set-based statement, in one transaction), with
//! [`PG_COMMITTERS`] groups committing at once on separate connections.
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
            Backend::Sqlite => self.apply_group_sqlite(&writes).await,
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

    /// Applies `writes` in order in one transaction, one by one (SQLite,
    /// a write whose group failed).
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

/// A whole group on PostgreSQL in ONE round trip: the function of
/// migration 0015, called alone, so it is its own transaction (it used to
/// be BEGIN, a lock statement, the group statement and COMMIT: four round
/// trips, each a wake-up of the server and of the hub on a busy machine).
/// `$1` puts, `$2` acks, `$3` reports, each a JSON array of records (`i` is
/// the write's index in the group). The function first locks the put
/// clusters' rows in id order (two groups never deadlock on them; NO KEY
/// UPDATE, so reports inserted meanwhile do not wait), then runs one
/// set-based statement in a fresh snapshot, which therefore sees every put
/// to these clusters committed before, as `clawfed_outbox_put` does. The
/// result is as if the group's acks ran first, then its puts in index
/// order, then its reports:
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
/// Rows: `(0, i, sequence)` per fresh put, `(1, i, 0)` per ack that acked,
/// `(2, i, 0)` per put to a cluster that does not exist (nothing written).
const GROUP_FN_SQL: &str = "SELECT w, i, v FROM clawfed_link_group($1::json, $2::json, $3::json)";

impl SqlStore {
    /// A group on PostgreSQL: one call of `clawfed_link_group`
    /// ([`GROUP_FN_SQL`]). Puts to unknown clusters fail alone.
    async fn apply_group_pg(&self, writes: &[&LinkWrite]) -> Result<Vec<Result<Written>>> {
        use serde_json::json;
        let mut results: Vec<Option<Result<Written>>> = writes.iter().map(|_| None).collect();
        let mut puts = Vec::new();
        let mut acks = Vec::new();
        // The report that stands last per (cluster, target, kind) when the
        // group's reports run in order: the last of the highest generation.
        let mut reports: std::collections::HashMap<(&str, &str, &str), serde_json::Value> =
            std::collections::HashMap::new();
        for (i, write) in writes.iter().enumerate() {
            match write {
                LinkWrite::Put {
                    cluster_id,
                    target,
                    kind,
                    generation,
                    spec,
                    now,
                } => puts.push(json!({"i": i, "c": cluster_id, "t": target, "k": kind,
                                      "g": generation, "s": spec, "ts": ms(*now)})),
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
        let array =
            |v: &[serde_json::Value]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
        let rows = sqlx::query(GROUP_FN_SQL)
            .bind(array(&puts))
            .bind(array(&acks))
            .bind(array(&reports))
            .fetch_all(self.pool())
            .await
            .map_err(|e| self.classify(e))?;
        for row in &rows {
            let (what, i, value): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let index = usize::try_from(i).ok().filter(|i| *i < writes.len());
            match (what, index) {
                (0, Some(i)) => results[i] = Some(Ok(Written::Put(Some(value)))),
                (1, Some(i)) => results[i] = Some(Ok(Written::Ack(true))),
                (2, Some(i)) => {
                    let LinkWrite::Put { cluster_id, .. } = writes[i] else {
                        return Err(group_result_corrupt(what, i as i64, value));
                    };
                    results[i] = Some(Err(not_found("cluster", cluster_id)));
                }
                _ => return Err(group_result_corrupt(what, i, value)),
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
}

/// A group on SQLite, set-based: on the one writer connection, in one
/// transaction, at most seven statements whatever the group's size (one by
/// one, a put took four and each ack and report one, each a round trip to
/// the connection's thread, which a busy machine makes slow). The outcome
/// is the one of [`GROUP_FN_SQL`] on PostgreSQL: the acks first, then the
/// puts in index order, then the reports; the newest-generation check and
/// the sequence numbering of the puts are done here, on what the
/// transaction read (no other writer exists). Puts to unknown clusters
/// fail alone.
const SQLITE_ACKS: &str = "UPDATE outbox SET acked_at = a.ts FROM (SELECT value->>'c' AS c, \
     value->>'q' AS q, value->>'t' AS t, value->>'g' AS g, value->>'ts' AS ts \
     FROM json_each($1)) AS a WHERE outbox.cluster_id = a.c AND outbox.sequence = a.q \
     AND outbox.target = a.t AND outbox.generation = a.g AND outbox.acked_at IS NULL \
     RETURNING outbox.cluster_id, outbox.sequence, outbox.target, outbox.generation";
const SQLITE_NEWEST: &str = "SELECT o.cluster_id, o.target, MAX(o.generation) FROM outbox o \
     JOIN (SELECT DISTINCT value->>'c' AS c, value->>'t' AS t FROM json_each($1)) AS x \
     ON o.cluster_id = x.c AND o.target = x.t GROUP BY o.cluster_id, o.target";
const SQLITE_COUNTERS: &str = "SELECT id, next_sequence FROM clusters \
     WHERE id IN (SELECT value FROM json_each($1))";
const SQLITE_SUPERSEDE: &str = "DELETE FROM outbox WHERE acked_at IS NULL AND \
     (cluster_id, target) IN (SELECT value->>'c', value->>'t' FROM json_each($1))";
const SQLITE_INSERT: &str = "INSERT INTO outbox (cluster_id, sequence, target, kind, generation, \
     spec, created_at, acked_at) SELECT value->>'c', value->>'q', value->>'t', value->>'k', \
     value->>'g', value->>'s', value->>'ts', NULL FROM json_each($1)";
const SQLITE_BUMP: &str = "UPDATE clusters SET next_sequence = x.n FROM (SELECT value->>'c' AS c, \
     value->>'n' AS n FROM json_each($1)) AS x WHERE clusters.id = x.c";
const SQLITE_REPORTS: &str = "INSERT INTO spoke_reports (cluster_id, target, kind, generation, \
     body, received_at) SELECT value->>'c', value->>'t', value->>'k', value->>'g', value->>'b', \
     value->>'ts' FROM json_each($1) WHERE true \
     ON CONFLICT (cluster_id, target, kind) DO UPDATE SET generation = excluded.generation, \
     body = excluded.body, received_at = excluded.received_at \
     WHERE spoke_reports.generation <= excluded.generation";

impl SqlStore {
    /// A group on SQLite (see [`SQLITE_ACKS`] and the statements after it).
    pub(super) async fn apply_group_sqlite(
        &self,
        writes: &[&LinkWrite],
    ) -> Result<Vec<Result<Written>>> {
        use std::collections::{BTreeMap, HashMap, HashSet};

        use serde_json::json;
        let array =
            |v: &[serde_json::Value]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
        let mut results: Vec<Option<Result<Written>>> = writes.iter().map(|_| None).collect();
        // The group reads (newest generations) before it writes: `begin`
        // takes the write lock first on SQLite, so another process's
        // commit is waited for, not a stale snapshot refused.
        let mut tx = self.begin().await?;

        // Acks. A second ack of one item in the group finds it acked, as
        // one by one: only the first of each is sent.
        let mut first_ack: HashMap<(&str, i64, &str, i64), usize> = HashMap::new();
        let mut acks = Vec::new();
        for (i, write) in writes.iter().enumerate() {
            if let LinkWrite::Ack {
                cluster_id,
                sequence,
                target,
                generation,
                now,
            } = write
            {
                results[i] = Some(Ok(Written::Ack(false)));
                let key = (cluster_id.as_str(), *sequence, target.as_str(), *generation);
                if let std::collections::hash_map::Entry::Vacant(e) = first_ack.entry(key) {
                    e.insert(i);
                    acks.push(json!({"c": cluster_id, "q": sequence, "t": target,
                                     "g": generation, "ts": ms(*now)}));
                }
            }
        }
        if !acks.is_empty() {
            let acked: HashSet<(String, i64, String, i64)> = sqlx::query(SQLITE_ACKS)
                .bind(array(&acks))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect();
            for ((cluster_id, sequence, target, generation), i) in &first_ack {
                let key = (
                    (*cluster_id).to_owned(),
                    *sequence,
                    (*target).to_owned(),
                    *generation,
                );
                if acked.contains(&key) {
                    results[*i] = Some(Ok(Written::Ack(true)));
                }
            }
        }

        // Puts, in index order.
        let mut put_keys = Vec::new();
        let mut put_clusters: BTreeMap<&str, Option<i64>> = BTreeMap::new();
        for write in writes {
            if let LinkWrite::Put {
                cluster_id, target, ..
            } = write
            {
                put_keys.push(json!({"c": cluster_id, "t": target}));
                put_clusters.insert(cluster_id.as_str(), None);
            }
        }
        if !put_keys.is_empty() {
            let mut newest: HashMap<(String, String), i64> = sqlx::query(SQLITE_NEWEST)
                .bind(array(&put_keys))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
                .iter()
                .map(|r| ((r.get(0), r.get(1)), r.get(2)))
                .collect();
            let ids: Vec<&str> = put_clusters.keys().copied().collect();
            for r in sqlx::query(SQLITE_COUNTERS)
                .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
            {
                let id: String = r.get(0);
                if let Some(next) = put_clusters.get_mut(id.as_str()) {
                    *next = Some(r.get(1));
                }
            }
            let mut bumped: BTreeMap<&str, i64> = BTreeMap::new();
            // The newest fresh put per target: the one inserted.
            let mut inserts: HashMap<(&str, &str), serde_json::Value> = HashMap::new();
            for (i, write) in writes.iter().enumerate() {
                let LinkWrite::Put {
                    cluster_id,
                    target,
                    kind,
                    generation,
                    spec,
                    now,
                } = write
                else {
                    continue;
                };
                let Some(Some(next)) = put_clusters.get_mut(cluster_id.as_str()) else {
                    results[i] = Some(Err(not_found("cluster", cluster_id)));
                    continue;
                };
                let key = (cluster_id.clone(), target.clone());
                if newest.get(&key).is_some_and(|g| g >= generation) {
                    results[i] = Some(Ok(Written::Put(None)));
                    continue;
                }
                *next += 1;
                bumped.insert(cluster_id.as_str(), *next);
                newest.insert(key, *generation);
                results[i] = Some(Ok(Written::Put(Some(*next))));
                inserts.insert(
                    (cluster_id.as_str(), target.as_str()),
                    json!({"c": cluster_id, "q": *next, "t": target, "k": kind,
                           "g": generation, "s": spec, "ts": ms(*now)}),
                );
            }
            if !inserts.is_empty() {
                let superseded: Vec<serde_json::Value> = inserts
                    .keys()
                    .map(|(c, t)| json!({"c": c, "t": t}))
                    .collect();
                let rows: Vec<serde_json::Value> = inserts.into_values().collect();
                let counters: Vec<serde_json::Value> = bumped
                    .iter()
                    .map(|(c, n)| json!({"c": c, "n": n}))
                    .collect();
                for (sql, arg) in [
                    (SQLITE_SUPERSEDE, array(&superseded)),
                    (SQLITE_INSERT, array(&rows)),
                    (SQLITE_BUMP, array(&counters)),
                ] {
                    sqlx::query(sql)
                        .bind(arg)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| self.classify(e))?;
                }
            }
        }

        // Reports: the one that stands last per key when they run in order
        // (the last of the highest generation).
        let mut reports: HashMap<(&str, &str, &str), serde_json::Value> = HashMap::new();
        for (i, write) in writes.iter().enumerate() {
            if let LinkWrite::Report {
                cluster_id,
                target,
                kind,
                generation,
                body,
                now,
            } = write
            {
                results[i] = Some(Ok(Written::Report));
                let key = (cluster_id.as_str(), target.as_str(), kind.as_str());
                if reports
                    .get(&key)
                    .is_none_or(|kept| kept["g"].as_i64() <= Some(*generation))
                {
                    reports.insert(
                        key,
                        json!({"c": cluster_id, "t": target, "k": kind, "g": generation,
                               "b": body, "ts": ms(*now)}),
                    );
                }
            }
        }
        if !reports.is_empty() {
            let reports: Vec<serde_json::Value> = reports.into_values().collect();
            sqlx::query(SQLITE_REPORTS)
                .bind(array(&reports))
                .execute(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?;
        }
        self.commit(tx).await?;
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(StoreError::Corrupt {
                        what: "group commit result",
                        detail: "a write of the group got no result".into(),
                    })
                })
            })
            .collect())
    }
}

fn group_result_corrupt(what: i64, i: i64, value: i64) -> StoreError {
    StoreError::Corrupt {
        what: "group commit result",
        detail: format!("row ({what}, {i}, {value}) names no write of the group"),
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
