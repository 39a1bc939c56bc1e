//! The SQL both backends share. Statements use `$N` placeholders, which
//! PostgreSQL and SQLite both accept, and only types both store alike
//! (TEXT, BIGINT). What differs per backend comes from [`Backend`].

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use sqlx::any::AnyRow;
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{Any, AnyPool, AssertSqlSafe, Row, Transaction};
use uuid::Uuid;

use super::{
    ApiToken, Backend, ClusterRecord, Deployed, Effects, NewAgent, NewAudit, NewNamespace,
    NewRevision, NewToken, NewWork, PhaseStaleness, Reclaimed, Recovered, Result, Store,
    StoreError, WorkDue, WorkFilter, WorkLane, WorkStats, postgres, sqlite,
};
use crate::auth::Role;
use crate::model::{
    Agent, AgentRevision, AgentSpec, AuditEvent, Cluster, Configuration, ConnectionState,
    DesiredState, FleetSummary, Namespace, NamespaceState, RevisionPhase, WorkItem, WorkState,
};

/// The store over a sqlx `Any` pool bound to one backend.
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    /// Reads outside a transaction: on SQLite, connections of their own
    /// (WAL readers never wait for the one writer, nor it for them); on
    /// PostgreSQL, the same pool.
    reader: AnyPool,
    backend: Backend,
    /// Raised after commits that queue work or revoke a cluster; shared by
    /// every clone of this store.
    signals: crate::wake::StoreSignals,
    /// Outbox puts, acks and reports waiting for their group commit.
    group: std::sync::Arc<super::group::GroupCommit>,
    /// The database's clock, which leases are stamped and judged by.
    clock: std::sync::Arc<super::clock::StoreClock>,
}

pub(super) type Tx = Transaction<'static, Any>;

const NAMESPACE_COLS: &str = "id, name, display_name, data_plane_namespace, adopted, state, \
     provisioned_at, state_reason, version, created_at, updated_at";
const AGENT_COLS: &str = "a.id, n.name AS namespace, a.name, a.spec, a.desired_state, \
     a.active_revision, a.latest_revision, a.version, a.created_at, a.updated_at";
const CONFIG_COLS: &str =
    "c.id, n.name AS namespace, c.name, c.data, c.version, c.created_at, c.updated_at";
const REVISION_COLS: &str = "r.id, n.name AS namespace, a.name AS agent, r.number, r.spec, \
     r.configuration, r.images, r.resolved_cluster, r.phase, r.reason, r.rolled_back_from, \
     r.progress, r.version, r.requested_by, r.created_at, r.updated_at";
const REVISION_FROM: &str = "agent_revisions r JOIN agents a ON a.id = r.agent_id \
     JOIN namespaces n ON n.id = a.namespace_id";
/// Names of the clusters the revisions of namespace `$1` are placed on.
const PLACED: &str = "SELECT DISTINCT r.resolved_cluster FROM agent_revisions r \
     JOIN agents a ON a.id = r.agent_id JOIN namespaces n ON n.id = a.namespace_id \
     WHERE n.name = $1 AND r.resolved_cluster IS NOT NULL";
/// Whether Agent `a` has a revision that actually runs. By phase, not by
/// `a.active_revision`: that pointer moves to a new revision before it
/// enters `active` (its predecessor still serves) and is cleared on a stop
/// before the Harness is gone.
const ACTIVE_REVISION: &str =
    "SELECT 1 FROM agent_revisions ar WHERE ar.agent_id = a.id AND ar.phase = 'active'";
pub(super) const CLUSTER_COLS: &str = "id, name, labels, capabilities, certificate_serials, \
     connection_state, last_seen, version, created_at";
/// How a [`WorkLane`] narrows a query over work items (its kinds are bound
/// as one JSON array).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LaneFilter {
    All,
    Only,
    Except,
}

impl LaneFilter {
    pub(super) fn of(lane: &WorkLane) -> Self {
        match lane {
            WorkLane::All => Self::All,
            WorkLane::Only(_) => Self::Only,
            WorkLane::Except(_) => Self::Except,
        }
    }

    /// Which cached statement this filter uses.
    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The `AND …` clause for the backend's `kind_in` template (`{}` is
    /// the parameter), or nothing for every kind.
    pub(super) fn clause(self, kind_in: &str, param: &str) -> String {
        let test = kind_in.replace("{}", param);
        match self {
            Self::All => String::new(),
            Self::Only => format!(" AND {test}"),
            Self::Except => format!(" AND NOT {test}"),
        }
    }
}

pub(super) const WORK_COLS: &str = "id, kind, namespace, namespace_id, target, payload, \
     requested_by, state, attempts, max_attempts, run_at, lease_owner, lease_expires_at, \
     last_error, created_at, updated_at";
const TOKEN_COLS: &str = "t.id, t.name, n.name AS namespace, t.namespace_id, t.role, \
     t.created_at, t.expires_at, t.revoked_at";
const TOKEN_FROM: &str = "api_tokens t LEFT JOIN namespaces n ON n.id = t.namespace_id";

impl SqlStore {
    pub(super) fn new(pool: AnyPool, backend: Backend) -> Self {
        Self {
            reader: pool.clone(),
            pool,
            backend,
            signals: crate::wake::StoreSignals::default(),
            group: std::sync::Arc::new(super::group::GroupCommit::for_backend(backend)),
            clock: Default::default(),
        }
    }

    pub(super) fn group_commit(&self) -> std::sync::Arc<super::group::GroupCommit> {
        self.group.clone()
    }

    /// The wake-up signals of this store (shared by its clones).
    pub(super) fn store_signals(&self) -> &crate::wake::StoreSignals {
        &self.signals
    }

    /// The underlying pool (benchmarks and tests).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Reads outside a transaction go to these connections; see
    /// [`SqlStore::with_reader`].
    pub(super) fn with_reader(mut self, reader: AnyPool) -> Self {
        self.reader = reader;
        self
    }

    /// The pool of reads outside a transaction.
    pub(super) fn reader(&self) -> &AnyPool {
        &self.reader
    }

    /// A write transaction. On SQLite it takes the write lock as it opens
    /// (`BEGIN IMMEDIATE`), waiting up to the busy timeout for another
    /// process's writer (the hub CLI beside a running hub): a deferred
    /// transaction that read first would instead fail at its first write
    /// with SQLITE_BUSY as soon as that writer committed, busy timeout or
    /// not.
    pub(super) async fn begin(&self) -> Result<Tx> {
        let tx = match self.backend {
            Backend::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            Backend::Postgres => self.pool.begin().await,
        };
        tx.map_err(|e| self.classify(e))
    }

    pub(super) async fn commit(&self, tx: Tx) -> Result<()> {
        tx.commit().await.map_err(|e| self.classify(e))
    }

    /// Commits a transaction that wrote `fx`, then wakes the workers when
    /// it queued work. After the commit, not before: a worker woken earlier
    /// could look before the rows are visible and go back to sleep.
    pub(super) async fn commit_effects(&self, tx: Tx, fx: &Effects) -> Result<()> {
        self.commit(tx).await?;
        if !fx.work.is_empty() {
            self.signals.work.notify();
        }
        Ok(())
    }

    pub(super) fn classify(&self, err: sqlx::Error) -> StoreError {
        match self.backend {
            Backend::Postgres => postgres::classify(err),
            Backend::Sqlite => sqlite::classify(err),
        }
    }

    /// Maps a unique violation to `AlreadyExists`, anything else through
    /// [`Self::classify`].
    fn exists_or(&self, err: sqlx::Error, kind: &'static str, name: &str) -> StoreError {
        if is_unique_violation(&err) {
            StoreError::AlreadyExists {
                kind,
                name: name.to_owned(),
            }
        } else {
            self.classify(err)
        }
    }

    /// Why a versioned UPDATE of `table` matched no row: the object exists
    /// (so the caller's version is stale) or it does not.
    async fn stale_or_missing(
        &self,
        tx: &mut Tx,
        table: &'static str,
        kind: &'static str,
        ns_id: String,
        name: &str,
        expected: i64,
    ) -> StoreError {
        let exists = sqlx::query(AssertSqlSafe(format!(
            "SELECT 1 FROM {table} WHERE namespace_id = $1 AND name = $2{}",
            if table == "agents" {
                " AND deleted_at IS NULL"
            } else {
                ""
            }
        )))
        .bind(ns_id)
        .bind(name.to_owned())
        .fetch_optional(&mut **tx)
        .await;
        match exists {
            Ok(Some(_)) => StoreError::Conflict {
                kind,
                name: name.to_owned(),
                expected,
            },
            Ok(None) => not_found(kind, name),
            Err(e) => self.classify(e),
        }
    }

    async fn namespace_id(&self, tx: &mut Tx, name: &str) -> Result<String> {
        sqlx::query("SELECT id FROM namespaces WHERE name = $1")
            .bind(name.to_owned())
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| self.classify(e))?
            .map(|row| row.get::<String, _>(0))
            .ok_or_else(|| not_found("namespace", name))
    }

    pub(super) async fn write_effects(
        &self,
        tx: &mut Tx,
        fx: &Effects,
        now: DateTime<Utc>,
    ) -> Result<()> {
        self.insert_audit(tx, &fx.audit, now).await?;
        for work in &fx.work {
            self.insert_work(tx, work, now).await?;
        }
        Ok(())
    }

    async fn insert_audit(&self, tx: &mut Tx, a: &NewAudit, now: DateTime<Utc>) -> Result<()> {
        sqlx::query(
            "INSERT INTO audit_events (at, actor, action, namespace, target, result, detail) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(ms(now))
        .bind(a.actor.clone())
        .bind(a.action.clone())
        .bind(a.namespace.clone())
        .bind(a.target.clone())
        .bind(a.result.clone())
        .bind(a.detail.clone())
        .execute(&mut **tx)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn insert_work(&self, tx: &mut Tx, w: &NewWork, now: DateTime<Utc>) -> Result<String> {
        if w.coalesce
            && w.requested_by.is_none()
            && let Some(id) = self.join_pending_work(tx, w, now).await?
        {
            return Ok(id);
        }
        let id = Uuid::now_v7().to_string();
        let namespace = match &w.namespace_id {
            Some(ns_id) => sqlx::query("SELECT name FROM namespaces WHERE id = $1")
                .bind(ns_id.clone())
                .fetch_optional(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?
                .map(|r| r.get::<String, _>(0)),
            None => None,
        };
        sqlx::query(
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
        .bind(ms(now))
        .execute(&mut **tx)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(id)
    }

    /// A pending item of `w`'s kind and target that has not run yet and has
    /// no requester, now due at the earlier of its time and `w`'s; its id, or
    /// `None` when there is none. The state and attempts are checked again
    /// in the update itself, so an item claimed meanwhile is not joined (on
    /// PostgreSQL the update re-reads a row locked by a concurrent claim).
    async fn join_pending_work(
        &self,
        tx: &mut Tx,
        w: &NewWork,
        now: DateTime<Utc>,
    ) -> Result<Option<String>> {
        let row = sqlx::query(
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
        .bind(w.kind.clone())
        .fetch_optional(&mut **tx)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(row.map(|r| r.get::<String, _>(0)))
    }

    async fn fetch_agent(&self, namespace: &str, name: &str) -> Result<Agent> {
        let sql = format!(
            "SELECT {AGENT_COLS} FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
             WHERE n.name = $1 AND a.name = $2 AND a.deleted_at IS NULL"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .bind(name.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("agent", name))?;
        agent_from_row(&row)
    }

    async fn revision_by_id(&self, tx: &mut Tx, id: &str) -> Result<AgentRevision> {
        let sql = format!("SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE r.id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("revision", id))?;
        revision_from_row(&row)
    }

    /// One attempt of [`Store::deploy`]; `Ok(None)` means a concurrent deploy
    /// took the next number first and the caller should try again.
    async fn try_deploy(&self, rev: &NewRevision, fx: &Effects) -> Result<Option<Deployed>> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, &rev.namespace).await?;
        if let Some(idem) = &rev.idempotency {
            let earlier = sqlx::query(
                "SELECT fingerprint, revision_id FROM idempotency_keys \
                 WHERE namespace_id = $1 AND key = $2",
            )
            .bind(ns_id.clone())
            .bind(idem.key.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
            if let Some(row) = earlier {
                let fingerprint: String = row.get(0);
                if fingerprint != idem.fingerprint {
                    return Err(StoreError::FailedPrecondition(format!(
                        "Idempotency-Key {:?} was already used for a different request",
                        idem.key
                    )));
                }
                let revision = self
                    .revision_by_id(&mut tx, &row.get::<String, _>(1))
                    .await?;
                self.commit(tx).await?;
                return Ok(Some(Deployed {
                    revision,
                    created: false,
                }));
            }
        }
        let agent = sqlx::query(
            "SELECT id, version, latest_revision FROM agents \
             WHERE namespace_id = $1 AND name = $2 AND deleted_at IS NULL",
        )
        .bind(ns_id.clone())
        .bind(rev.agent.clone())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .ok_or_else(|| not_found("agent", &rev.agent))?;
        let agent_id: String = agent.get(0);
        if agent.get::<i64, _>(1) != rev.agent_version {
            return Err(StoreError::Conflict {
                kind: "agent",
                name: rev.agent.clone(),
                expected: rev.agent_version,
            });
        }
        let previous: Option<i64> = agent.get(2);
        let number = previous.unwrap_or(0) + 1;
        // Compare-and-swap on the revision counter: a concurrent deploy that
        // won the race leaves this update matching no row.
        let claimed = sqlx::query(
            "UPDATE agents SET latest_revision = $1, desired_state = 'running', updated_at = $2 \
             WHERE id = $3 AND version = $4 AND COALESCE(latest_revision, 0) = $5",
        )
        .bind(number)
        .bind(ms(now))
        .bind(agent_id.clone())
        .bind(rev.agent_version)
        .bind(previous.unwrap_or(0))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if claimed == 0 {
            return Ok(None);
        }
        let rev_id = rev.id.clone();
        let inserted_revision = sqlx::query(
            "INSERT INTO agent_revisions (id, agent_id, number, spec, configuration, images, \
             resolved_cluster, phase, reason, rolled_back_from, created_at, updated_at, \
             requested_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, $9, $10, $10, $11)",
        )
        .bind(rev_id.clone())
        .bind(agent_id.clone())
        .bind(number)
        .bind(to_json(&rev.spec)?)
        .bind(rev.configuration.to_string())
        .bind(to_json(&rev.images)?)
        .bind(rev.resolved_cluster.clone())
        .bind(RevisionPhase::Pending.as_str())
        .bind(rev.rolled_back_from)
        .bind(ms(now))
        .bind(rev.requested_by.clone())
        .execute(&mut *tx)
        .await;
        match inserted_revision {
            Ok(_) => {}
            // A concurrent retry of the same request committed this id
            // first; the retry finds it through the idempotency key.
            Err(e) if is_unique_violation(&e) => return Ok(None),
            Err(e) => return Err(self.classify(e)),
        }
        // The Agent's credentials as they are now, still sealed: a later
        // set does not change this revision; the next deploy carries it.
        sqlx::query(
            "INSERT INTO revision_credentials (revision_id, kind, key_id, nonce, ciphertext, \
             version, set_at) SELECT $1, kind, key_id, nonce, ciphertext, version, set_at \
             FROM agent_credentials WHERE agent_id = $2",
        )
        .bind(rev_id.clone())
        .bind(agent_id.clone())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        if let Some(idem) = &rev.idempotency {
            let inserted = sqlx::query(
                "INSERT INTO idempotency_keys (namespace_id, key, fingerprint, revision_id, \
                 created_at) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(ns_id)
            .bind(idem.key.clone())
            .bind(idem.fingerprint.clone())
            .bind(rev_id.clone())
            .bind(ms(now))
            .execute(&mut *tx)
            .await;
            match inserted {
                Ok(_) => {}
                // A concurrent retry with the same key committed first: drop
                // this attempt; the retry finds that revision.
                Err(e) if is_unique_violation(&e) => return Ok(None),
                Err(e) => return Err(self.classify(e)),
            }
        }
        let mut fx = fx.clone();
        fx.audit
            .detail
            .get_or_insert_with(|| format!("revision {number}"));
        self.write_effects(&mut tx, &fx, now).await?;
        let revision = self.revision_by_id(&mut tx, &rev_id).await?;
        self.commit_effects(tx, &fx).await?;
        Ok(Some(Deployed {
            revision,
            created: true,
        }))
    }

    /// Runs an UPDATE touching `ids`, with `$1..$k` taken by `leading` binds
    /// and the ids bound after them.
    async fn update_ids(&self, sql_head: &str, leading: Vec<Bind>, ids: &[String]) -> Result<u64> {
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
            .execute(&self.pool)
            .await
            .map_err(|e| self.classify(e))?
            .rows_affected())
    }

    /// The result of putting a claimed item back to pending: when it was
    /// (the caller still held it), workers are woken for it.
    fn put_back(&self, done: bool) -> Result<bool> {
        if done {
            self.signals.work.notify();
        }
        Ok(done)
    }

    /// Moves one claimed item held by `worker` to `state`.
    async fn settle_claim(
        &self,
        worker: &str,
        id: &str,
        state: WorkState,
        run_at: Option<DateTime<Utc>>,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let done = sqlx::query(
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
        .bind(worker.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        Ok(done == 1)
    }
}

enum Bind {
    Text(String),
    Int(i64),
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    fn signals(&self) -> crate::wake::StoreSignals {
        self.signals.clone()
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn sync_clock(&self) -> Result<chrono::Duration> {
        if self.backend == Backend::Postgres {
            // On a connection already in hand (waiting for one is not part
            // of the round trip), the best of a few round trips: the
            // shortest bounds the reading's error best.
            let mut conn = self.pool.acquire().await.map_err(|e| self.classify(e))?;
            let mut best: Option<(chrono::Duration, DateTime<Utc>, i64, DateTime<Utc>)> = None;
            for _ in 0..3 {
                let sent = Utc::now();
                let database_ms: i64 = sqlx::query_scalar(
                    "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
                )
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| self.classify(e))?;
                let received = Utc::now();
                let rtt = received - sent;
                if best.is_none_or(|(b, ..)| rtt < b) {
                    best = Some((rtt, sent, database_ms, received));
                }
            }
            if let Some((_, sent, database_ms, received)) = best {
                self.clock.record(sent, database_ms, received);
            }
        }
        Ok(self.clock.offset())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn create_namespace(&self, ns: &NewNamespace, fx: &Effects) -> Result<Namespace> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO namespaces (id, name, display_name, data_plane_namespace, adopted, \
             state, provisioned_at, version, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, NULL, 1, $7, $7)",
        )
        .bind(ns.id.clone())
        .bind(ns.name.clone())
        .bind(ns.display_name.clone())
        .bind(ns.data_plane_namespace.clone())
        .bind(i64::from(ns.adopted))
        .bind(NamespaceState::Pending.as_str())
        .bind(ms(now))
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::AlreadyExists {
                    kind: "namespace",
                    name: ns.name.clone(),
                }
            } else {
                self.classify(e)
            }
        })?;
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.get_namespace(&ns.name).await
    }

    async fn get_namespace(&self, name: &str) -> Result<Namespace> {
        let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces WHERE name = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(name.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("namespace", name))?;
        namespace_from_row(&row)
    }

    async fn get_namespace_by_id(&self, id: &str) -> Result<Namespace> {
        let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("namespace", id))?;
        namespace_from_row(&row)
    }

    async fn list_namespaces(&self, only: Option<&str>) -> Result<Vec<Namespace>> {
        let rows = match only {
            Some(name) => {
                let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces WHERE name = $1");
                sqlx::query(AssertSqlSafe(sql))
                    .bind(name.to_owned())
                    .fetch_all(self.reader())
                    .await
            }
            None => {
                let sql = format!("SELECT {NAMESPACE_COLS} FROM namespaces ORDER BY name");
                sqlx::query(AssertSqlSafe(sql))
                    .fetch_all(self.reader())
                    .await
            }
        }
        .map_err(|e| self.classify(e))?;
        rows.iter().map(namespace_from_row).collect()
    }

    async fn delete_namespace(&self, name: &str, fx: &Effects) -> Result<()> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let id = self.namespace_id(&mut tx, name).await?;
        let agents: i64 = sqlx::query(
            "SELECT COUNT(*) FROM agents WHERE namespace_id = $1 AND deleted_at IS NULL",
        )
        .bind(id.clone())
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .get(0);
        if agents > 0 {
            return Err(StoreError::FailedPrecondition(format!(
                "namespace {name:?} still has {agents} agent(s); delete them first"
            )));
        }
        // Deleted Agents' history lives as long as its tenant.
        for sql in [
            "DELETE FROM gateway_transport WHERE revision_id IN (SELECT r.id FROM agent_revisions r \
             JOIN agents a ON a.id = r.agent_id WHERE a.namespace_id = $1)",
            "DELETE FROM revision_credentials WHERE revision_id IN (SELECT r.id FROM agent_revisions r \
             JOIN agents a ON a.id = r.agent_id WHERE a.namespace_id = $1)",
            "DELETE FROM idempotency_keys WHERE namespace_id = $1",
            "DELETE FROM agent_revisions WHERE agent_id IN \
             (SELECT id FROM agents WHERE namespace_id = $1)",
            "DELETE FROM agent_credentials WHERE agent_id IN \
             (SELECT id FROM agents WHERE namespace_id = $1)",
            "DELETE FROM agents WHERE namespace_id = $1",
        ] {
            sqlx::query(sql)
                .bind(id.clone())
                .execute(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?;
        }
        for table in ["configurations", "idempotency_keys", "api_tokens"] {
            sqlx::query(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE namespace_id = $1"
            )))
            .bind(id.clone())
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
        }
        sqlx::query("DELETE FROM namespaces WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await
    }

    async fn set_namespace_state(
        &self,
        id: &str,
        state: NamespaceState,
        reason: Option<&str>,
        fx: &Effects,
    ) -> Result<Namespace> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let updated = sqlx::query(
            "UPDATE namespaces SET state = $1, state_reason = $2, updated_at = $3 WHERE id = $4",
        )
        .bind(state.as_str())
        .bind(reason.map(str::to_owned))
        .bind(ms(now))
        .bind(id.to_owned())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if updated == 0 {
            return Err(not_found("namespace", id));
        }
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.get_namespace_by_id(id).await
    }

    async fn mark_namespace_provisioned(&self, id: &str, at: DateTime<Utc>) -> Result<Namespace> {
        sqlx::query(
            "UPDATE namespaces SET state = $1, provisioned_at = COALESCE(provisioned_at, $2), \
             updated_at = $2 WHERE id = $3 AND state IN ('pending', 'active')",
        )
        .bind(NamespaceState::Active.as_str())
        .bind(ms(at))
        .bind(id.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        self.get_namespace_by_id(id).await
    }

    async fn create_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        fx: &Effects,
    ) -> Result<Configuration> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        sqlx::query(
            "INSERT INTO configurations (id, namespace_id, name, data, version, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, 1, $5, $5)",
        )
        .bind(Uuid::now_v7().to_string())
        .bind(ns_id)
        .bind(name.to_owned())
        .bind(data.to_string())
        .bind(ms(now))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.exists_or(e, "configuration", name))?;
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.get_configuration(namespace, name).await
    }

    async fn get_configuration(&self, namespace: &str, name: &str) -> Result<Configuration> {
        let sql = format!(
            "SELECT {CONFIG_COLS} FROM configurations c JOIN namespaces n ON n.id = c.namespace_id \
             WHERE n.name = $1 AND c.name = $2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .bind(name.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("configuration", name))?;
        configuration_from_row(&row)
    }

    async fn list_configurations(&self, namespace: &str) -> Result<Vec<Configuration>> {
        let sql = format!(
            "SELECT {CONFIG_COLS} FROM configurations c JOIN namespaces n ON n.id = c.namespace_id \
             WHERE n.name = $1 ORDER BY c.name"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(configuration_from_row).collect()
    }

    async fn update_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Configuration> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        let updated = sqlx::query(
            "UPDATE configurations SET data = $1, version = version + 1, updated_at = $2 \
             WHERE namespace_id = $3 AND name = $4 AND version = $5",
        )
        .bind(data.to_string())
        .bind(ms(now))
        .bind(ns_id.clone())
        .bind(name.to_owned())
        .bind(expected_version)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if updated == 0 {
            return Err(self
                .stale_or_missing(
                    &mut tx,
                    "configurations",
                    "configuration",
                    ns_id,
                    name,
                    expected_version,
                )
                .await);
        }
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.get_configuration(namespace, name).await
    }

    async fn delete_configuration(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        let deleted =
            sqlx::query("DELETE FROM configurations WHERE namespace_id = $1 AND name = $2")
                .bind(ns_id)
                .bind(name.to_owned())
                .execute(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?
                .rows_affected();
        if deleted == 0 {
            return Err(not_found("configuration", name));
        }
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await
    }

    async fn create_agent(&self, agent: &NewAgent, fx: &Effects) -> Result<Agent> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, &agent.namespace).await?;
        let kept = sqlx::query(
            "SELECT 1 FROM agents WHERE namespace_id = $1 AND name = $2 AND deleted_at IS NOT NULL",
        )
        .bind(ns_id.clone())
        .bind(agent.name.clone())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        if kept.is_some() {
            return Err(StoreError::FailedPrecondition(format!(
                "agent name {:?} belongs to a deleted Agent whose revision history is kept: \
                 choose another name",
                agent.name
            )));
        }
        sqlx::query(
            "INSERT INTO agents (id, namespace_id, name, spec, desired_state, active_revision, \
             latest_revision, version, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, NULL, NULL, 1, $6, $6)",
        )
        .bind(Uuid::now_v7().to_string())
        .bind(ns_id)
        .bind(agent.name.clone())
        .bind(to_json(&agent.spec)?)
        .bind(DesiredState::Stopped.as_str())
        .bind(ms(now))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.exists_or(e, "agent", &agent.name))?;
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.fetch_agent(&agent.namespace, &agent.name).await
    }

    async fn get_agent(&self, namespace: &str, name: &str) -> Result<Agent> {
        self.fetch_agent(namespace, name).await
    }

    async fn list_agents(&self, namespace: &str) -> Result<Vec<Agent>> {
        let sql = format!(
            "SELECT {AGENT_COLS} FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
             WHERE n.name = $1 AND a.deleted_at IS NULL ORDER BY a.name"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(agent_from_row).collect()
    }

    async fn update_agent(
        &self,
        namespace: &str,
        name: &str,
        spec: &AgentSpec,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Agent> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        let updated = sqlx::query(
            "UPDATE agents SET spec = $1, version = version + 1, updated_at = $2 \
             WHERE namespace_id = $3 AND name = $4 AND version = $5 AND deleted_at IS NULL",
        )
        .bind(to_json(spec)?)
        .bind(ms(now))
        .bind(ns_id.clone())
        .bind(name.to_owned())
        .bind(expected_version)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if updated == 0 {
            return Err(self
                .stale_or_missing(&mut tx, "agents", "agent", ns_id, name, expected_version)
                .await);
        }
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.fetch_agent(namespace, name).await
    }

    async fn delete_agent(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        let row = sqlx::query(
            "SELECT id, desired_state FROM agents \
             WHERE namespace_id = $1 AND name = $2 AND deleted_at IS NULL",
        )
        .bind(ns_id)
        .bind(name.to_owned())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .ok_or_else(|| not_found("agent", name))?;
        if row.get::<String, _>(1) == DesiredState::Running.as_str() {
            return Err(StoreError::FailedPrecondition(format!(
                "agent {name:?} is running; stop it before deleting it"
            )));
        }
        let id: String = row.get(0);
        // The Agent's revision history stays (marked deleted; its name stays
        // taken); its secrets do not: managed credentials, the revisions'
        // sealed snapshots and the Gateways' transport credentials go now.
        for sql in [
            "DELETE FROM agent_credentials WHERE agent_id = $1",
            "DELETE FROM revision_credentials WHERE revision_id IN \
             (SELECT id FROM agent_revisions WHERE agent_id = $1)",
            "DELETE FROM gateway_transport WHERE revision_id IN \
             (SELECT id FROM agent_revisions WHERE agent_id = $1)",
        ] {
            sqlx::query(sql)
                .bind(id.clone())
                .execute(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?;
        }
        sqlx::query(
            "UPDATE agents SET deleted_at = $1, active_revision = NULL, updated_at = $1 \
             WHERE id = $2",
        )
        .bind(ms(now))
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await
    }

    async fn set_desired_state(
        &self,
        namespace: &str,
        name: &str,
        state: DesiredState,
        fx: &Effects,
    ) -> Result<Agent> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        let updated = sqlx::query(
            "UPDATE agents SET desired_state = $1, updated_at = $2 \
             WHERE namespace_id = $3 AND name = $4 AND deleted_at IS NULL",
        )
        .bind(state.as_str())
        .bind(ms(now))
        .bind(ns_id)
        .bind(name.to_owned())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if updated == 0 {
            return Err(not_found("agent", name));
        }
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        self.fetch_agent(namespace, name).await
    }

    async fn deploy(&self, rev: &NewRevision, fx: &Effects) -> Result<Deployed> {
        const ATTEMPTS: u32 = 8;
        for attempt in 0..ATTEMPTS {
            if let Some(deployed) = self.try_deploy(rev, fx).await? {
                return Ok(deployed);
            }
            // Another deploy of the same Agent took the next number; a
            // short jittered pause lets the contenders spread out.
            let ceiling_ms = 2u64 << attempt.min(6);
            tokio::time::sleep(std::time::Duration::from_millis(
                rand::random::<u64>() % ceiling_ms,
            ))
            .await;
        }
        Err(StoreError::FailedPrecondition(format!(
            "agent {:?} is being deployed concurrently; retry with the same Idempotency-Key",
            rev.agent
        )))
    }

    async fn list_revisions(&self, namespace: &str, agent: &str) -> Result<Vec<AgentRevision>> {
        // Distinguish "no such agent" from "no revisions yet". A deleted
        // Agent's history is still listed.
        sqlx::query(
            "SELECT 1 FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
             WHERE n.name = $1 AND a.name = $2",
        )
        .bind(namespace.to_owned())
        .bind(agent.to_owned())
        .fetch_optional(self.reader())
        .await
        .map_err(|e| self.classify(e))?
        .ok_or_else(|| not_found("agent", agent))?;
        let sql = format!(
            "SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE n.name = $1 AND a.name = $2 \
             ORDER BY r.number"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .bind(agent.to_owned())
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(revision_from_row).collect()
    }

    async fn get_revision_by_id(&self, id: &str) -> Result<AgentRevision> {
        let sql = format!("SELECT {REVISION_COLS} FROM {REVISION_FROM} WHERE r.id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("revision", id))?;
        revision_from_row(&row)
    }

    async fn update_revision(
        &self,
        id: &str,
        expected_version: i64,
        phase: RevisionPhase,
        reason: Option<&str>,
        progress: &crate::model::RevisionProgress,
    ) -> Result<AgentRevision> {
        // One transaction: the phase change and its watch event commit
        // together. The row is read first (at the expected version, so the
        // compare-and-swap below sees the same state) to know whether the
        // phase or reason changed.
        let mut tx = self.begin().await?;
        let before = sqlx::query(
            "SELECT r.phase, r.reason, r.version, a.namespace_id FROM agent_revisions r \
             JOIN agents a ON a.id = r.agent_id WHERE r.id = $1",
        )
        .bind(id.to_owned())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .ok_or_else(|| not_found("revision", id))?;
        let (old_phase, old_reason, version, namespace_id): (String, Option<String>, i64, String) = (
            get(&before, "revision", "phase")?,
            get(&before, "revision", "reason")?,
            get(&before, "revision", "version")?,
            get(&before, "revision", "namespace_id")?,
        );
        let updated = if version == expected_version {
            sqlx::query(
                "UPDATE agent_revisions SET phase = $1, reason = $2, progress = $3, \
                 updated_at = $4, version = version + 1 WHERE id = $5 AND version = $6",
            )
            .bind(phase.as_str())
            .bind(reason.map(str::to_owned))
            .bind(to_json(progress)?)
            .bind(ms(Utc::now()))
            .bind(id.to_owned())
            .bind(expected_version)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .rows_affected()
        } else {
            0
        };
        if updated == 0 {
            // Someone else saved first: the caller's facts are stale.
            return Err(StoreError::Conflict {
                kind: "revision",
                name: id.to_owned(),
                expected: expected_version,
            });
        }
        let saved = self.revision_by_id(&mut tx, id).await?;
        let changed = old_phase != phase.as_str() || old_reason.as_deref() != reason;
        if changed {
            let event = super::NewEvent {
                namespace_id: Some(namespace_id),
                cluster: saved.resolved_cluster.clone(),
                body: crate::model::event::EventBody::RevisionPhase(
                    crate::model::event::RevisionPhaseEvent {
                        agent: saved.agent.clone(),
                        number: saved.number,
                        revision_id: saved.id.clone(),
                        phase,
                        previous_phase: RevisionPhase::parse(&old_phase),
                        reason: reason.map(str::to_owned),
                        phases: progress.phases.clone(),
                        durations_ms: progress.durations_ms.clone(),
                    },
                ),
            };
            self.insert_event(&mut tx, &event, Utc::now()).await?;
        }
        self.commit(tx).await?;
        if changed {
            self.events_committed();
        }
        Ok(saved)
    }

    async fn begin_agent_pass(
        &self,
        agent_id: &str,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool> {
        let taken = sqlx::query(
            "UPDATE agents SET pass_holder = $1, pass_expires_at = $2 WHERE id = $3 AND \
             (pass_holder IS NULL OR pass_holder = $1 OR pass_expires_at <= $4)",
        )
        .bind(holder.to_owned())
        .bind(ms(until))
        .bind(agent_id.to_owned())
        .bind(ms(now))
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        Ok(taken == 1)
    }

    async fn end_agent_pass(&self, agent_id: &str, holder: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agents SET pass_holder = NULL, pass_expires_at = NULL \
             WHERE id = $1 AND pass_holder = $2",
        )
        .bind(agent_id.to_owned())
        .bind(holder.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn place_revision(&self, id: &str, cluster: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agent_revisions SET resolved_cluster = $1 WHERE id = $2 \
             AND resolved_cluster IS NULL",
        )
        .bind(cluster.to_owned())
        .bind(id.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn activate_revision(&self, namespace: &str, agent: &str, number: i64) -> Result<bool> {
        // Only while the Agent still wants this revision: a stop or a newer
        // deploy that landed first wins over a pass that read older facts.
        let updated = sqlx::query(
            "UPDATE agents SET active_revision = $1, updated_at = $2 WHERE name = $3 AND \
             namespace_id = (SELECT id FROM namespaces WHERE name = $4) AND \
             desired_state = 'running' AND latest_revision = $1",
        )
        .bind(number)
        .bind(ms(Utc::now()))
        .bind(agent.to_owned())
        .bind(namespace.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn clear_active_revision(&self, namespace: &str, agent: &str) -> Result<()> {
        sqlx::query(
            "UPDATE agents SET active_revision = NULL, updated_at = $1 WHERE name = $2 AND \
             namespace_id = (SELECT id FROM namespaces WHERE name = $3)",
        )
        .bind(ms(Utc::now()))
        .bind(agent.to_owned())
        .bind(namespace.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn get_revision(
        &self,
        namespace: &str,
        agent: &str,
        number: i64,
    ) -> Result<AgentRevision> {
        let sql = format!(
            "SELECT {REVISION_COLS} FROM {REVISION_FROM} \
             WHERE n.name = $1 AND a.name = $2 AND r.number = $3"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .bind(agent.to_owned())
            .bind(number)
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("revision", &format!("{agent}/{number}")))?;
        revision_from_row(&row)
    }

    async fn upsert_cluster(&self, c: &ClusterRecord) -> Result<Cluster> {
        let now = Utc::now();
        let sql = format!(
            "INSERT INTO clusters ({CLUSTER_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (name) DO UPDATE SET labels = $3, capabilities = $4, \
             certificate_serials = $5, connection_state = $6, last_seen = $7, version = $8 \
             RETURNING {CLUSTER_COLS}"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(Uuid::now_v7().to_string())
            .bind(c.name.clone())
            .bind(to_json(&c.labels)?)
            .bind(to_json(&c.capabilities)?)
            .bind(to_json(&c.certificate_serials)?)
            .bind(c.connection_state.as_str())
            .bind(c.last_seen.map(ms))
            .bind(c.version.clone())
            .bind(ms(now))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.classify(e))?;
        cluster_from_row(&row)
    }

    async fn list_clusters(&self) -> Result<Vec<Cluster>> {
        let sql = format!("SELECT {CLUSTER_COLS} FROM clusters ORDER BY name");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(cluster_from_row).collect()
    }

    async fn get_cluster(&self, name: &str) -> Result<Cluster> {
        let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE name = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(name.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("cluster", name))?;
        cluster_from_row(&row)
    }

    async fn enqueue_work(&self, items: &[NewWork]) -> Result<Vec<String>> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let mut ids = Vec::with_capacity(items.len());
        for item in items {
            ids.push(self.insert_work(&mut tx, item, now).await?);
        }
        self.commit(tx).await?;
        if !ids.is_empty() {
            self.signals.work.notify();
        }
        Ok(ids)
    }

    async fn claim_work(
        &self,
        worker: &str,
        limit: u32,
        lease: Duration,
        now: DateTime<Utc>,
        lane: &WorkLane,
    ) -> Result<Vec<WorkItem>> {
        let filter = LaneFilter::of(lane);
        let sql = match self.backend {
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
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(work_from_row).collect()
    }

    async fn heartbeat_work(
        &self,
        worker: &str,
        ids: &[String],
        lease_until: DateTime<Utc>,
    ) -> Result<u64> {
        self.update_ids(
            "UPDATE work_items SET lease_expires_at = $1 \
             WHERE lease_owner = $2 AND state = 'claimed'",
            vec![Bind::Int(ms(lease_until)), Bind::Text(worker.to_owned())],
            ids,
        )
        .await
    }

    async fn complete_work(&self, worker: &str, ids: &[String], now: DateTime<Utc>) -> Result<u64> {
        self.update_ids(
            "UPDATE work_items SET state = 'done', lease_owner = NULL, lease_expires_at = NULL, \
             updated_at = $1, completed_at = $1 WHERE lease_owner = $2 AND state = 'claimed'",
            vec![Bind::Int(ms(now)), Bind::Text(worker.to_owned())],
            ids,
        )
        .await
    }

    async fn retry_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let done = self
            .settle_claim(worker, id, WorkState::Pending, Some(run_at), error, now)
            .await?;
        self.put_back(done)
    }

    async fn fail_work(
        &self,
        worker: &str,
        id: &str,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let failed = self
            .settle_claim(worker, id, WorkState::Failed, None, error, now)
            .await?;
        if failed {
            // Right after the failure (settling has no transaction of its
            // own to share): the item as it failed, for watchers.
            let item = self.get_work(id).await?;
            let event = super::NewEvent {
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
            super::WatchStore::append_event(self, &event).await?;
        }
        Ok(failed)
    }

    async fn defer_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE work_items SET state = 'pending', run_at = $1, updated_at = $2, \
             attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, last_error = $3, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $4 AND lease_owner = $5 AND state = 'claimed'",
        )
        .bind(ms(run_at))
        .bind(ms(now))
        .bind(reason.to_owned())
        .bind(id.to_owned())
        .bind(worker.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        self.put_back(done == 1)
    }

    async fn release_work(&self, worker: &str, id: &str, now: DateTime<Utc>) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE work_items SET state = 'pending', run_at = $1, updated_at = $1, \
             attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE id = $2 AND lease_owner = $3 AND state = 'claimed'",
        )
        .bind(ms(now))
        .bind(id.to_owned())
        .bind(worker.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        self.put_back(done == 1)
    }

    async fn recover_expired_work(&self, now: DateTime<Utc>) -> Result<Recovered> {
        let mut tx = self.begin().await?;
        let failed = sqlx::query(
            "UPDATE work_items SET state = 'failed', lease_owner = NULL, lease_expires_at = NULL, \
             last_error = COALESCE(last_error || '; ', '') || 'lease expired on the last attempt', \
             updated_at = $1, completed_at = $1 \
             WHERE state = 'claimed' AND lease_expires_at < $1 AND attempts >= max_attempts",
        )
        .bind(ms(now))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        let requeued = sqlx::query(
            "UPDATE work_items SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, \
             run_at = $1, updated_at = $1 \
             WHERE state = 'claimed' AND lease_expires_at < $1",
        )
        .bind(ms(now))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        self.commit(tx).await?;
        if requeued > 0 {
            self.signals.work.notify();
        }
        Ok(Recovered { requeued, failed })
    }

    async fn reclaim_incarnation(
        &self,
        owner_prefix: &str,
        now: DateTime<Utc>,
    ) -> Result<Reclaimed> {
        // The prefix is an instance id (letters, digits, '-', '.') and '~':
        // no LIKE wildcard in it.
        let like = format!("{owner_prefix}%");
        let mut tx = self.begin().await?;
        let work = sqlx::query(
            "UPDATE work_items SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, \
             attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, \
             run_at = $1, updated_at = $1 \
             WHERE state = 'claimed' AND lease_owner LIKE $2",
        )
        .bind(ms(now))
        .bind(like.clone())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        let passes = sqlx::query(
            "UPDATE agents SET pass_holder = NULL, pass_expires_at = NULL \
             WHERE pass_holder LIKE $1",
        )
        .bind(like)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        self.commit(tx).await?;
        if work > 0 {
            self.signals.work.notify();
        }
        Ok(Reclaimed { work, passes })
    }

    async fn get_work(&self, id: &str) -> Result<WorkItem> {
        let sql = format!("SELECT {WORK_COLS} FROM work_items WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("work item", id))?;
        work_from_row(&row)
    }

    async fn list_work(&self, filter: &WorkFilter) -> Result<Vec<WorkItem>> {
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
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        rows.iter().map(work_from_row).collect()
    }

    async fn work_stats(&self, now: DateTime<Utc>) -> Result<WorkStats> {
        // Age counts from when an item became due: a wake-up scheduled for a
        // deadline is not late while it waits for its time.
        let row = sqlx::query(
            "SELECT COUNT(*), MIN(CASE WHEN run_at <= $1 THEN run_at END) FROM work_items \
             WHERE state IN ('pending', 'claimed')",
        )
        .bind(ms(now))
        .fetch_one(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        let oldest: Option<i64> = row.get(1);
        Ok(WorkStats {
            pending: row.get(0),
            oldest_pending_age: oldest
                .map(|due| Duration::from_millis(u64::try_from(ms(now) - due).unwrap_or(0))),
        })
    }

    async fn next_work_due(&self, lane: &WorkLane) -> Result<WorkDue> {
        // Two MINs over the partial indexes on pending run_at and claimed
        // lease expiry: cheap however long the queue's history is. Any
        // lane recovers any expired claim, so the lease expiry is not
        // narrowed.
        let kind_in = match self.backend {
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
            .fetch_one(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        let next_run_at: Option<i64> = row.get(0);
        let next_lease_expiry: Option<i64> = row.get(1);
        Ok(WorkDue {
            next_run_at: next_run_at.map(from_ms),
            next_lease_expiry: next_lease_expiry.map(from_ms),
        })
    }

    async fn append_audit(&self, event: &NewAudit) -> Result<()> {
        let mut tx = self.begin().await?;
        self.insert_audit(&mut tx, event, Utc::now()).await?;
        self.commit(tx).await
    }

    async fn list_audit(&self, namespace: Option<&str>, limit: i64) -> Result<Vec<AuditEvent>> {
        const COLS: &str = "id, at, actor, action, namespace, target, result, detail";
        let rows = match namespace {
            Some(ns) => {
                let sql = format!(
                    "SELECT {COLS} FROM audit_events WHERE namespace = $1 ORDER BY id DESC LIMIT $2"
                );
                sqlx::query(AssertSqlSafe(sql))
                    .bind(ns.to_owned())
                    .bind(limit)
                    .fetch_all(self.reader())
                    .await
            }
            None => {
                let sql = format!("SELECT {COLS} FROM audit_events ORDER BY id DESC LIMIT $1");
                sqlx::query(AssertSqlSafe(sql))
                    .bind(limit)
                    .fetch_all(self.reader())
                    .await
            }
        }
        .map_err(|e| self.classify(e))?;
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

    async fn create_token(&self, token: &NewToken) -> Result<ApiToken> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = match &token.namespace {
            Some(ns) => Some(self.namespace_id(&mut tx, ns).await?),
            None => None,
        };
        let id = Uuid::now_v7().to_string();
        sqlx::query(
            "INSERT INTO api_tokens (id, name, namespace_id, role, token_hash, created_at, \
             expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)",
        )
        .bind(id.clone())
        .bind(token.name.clone())
        .bind(ns_id)
        .bind(token.role.as_str())
        .bind(token.hash.clone())
        .bind(ms(now))
        .bind(token.expires_at.map(ms))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.exists_or(e, "token", &token.name))?;
        let audit = NewAudit {
            actor: "system:cli".into(),
            action: "token.create".into(),
            namespace: token.namespace.clone(),
            target: format!("tokens/{}", token.name),
            result: "ok".into(),
            detail: Some(format!("role {}", token.role.as_str())),
        };
        self.insert_audit(&mut tx, &audit, now).await?;
        self.commit(tx).await?;
        self.get_token(&id).await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>> {
        let sql = format!("SELECT {TOKEN_COLS} FROM {TOKEN_FROM} WHERE t.token_hash = $1");
        sqlx::query(AssertSqlSafe(sql))
            .bind(hash.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .as_ref()
            .map(token_from_row)
            .transpose()
    }

    async fn get_token(&self, id: &str) -> Result<ApiToken> {
        let sql = format!("SELECT {TOKEN_COLS} FROM {TOKEN_FROM} WHERE t.id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("token", id))?;
        token_from_row(&row)
    }

    async fn find_token_by_name(&self, name: &str) -> Result<Option<ApiToken>> {
        let sql = format!("SELECT {TOKEN_COLS} FROM {TOKEN_FROM} WHERE t.name = $1");
        sqlx::query(AssertSqlSafe(sql))
            .bind(name.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .as_ref()
            .map(token_from_row)
            .transpose()
    }

    async fn revoke_token(&self, name: &str, at: DateTime<Utc>) -> Result<()> {
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE name = $2",
        )
        .bind(ms(at))
        .bind(name.to_owned())
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if done == 0 {
            return Err(not_found("token", name));
        }
        Ok(())
    }

    async fn fleet_summary(&self, namespace: Option<&str>) -> Result<FleetSummary> {
        // `$1 IS NULL OR …` keeps one statement for both scopes. A tenant's
        // clusters are those its revisions are placed on; its work items are
        // matched by namespace id, so a re-created namespace of the same name
        // does not count the old one's.
        let ns = namespace.map(str::to_owned);
        let sql = format!(
            "SELECT \
               (SELECT COUNT(*) FROM namespaces WHERE $1 IS NULL OR name = $1), \
               (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
                  WHERE ($1 IS NULL OR n.name = $1) AND a.deleted_at IS NULL), \
               (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
                  WHERE ($1 IS NULL OR n.name = $1) AND a.desired_state = 'running' \
                  AND a.deleted_at IS NULL), \
               (SELECT COUNT(*) FROM clusters WHERE $1 IS NULL OR name IN ({PLACED})), \
               (SELECT COUNT(*) FROM clusters WHERE ($1 IS NULL OR name IN ({PLACED})) \
                  AND connection_state = 'online'), \
               (SELECT COUNT(*) FROM work_items WHERE ($1 IS NULL OR namespace_id IN \
                  (SELECT id FROM namespaces WHERE name = $1)) \
                  AND state IN ('pending', 'claimed')), \
               (SELECT COUNT(*) FROM work_items WHERE ($1 IS NULL OR namespace_id IN \
                  (SELECT id FROM namespaces WHERE name = $1)) \
                  AND state = 'failed'), \
               (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
                  WHERE ($1 IS NULL OR n.name = $1) AND a.deleted_at IS NULL \
                  AND EXISTS ({ACTIVE_REVISION})), \
               (SELECT COUNT(*) FROM agents a JOIN namespaces n ON n.id = a.namespace_id \
                  WHERE ($1 IS NULL OR n.name = $1) AND a.desired_state = 'running' \
                  AND a.deleted_at IS NULL AND NOT EXISTS ({ACTIVE_REVISION}))"
        );
        let counts = sqlx::query(AssertSqlSafe(sql))
            .bind(ns.clone())
            .fetch_one(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        let phases = sqlx::query(AssertSqlSafe(format!(
            "SELECT r.phase, COUNT(*) FROM {REVISION_FROM} WHERE $1 IS NULL OR n.name = $1 \
             GROUP BY r.phase"
        )))
        .bind(ns)
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        let agents: i64 = counts.get(1);
        let desired_running: i64 = counts.get(2);
        Ok(FleetSummary {
            namespaces: counts.get(0),
            agents,
            agents_running: counts.get(7),
            agents_stopped: agents - desired_running,
            agents_desired_running: desired_running,
            agents_not_running: counts.get(8),
            revisions_by_phase: phases
                .iter()
                .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
                .collect(),
            clusters: counts.get(3),
            clusters_online: counts.get(4),
            work_pending: counts.get(5),
            work_failed: counts.get(6),
        })
    }

    async fn revision_staleness(&self, now: DateTime<Utc>) -> Result<Vec<PhaseStaleness>> {
        let in_progress = [
            RevisionPhase::Pending,
            RevisionPhase::Provisioning,
            RevisionPhase::Preparing,
            RevisionPhase::WaitingReady,
            RevisionPhase::Stopping,
        ];
        let list = in_progress
            .iter()
            .map(|p| format!("'{}'", p.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT phase, COUNT(*), MIN(updated_at) FROM agent_revisions \
             WHERE phase IN ({list}) GROUP BY phase ORDER BY phase"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(rows
            .iter()
            .map(|r| PhaseStaleness {
                phase: r.get(0),
                revisions: r.get(1),
                oldest_update_age: Duration::from_millis(
                    u64::try_from(ms(now) - r.get::<i64, _>(2)).unwrap_or(0),
                ),
            })
            .collect())
    }

    async fn placed_clusters(&self, namespace: &str) -> Result<Vec<String>> {
        let sql = format!("{PLACED} ORDER BY 1");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(namespace.to_owned())
            .fetch_all(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    async fn hub_secret(&self, name: &str, candidate: &str) -> Result<String> {
        sqlx::query(
            "INSERT INTO hub_secrets (name, value, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name.to_owned())
        .bind(candidate.to_owned())
        .bind(ms(Utc::now()))
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        let row = sqlx::query("SELECT value FROM hub_secrets WHERE name = $1")
            .bind(name.to_owned())
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.classify(e))?;
        get(&row, "hub secret", "value")
    }

    async fn replace_hub_secret(&self, name: &str, expected: &str, value: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE hub_secrets SET value = $3, created_at = $4 WHERE name = $1 AND value = $2",
        )
        .bind(name.to_owned())
        .bind(expected.to_owned())
        .bind(value.to_owned())
        .bind(ms(Utc::now()))
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn set_transport_token_hash(&self, revision_id: &str, token_hash: &str) -> Result<()> {
        // Through the revision row, so a missing revision is "not found"
        // rather than a foreign-key error.
        let done = sqlx::query(
            "INSERT INTO gateway_transport (revision_id, token_hash, created_at) \
             SELECT id, $2, $3 FROM agent_revisions WHERE id = $1 \
             ON CONFLICT (revision_id) DO UPDATE SET token_hash = excluded.token_hash",
        )
        .bind(revision_id.to_owned())
        .bind(token_hash.to_owned())
        .bind(ms(Utc::now()))
        .execute(&self.pool)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if done == 0 {
            return Err(not_found("revision", revision_id));
        }
        Ok(())
    }

    async fn transport_token_hash(&self, revision_id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT token_hash FROM gateway_transport WHERE revision_id = $1")
            .bind(revision_id.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        row.map(|r| get(&r, "gateway transport", "token_hash"))
            .transpose()
    }

    async fn revision_by_transport_hash(&self, token_hash: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT revision_id FROM gateway_transport WHERE token_hash = $1")
            .bind(token_hash.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?;
        row.map(|r| get(&r, "gateway transport", "revision_id"))
            .transpose()
    }
}

// ---- helpers ---------------------------------------------------------------

pub(super) fn not_found(kind: &'static str, name: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        name: name.to_owned(),
    }
}

pub(super) fn is_unique_violation(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .is_some_and(|e| e.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

/// Unix milliseconds, the stored form of a time.
pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_ms(v: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(v).single().unwrap_or_default()
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt {
        what: "document",
        detail: e.to_string(),
    })
}

fn from_json<T: serde::de::DeserializeOwned>(what: &'static str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what,
        detail: e.to_string(),
    })
}

fn corrupt(what: &'static str) -> impl Fn(sqlx::Error) -> StoreError {
    move |e| StoreError::Corrupt {
        what,
        detail: e.to_string(),
    }
}

fn get<'r, T>(row: &'r AnyRow, what: &'static str, col: &str) -> Result<T>
where
    T: sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    row.try_get(col).map_err(corrupt(what))
}

fn parse_enum<T>(what: &'static str, value: &str, parse: fn(&str) -> Option<T>) -> Result<T> {
    parse(value).ok_or_else(|| StoreError::Corrupt {
        what,
        detail: format!("unknown value {value:?}"),
    })
}

fn namespace_from_row(r: &AnyRow) -> Result<Namespace> {
    const W: &str = "namespace";
    let state: String = get(r, W, "state")?;
    Ok(Namespace {
        id: get(r, W, "id")?,
        name: get(r, W, "name")?,
        display_name: get(r, W, "display_name")?,
        data_plane_namespace: get(r, W, "data_plane_namespace")?,
        adopted: get::<i64>(r, W, "adopted")? != 0,
        state: parse_enum(W, &state, |s| match s {
            "pending" => Some(NamespaceState::Pending),
            "active" => Some(NamespaceState::Active),
            "deleting" => Some(NamespaceState::Deleting),
            "teardown-failed" => Some(NamespaceState::TeardownFailed),
            _ => None,
        })?,
        provisioned_at: get::<Option<i64>>(r, W, "provisioned_at")?.map(from_ms),
        clusters: Vec::new(),
        state_reason: get(r, W, "state_reason")?,
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}

fn configuration_from_row(r: &AnyRow) -> Result<Configuration> {
    const W: &str = "configuration";
    Ok(Configuration {
        id: get(r, W, "id")?,
        namespace: get(r, W, "namespace")?,
        name: get(r, W, "name")?,
        data: from_json(W, &get::<String>(r, W, "data")?)?,
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}

fn agent_from_row(r: &AnyRow) -> Result<Agent> {
    const W: &str = "agent";
    let desired: String = get(r, W, "desired_state")?;
    Ok(Agent {
        id: get(r, W, "id")?,
        namespace: get(r, W, "namespace")?,
        name: get(r, W, "name")?,
        spec: from_json(W, &get::<String>(r, W, "spec")?)?,
        desired_state: parse_enum(W, &desired, |s| match s {
            "running" => Some(DesiredState::Running),
            "stopped" => Some(DesiredState::Stopped),
            _ => None,
        })?,
        active_revision: get(r, W, "active_revision")?,
        latest_revision: get(r, W, "latest_revision")?,
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}

fn revision_from_row(r: &AnyRow) -> Result<AgentRevision> {
    const W: &str = "revision";
    let phase: String = get(r, W, "phase")?;
    Ok(AgentRevision {
        id: get(r, W, "id")?,
        namespace: get(r, W, "namespace")?,
        agent: get(r, W, "agent")?,
        number: get(r, W, "number")?,
        spec: from_json(W, &get::<String>(r, W, "spec")?)?,
        configuration: from_json(W, &get::<String>(r, W, "configuration")?)?,
        images: from_json(W, &get::<String>(r, W, "images")?)?,
        resolved_cluster: get(r, W, "resolved_cluster")?,
        phase: parse_enum(W, &phase, RevisionPhase::parse)?,
        reason: get(r, W, "reason")?,
        rolled_back_from: get(r, W, "rolled_back_from")?,
        progress: from_json(W, &get::<String>(r, W, "progress")?)?,
        version: get(r, W, "version")?,
        requested_by: get(r, W, "requested_by")?,
        readiness: None,
        drift: None,
        created_at: from_ms(get(r, W, "created_at")?),
        updated_at: from_ms(get(r, W, "updated_at")?),
    })
}

pub(super) fn cluster_from_row(r: &AnyRow) -> Result<Cluster> {
    const W: &str = "cluster";
    let state: String = get(r, W, "connection_state")?;
    let capabilities: Vec<String> = from_json(W, &get::<String>(r, W, "capabilities")?)?;
    Ok(Cluster {
        id: get(r, W, "id")?,
        name: get(r, W, "name")?,
        labels: from_json(W, &get::<String>(r, W, "labels")?)?,
        provider: clawfed_proto::capability::sandbox_driver_of(&capabilities).map(str::to_owned),
        capabilities,
        certificate_serials: from_json(W, &get::<String>(r, W, "certificate_serials")?)?,
        connection_state: parse_enum(W, &state, ConnectionState::parse)?,
        last_seen: get::<Option<i64>>(r, W, "last_seen")?.map(from_ms),
        version: get(r, W, "version")?,
        created_at: from_ms(get(r, W, "created_at")?),
        outbox_depth: None,
        certificate_expires_at: None,
    })
}

pub(super) fn work_from_row(r: &AnyRow) -> Result<WorkItem> {
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

fn token_from_row(r: &AnyRow) -> Result<ApiToken> {
    const W: &str = "token";
    let role: String = get(r, W, "role")?;
    Ok(ApiToken {
        id: get(r, W, "id")?,
        name: get(r, W, "name")?,
        namespace: get(r, W, "namespace")?,
        namespace_id: get(r, W, "namespace_id")?,
        role: parse_enum(W, &role, Role::parse)?,
        created_at: from_ms(get(r, W, "created_at")?),
        expires_at: get::<Option<i64>>(r, W, "expires_at")?.map(from_ms),
        revoked_at: get::<Option<i64>>(r, W, "revoked_at")?.map(from_ms),
    })
}
