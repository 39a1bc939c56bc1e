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
//!
//! [`GROUP_FN_SQL`]: postgres::GROUP_FN_SQL

mod postgres;
mod single;
mod sqlite;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, oneshot};
use tracing::Instrument;

use super::sql::SqlStore;
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
    Report(ReportWrite),
}

/// A spoke report to store, unless the stored one of its target and kind
/// is for a newer generation.
#[derive(Debug)]
pub(super) struct ReportWrite {
    pub(super) cluster_id: String,
    pub(super) target: String,
    pub(super) kind: String,
    pub(super) generation: i64,
    pub(super) body: String,
    pub(super) now: DateTime<Utc>,
}

/// The reports of a group that stand when they run in order: per
/// (cluster, target, kind) the last of the highest generation, as the JSON
/// rows both backends' group statements take.
fn standing_reports(writes: &[&LinkWrite]) -> Vec<serde_json::Value> {
    let mut reports: std::collections::HashMap<(&str, &str, &str), serde_json::Value> =
        std::collections::HashMap::new();
    for write in writes {
        if let LinkWrite::Report(report) = write {
            let key = (
                report.cluster_id.as_str(),
                report.target.as_str(),
                report.kind.as_str(),
            );
            let stands = reports
                .get(&key)
                .is_none_or(|kept| kept["g"].as_i64() <= Some(report.generation));
            if stands {
                reports.insert(
                    key,
                    serde_json::json!({"c": report.cluster_id, "t": report.target,
                                       "k": report.kind, "g": report.generation,
                                       "b": report.body, "ts": super::sql::ms(report.now)}),
                );
            }
        }
    }
    reports.into_values().collect()
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
            let _ = tokio::spawn(
                async move {
                    store.commit_group(batch).await;
                    drop(turn);
                }
                .in_current_span(),
            )
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
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
