//! The `work_items` table: the durable work queue (enqueue, coalesce,
//! claim by lane, heartbeat, settle, recover and reclaim leases).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use super::codec::{from_json, from_ms, get, ms, parse_enum};
use super::{SqlStore, Tx};
use crate::model::{WorkItem, WorkState};
use crate::store::{
    Backend, NewWork, Reclaimed, Recovered, Result, WorkDue, WorkFilter, WorkLane, WorkStats,
    postgres, sqlite,
};

/// How a [`WorkLane`] narrows a query over work items (its kinds are bound
/// as one JSON array).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum LaneFilter {
    All,
    Only,
    Except,
}

impl LaneFilter {
    pub(in crate::store) fn of(lane: &WorkLane) -> Self {
        match lane {
            WorkLane::All => Self::All,
            WorkLane::Only(_) => Self::Only,
            WorkLane::Except(_) => Self::Except,
        }
    }

    /// Which cached statement this filter uses.
    pub(in crate::store) fn index(self) -> usize {
        self as usize
    }

    /// The `AND …` clause for the backend's `kind_in` template (`{}` is
    /// the parameter), or nothing for every kind.
    pub(in crate::store) fn clause(self, kind_in: &str, param: &str) -> String {
        let test = kind_in.replace("{}", param);
        match self {
            Self::All => String::new(),
            Self::Only => format!(" AND {test}"),
            Self::Except => format!(" AND NOT {test}"),
        }
    }
}

pub(in crate::store) const WORK_COLS: &str = "id, kind, namespace, namespace_id, target, payload, \
     requested_by, state, attempts, max_attempts, run_at, lease_owner, lease_expires_at, \
     last_error, created_at, updated_at";

pub(super) async fn insert_work(
    store: &SqlStore,
    tx: &mut Tx,
    w: &NewWork,
    now: DateTime<Utc>,
) -> Result<String> {
    if w.coalesce
        && w.requested_by.is_none()
        && let Some(id) = join_pending_work(store, tx, w, now).await?
    {
        return Ok(id);
    }
    let id = Uuid::now_v7().to_string();
    let namespace = match &w.namespace_id {
        Some(ns_id) => store
            .row_in(
                tx,
                sqlx::query("SELECT name FROM namespaces WHERE id = $1").bind(ns_id.clone()),
            )
            .await?
            .map(|r| r.get::<String, _>(0)),
        None => None,
    };
    let query = sqlx::query(
        "INSERT INTO work_items (id, kind, namespace, namespace_id, target, payload, \
         requested_by, state, attempts, max_attempts, run_at, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', 0, $8, $9, $10, $10)",
    )
    .bind(id.clone())
    .bind(w.kind.clone())
    .bind(namespace)
    .bind(w.namespace_id.clone())
    .bind(w.target.clone())
    .bind(w.payload.to_string())
    .bind(w.requested_by.clone())
    .bind(i64::from(w.max_attempts))
    .bind(ms(w.run_at))
    .bind(ms(now));
    store.run_in(tx, query).await?;
    Ok(id)
}

/// A pending item of `w`'s kind and target that has not run yet and has
/// no requester, now due at the earlier of its time and `w`'s; its id, or
/// `None` when there is none. The state and attempts are checked again
/// in the update itself, so an item claimed meanwhile is not joined (on
/// PostgreSQL the update re-reads a row locked by a concurrent claim).
async fn join_pending_work(
    store: &SqlStore,
    tx: &mut Tx,
    w: &NewWork,
    now: DateTime<Utc>,
) -> Result<Option<String>> {
    let query = sqlx::query(
        "UPDATE work_items SET run_at = CASE WHEN run_at > $1 THEN $1 ELSE run_at END, \
         updated_at = $2 \
         WHERE id = (SELECT id FROM work_items WHERE state = 'pending' AND target = $3 \
         AND kind = $4 AND attempts = 0 AND requested_by IS NULL ORDER BY run_at LIMIT 1) \
         AND state = 'pending' AND attempts = 0 \
         RETURNING id",
    )
    .bind(ms(w.run_at))
    .bind(ms(now))
    .bind(w.target.clone())
    .bind(w.kind.clone());
    let row = store.row_in(tx, query).await?;
    Ok(row.map(|r| r.get::<String, _>(0)))
}

/// Runs an UPDATE touching `ids`, with `$1..$k` taken by `leading` binds
/// and the ids bound after them.
async fn update_ids(
    store: &SqlStore,
    sql_head: &str,
    leading: Vec<Bind>,
    ids: &[String],
) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let first = leading.len() + 1;
    let placeholders = (first..first + ids.len())
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("{sql_head} AND id IN ({placeholders})");
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for bind in leading {
        query = match bind {
            Bind::Text(s) => query.bind(s),
            Bind::Int(i) => query.bind(i),
        };
    }
    for id in ids {
        query = query.bind(id.clone());
    }
    Ok(query
        .execute(&store.pool)
        .await
        .map_err(|e| store.classify(e))?
        .rows_affected())
}

/// The result of putting a claimed item back to pending: when it was
/// (the caller still held it), workers are woken for it.
fn put_back(store: &SqlStore, done: bool) -> Result<bool> {
    if done {
        store.signals.work.notify();
    }
    Ok(done)
}

/// Moves one claimed item held by `worker` to `state`.
async fn settle_claim(
    store: &SqlStore,
    worker: &str,
    id: &str,
    state: WorkState,
    run_at: Option<DateTime<Utc>>,
    error: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let query = sqlx::query(
        "UPDATE work_items SET state = $1, run_at = COALESCE($2, run_at), last_error = $3, \
         lease_owner = NULL, lease_expires_at = NULL, updated_at = $4, \
         completed_at = CASE WHEN $1 = 'failed' THEN $4 ELSE NULL END \
         WHERE id = $5 AND lease_owner = $6 AND state = 'claimed'",
    )
    .bind(state.as_str())
    .bind(run_at.map(ms))
    .bind(error.to_owned())
    .bind(ms(now))
    .bind(id.to_owned())
    .bind(worker.to_owned());
    let done = store.run(query).await?;
    Ok(done == 1)
}

pub(super) async fn enqueue_work(store: &SqlStore, items: &[NewWork]) -> Result<Vec<String>> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let mut ids = Vec::with_capacity(items.len());
    for item in items {
        ids.push(insert_work(store, &mut tx, item, now).await?);
    }
    store.commit(tx).await?;
    if !ids.is_empty() {
        store.signals.work.notify();
    }
    Ok(ids)
}

pub(super) async fn claim_work(
    store: &SqlStore,
    worker: &str,
    limit: u32,
    lease: Duration,
    now: DateTime<Utc>,
    lane: &WorkLane,
) -> Result<Vec<WorkItem>> {
    let filter = LaneFilter::of(lane);
    let sql = match store.backend {
        Backend::Postgres => postgres::claim_sql(filter),
        Backend::Sqlite => sqlite::claim_sql(filter),
    };
    let lease_until = now + chrono::Duration::from_std(lease).unwrap_or_default();
    let mut query = sqlx::query(sql)
        .bind(worker.to_owned())
        .bind(ms(lease_until))
        .bind(ms(now))
        .bind(i64::from(limit));
    if let Some(kinds) = lane.kinds_json() {
        query = query.bind(kinds);
    }
    let rows = query
        .fetch_all(&store.pool)
        .await
        .map_err(|e| store.classify(e))?;
    rows.iter().map(work_from_row).collect()
}

pub(super) async fn heartbeat_work(
    store: &SqlStore,
    worker: &str,
    ids: &[String],
    lease_until: DateTime<Utc>,
) -> Result<u64> {
    update_ids(
        store,
        "UPDATE work_items SET lease_expires_at = $1 \
         WHERE lease_owner = $2 AND state = 'claimed'",
        vec![Bind::Int(ms(lease_until)), Bind::Text(worker.to_owned())],
        ids,
    )
    .await
}

pub(super) async fn complete_work(
    store: &SqlStore,
    worker: &str,
    ids: &[String],
    now: DateTime<Utc>,
) -> Result<u64> {
    update_ids(
        store,
        "UPDATE work_items SET state = 'done', lease_owner = NULL, lease_expires_at = NULL, \
         updated_at = $1, completed_at = $1 WHERE lease_owner = $2 AND state = 'claimed'",
        vec![Bind::Int(ms(now)), Bind::Text(worker.to_owned())],
        ids,
    )
    .await
}

pub(super) async fn retry_work(
    store: &SqlStore,
    worker: &str,
    id: &str,
    run_at: DateTime<Utc>,
    error: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let done = settle_claim(
        store,
        worker,
        id,
        WorkState::Pending,
        Some(run_at),
        error,
        now,
    )
    .await?;
    put_back(store, done)
}

pub(super) async fn fail_work(
    store: &SqlStore,
    worker: &str,
    id: &str,
    error: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let failed = settle_claim(store, worker, id, WorkState::Failed, None, error, now).await?;
    if failed {
        // Right after the failure (settling has no transaction of its
        // own to share): the item as it failed, for watchers.
        let item = get_work(store, id).await?;
        let event = crate::store::NewEvent {
            namespace_id: item.namespace_id.clone(),
            cluster: None,
            body: crate::model::event::EventBody::WorkFailed(
                crate::model::event::WorkFailedEvent {
                    source: crate::model::event::WorkFailureSource::Queue,
                    work_id: Some(item.id.clone()),
                    work_kind: item.kind.clone(),
                    target: item.target.clone(),
                    error: error.to_owned(),
                    attempts: Some(item.attempts),
                },
            ),
        };
        crate::store::WatchStore::append_event(store, &event).await?;
    }
    Ok(failed)
}

pub(super) async fn defer_work(
    store: &SqlStore,
    worker: &str,
    id: &str,
    run_at: DateTime<Utc>,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let query = sqlx::query(
        "UPDATE work_items SET state = 'pending', run_at = $1, updated_at = $2, \
         attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, last_error = $3, \
         lease_owner = NULL, lease_expires_at = NULL \
         WHERE id = $4 AND lease_owner = $5 AND state = 'claimed'",
    )
    .bind(ms(run_at))
    .bind(ms(now))
    .bind(reason.to_owned())
    .bind(id.to_owned())
    .bind(worker.to_owned());
    let done = store.run(query).await?;
    put_back(store, done == 1)
}

pub(super) async fn release_work(
    store: &SqlStore,
    worker: &str,
    id: &str,
    now: DateTime<Utc>,
) -> Result<bool> {
    let query = sqlx::query(
        "UPDATE work_items SET state = 'pending', run_at = $1, updated_at = $1, \
         attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, \
         lease_owner = NULL, lease_expires_at = NULL \
         WHERE id = $2 AND lease_owner = $3 AND state = 'claimed'",
    )
    .bind(ms(now))
    .bind(id.to_owned())
    .bind(worker.to_owned());
    let done = store.run(query).await?;
    put_back(store, done == 1)
}

pub(super) async fn recover_expired_work(
    store: &SqlStore,
    now: DateTime<Utc>,
) -> Result<Recovered> {
    let mut tx = store.begin().await?;
    let failed = sqlx::query(
        "UPDATE work_items SET state = 'failed', lease_owner = NULL, lease_expires_at = NULL, \
         last_error = COALESCE(last_error || '; ', '') || 'lease expired on the last attempt', \
         updated_at = $1, completed_at = $1 \
         WHERE state = 'claimed' AND lease_expires_at < $1 AND attempts >= max_attempts",
    )
    .bind(ms(now))
    .execute(&mut *tx)
    .await
    .map_err(|e| store.classify(e))?
    .rows_affected();
    let query = sqlx::query(
        "UPDATE work_items SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, \
         run_at = $1, updated_at = $1 \
         WHERE state = 'claimed' AND lease_expires_at < $1",
    )
    .bind(ms(now));
    let requeued = store.run_in(&mut tx, query).await?;
    store.commit(tx).await?;
    if requeued > 0 {
        store.signals.work.notify();
    }
    Ok(Recovered { requeued, failed })
}

pub(super) async fn reclaim_incarnation(
    store: &SqlStore,
    owner_prefix: &str,
    now: DateTime<Utc>,
) -> Result<Reclaimed> {
    // The prefix is an instance id (letters, digits, '-', '.') and '~':
    // no LIKE wildcard in it.
    let like = format!("{owner_prefix}%");
    let mut tx = store.begin().await?;
    let query = sqlx::query(
        "UPDATE work_items SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, \
         attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, \
         run_at = $1, updated_at = $1 \
         WHERE state = 'claimed' AND lease_owner LIKE $2",
    )
    .bind(ms(now))
    .bind(like.clone());
    let work = store.run_in(&mut tx, query).await?;
    let query = sqlx::query(
        "UPDATE agents SET pass_holder = NULL, pass_expires_at = NULL \
         WHERE pass_holder LIKE $1",
    )
    .bind(like);
    let passes = store.run_in(&mut tx, query).await?;
    store.commit(tx).await?;
    if work > 0 {
        store.signals.work.notify();
    }
    Ok(Reclaimed { work, passes })
}

pub(super) async fn get_work(store: &SqlStore, id: &str) -> Result<WorkItem> {
    let sql = format!("SELECT {WORK_COLS} FROM work_items WHERE id = $1");
    store.read_by_key(sql, id, work_from_row, "work item").await
}

pub(super) async fn list_work(store: &SqlStore, filter: &WorkFilter) -> Result<Vec<WorkItem>> {
    let mut clauses = Vec::new();
    let mut binds = Vec::new();
    if let Some(ns) = &filter.namespace {
        binds.push(ns.clone());
        clauses.push(format!("namespace = ${}", binds.len()));
    }
    if let Some(state) = filter.state {
        binds.push(state.as_str().to_owned());
        clauses.push(format!("state = ${}", binds.len()));
    }
    let where_clause = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT {WORK_COLS} FROM work_items {where_clause} ORDER BY created_at DESC, id DESC \
         LIMIT ${}",
        binds.len() + 1
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for b in binds {
        query = query.bind(b);
    }
    let rows = query
        .bind(filter.limit)
        .fetch_all(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    rows.iter().map(work_from_row).collect()
}

pub(super) async fn work_stats(store: &SqlStore, now: DateTime<Utc>) -> Result<WorkStats> {
    // Age counts from when an item became due: a wake-up scheduled for a
    // deadline is not late while it waits for its time.
    let row = sqlx::query(
        "SELECT COUNT(*), MIN(CASE WHEN run_at <= $1 THEN run_at END) FROM work_items \
         WHERE state IN ('pending', 'claimed')",
    )
    .bind(ms(now))
    .fetch_one(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    let oldest: Option<i64> = row.get(1);
    Ok(WorkStats {
        pending: row.get(0),
        oldest_pending_age: oldest
            .map(|due| Duration::from_millis(u64::try_from(ms(now) - due).unwrap_or(0))),
    })
}

pub(super) async fn next_work_due(store: &SqlStore, lane: &WorkLane) -> Result<WorkDue> {
    // Two MINs over the partial indexes on pending run_at and claimed
    // lease expiry: cheap however long the queue's history is. Any
    // lane recovers any expired claim, so the lease expiry is not
    // narrowed.
    let kind_in = match store.backend {
        Backend::Postgres => postgres::KIND_IN,
        Backend::Sqlite => sqlite::KIND_IN,
    };
    let sql = format!(
        "SELECT (SELECT MIN(run_at) FROM work_items WHERE state = 'pending'{}), \
         (SELECT MIN(lease_expires_at) FROM work_items WHERE state = 'claimed')",
        LaneFilter::of(lane).clause(kind_in, "$1")
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    if let Some(kinds) = lane.kinds_json() {
        query = query.bind(kinds);
    }
    let row = query
        .fetch_one(store.reader())
        .await
        .map_err(|e| store.classify(e))?;
    let next_run_at: Option<i64> = row.get(0);
    let next_lease_expiry: Option<i64> = row.get(1);
    Ok(WorkDue {
        next_run_at: next_run_at.map(from_ms),
        next_lease_expiry: next_lease_expiry.map(from_ms),
    })
}

enum Bind {
    Text(String),
    Int(i64),
}

fn work_from_row(r: &AnyRow) -> Result<WorkItem> {
    const W: &str = "work item";
    let state: String = get(r, W, "state")?;
    let attempts: i64 = get(r, W, "attempts")?;
    let max_attempts: i64 = get(r, W, "max_attempts")?;
    Ok(WorkItem {
        id: get(r, W, "id")?,
        kind: get(r, W, "kind")?,
        namespace: get(r, W, "namespace")?,
        namespace_id: get(r, W, "namespace_id")?,
        target: get(r, W, "target")?,
        payload: from_json(W, &get::<String>(r, W, "payload")?)?,
        requested_by: get(r, W, "requested_by")?,
        state: parse_enum(W, &state, WorkState::parse)?,
        attempts: i32::try_from(attempts).unwrap_or(i32::MAX),
        max_attempts: i32::try_from(max_attempts).unwrap_or(i32::MAX),
        run_at: from_ms(get(r, W, "run_at")?),
        lease_owner: get(r, W, "lease_owner")?,
        lease_expires_at: get::<Option<i64>>(r, W, "lease_expires_at")?.map(from_ms),
        last_error: get(r, W, "last_error")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}
