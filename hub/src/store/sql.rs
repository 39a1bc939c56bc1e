//! The SQL both backends share. Statements use `$N` placeholders, which
//! PostgreSQL and SQLite both accept, and only types both store alike
//! (TEXT, BIGINT). What differs per backend comes from [`Backend`].
//!
//! This file holds [`SqlStore`] (its pools, transactions and the effects a
//! mutation writes with it) and its [`Store`] implementation, which hands
//! each method to the file of its table:
//! - `sql/namespaces.rs`, `sql/configurations.rs`, `sql/agents.rs`,
//!   `sql/revisions.rs`, `sql/clusters.rs`: desired state, a table each;
//! - `sql/work.rs`: the work queue; `sql/audit.rs`: the audit log;
//!   `sql/tokens.rs`: API tokens; `sql/secrets.rs`: hub secrets and
//!   Gateway transport token hashes; `sql/fleet.rs`: counts across tables;
//! - `sql/codec.rs`: how values are stored and read back.

mod agents;
mod audit;
mod clusters;
mod codec;
mod configurations;
mod fleet;
mod namespaces;
mod revisions;
mod secrets;
mod tokens;
mod work;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
// Dynamic SQL here (wrapped in `AssertSqlSafe`) only interpolates the
// column lists and placeholders defined in this file, never input.
use sqlx::{Any, AnyPool, AssertSqlSafe, Row, Transaction};

use super::{
    ApiToken, Backend, ClusterRecord, Deployed, Effects, NewAgent, NewAudit, NewNamespace,
    NewRevision, NewToken, NewWork, PhaseStaleness, Reclaimed, Recovered, Result, Store,
    StoreError, WorkDue, WorkFilter, WorkLane, WorkStats, postgres, sqlite,
};
use crate::model::{
    Agent, AgentRevision, AgentSpec, AuditEvent, Cluster, Configuration, DesiredState,
    FleetSummary, Namespace, NamespaceState, RevisionPhase, WorkItem,
};

pub(super) use clusters::{CLUSTER_COLS, cluster_from_row};
use codec::is_unique_violation;
pub(super) use codec::{from_ms, ms, not_found};
pub(super) use work::{LaneFilter, WORK_COLS};

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
}

/// Past `ping`, each method runs the inherent method of the same name,
/// written in the file of its table (an inherent method is found before a
/// trait's, so these calls are not recursive).
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

    // Namespaces: sql/namespaces.rs.
    async fn create_namespace(&self, ns: &NewNamespace, fx: &Effects) -> Result<Namespace> {
        self.create_namespace(ns, fx).await
    }

    async fn get_namespace(&self, name: &str) -> Result<Namespace> {
        self.get_namespace(name).await
    }

    async fn get_namespace_by_id(&self, id: &str) -> Result<Namespace> {
        self.get_namespace_by_id(id).await
    }

    async fn list_namespaces(&self, only: Option<&str>) -> Result<Vec<Namespace>> {
        self.list_namespaces(only).await
    }

    async fn delete_namespace(&self, name: &str, fx: &Effects) -> Result<()> {
        self.delete_namespace(name, fx).await
    }

    async fn set_namespace_state(
        &self,
        id: &str,
        state: NamespaceState,
        reason: Option<&str>,
        fx: &Effects,
    ) -> Result<Namespace> {
        self.set_namespace_state(id, state, reason, fx).await
    }

    async fn mark_namespace_provisioned(&self, id: &str, at: DateTime<Utc>) -> Result<Namespace> {
        self.mark_namespace_provisioned(id, at).await
    }

    // Configurations: sql/configurations.rs.
    async fn create_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        fx: &Effects,
    ) -> Result<Configuration> {
        self.create_configuration(namespace, name, data, fx).await
    }

    async fn get_configuration(&self, namespace: &str, name: &str) -> Result<Configuration> {
        self.get_configuration(namespace, name).await
    }

    async fn list_configurations(&self, namespace: &str) -> Result<Vec<Configuration>> {
        self.list_configurations(namespace).await
    }

    async fn update_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Configuration> {
        self.update_configuration(namespace, name, data, expected_version, fx)
            .await
    }

    async fn delete_configuration(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()> {
        self.delete_configuration(namespace, name, fx).await
    }

    // Agents: sql/agents.rs.
    async fn create_agent(&self, agent: &NewAgent, fx: &Effects) -> Result<Agent> {
        self.create_agent(agent, fx).await
    }

    async fn get_agent(&self, namespace: &str, name: &str) -> Result<Agent> {
        self.fetch_agent(namespace, name).await
    }

    async fn list_agents(&self, namespace: &str) -> Result<Vec<Agent>> {
        self.list_agents(namespace).await
    }

    async fn update_agent(
        &self,
        namespace: &str,
        name: &str,
        spec: &AgentSpec,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Agent> {
        self.update_agent(namespace, name, spec, expected_version, fx)
            .await
    }

    async fn delete_agent(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()> {
        self.delete_agent(namespace, name, fx).await
    }

    async fn set_desired_state(
        &self,
        namespace: &str,
        name: &str,
        state: DesiredState,
        fx: &Effects,
    ) -> Result<Agent> {
        self.set_desired_state(namespace, name, state, fx).await
    }

    // Revisions: sql/revisions.rs.
    async fn deploy(&self, rev: &NewRevision, fx: &Effects) -> Result<Deployed> {
        self.deploy(rev, fx).await
    }

    async fn list_revisions(&self, namespace: &str, agent: &str) -> Result<Vec<AgentRevision>> {
        self.list_revisions(namespace, agent).await
    }

    async fn get_revision_by_id(&self, id: &str) -> Result<AgentRevision> {
        self.get_revision_by_id(id).await
    }

    async fn update_revision(
        &self,
        id: &str,
        expected_version: i64,
        phase: RevisionPhase,
        reason: Option<&str>,
        progress: &crate::model::RevisionProgress,
    ) -> Result<AgentRevision> {
        self.update_revision(id, expected_version, phase, reason, progress)
            .await
    }

    // Agent passes: sql/agents.rs.
    async fn begin_agent_pass(
        &self,
        agent_id: &str,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool> {
        self.begin_agent_pass(agent_id, holder, now, until).await
    }

    async fn end_agent_pass(&self, agent_id: &str, holder: &str) -> Result<()> {
        self.end_agent_pass(agent_id, holder).await
    }

    // Revisions: sql/revisions.rs.
    async fn place_revision(&self, id: &str, cluster: &str) -> Result<()> {
        self.place_revision(id, cluster).await
    }

    async fn activate_revision(&self, namespace: &str, agent: &str, number: i64) -> Result<bool> {
        self.activate_revision(namespace, agent, number).await
    }

    async fn clear_active_revision(&self, namespace: &str, agent: &str) -> Result<()> {
        self.clear_active_revision(namespace, agent).await
    }

    async fn get_revision(
        &self,
        namespace: &str,
        agent: &str,
        number: i64,
    ) -> Result<AgentRevision> {
        self.get_revision(namespace, agent, number).await
    }

    // Clusters: sql/clusters.rs.
    async fn upsert_cluster(&self, c: &ClusterRecord) -> Result<Cluster> {
        self.upsert_cluster(c).await
    }

    async fn list_clusters(&self) -> Result<Vec<Cluster>> {
        self.list_clusters().await
    }

    async fn get_cluster(&self, name: &str) -> Result<Cluster> {
        self.get_cluster(name).await
    }

    // Work queue: sql/work.rs.
    async fn enqueue_work(&self, items: &[NewWork]) -> Result<Vec<String>> {
        self.enqueue_work(items).await
    }

    async fn claim_work(
        &self,
        worker: &str,
        limit: u32,
        lease: Duration,
        now: DateTime<Utc>,
        lane: &WorkLane,
    ) -> Result<Vec<WorkItem>> {
        self.claim_work(worker, limit, lease, now, lane).await
    }

    async fn heartbeat_work(
        &self,
        worker: &str,
        ids: &[String],
        lease_until: DateTime<Utc>,
    ) -> Result<u64> {
        self.heartbeat_work(worker, ids, lease_until).await
    }

    async fn complete_work(&self, worker: &str, ids: &[String], now: DateTime<Utc>) -> Result<u64> {
        self.complete_work(worker, ids, now).await
    }

    async fn retry_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.retry_work(worker, id, run_at, error, now).await
    }

    async fn fail_work(
        &self,
        worker: &str,
        id: &str,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.fail_work(worker, id, error, now).await
    }

    async fn defer_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        self.defer_work(worker, id, run_at, reason, now).await
    }

    async fn release_work(&self, worker: &str, id: &str, now: DateTime<Utc>) -> Result<bool> {
        self.release_work(worker, id, now).await
    }

    async fn recover_expired_work(&self, now: DateTime<Utc>) -> Result<Recovered> {
        self.recover_expired_work(now).await
    }

    async fn reclaim_incarnation(
        &self,
        owner_prefix: &str,
        now: DateTime<Utc>,
    ) -> Result<Reclaimed> {
        self.reclaim_incarnation(owner_prefix, now).await
    }

    async fn get_work(&self, id: &str) -> Result<WorkItem> {
        self.get_work(id).await
    }

    async fn list_work(&self, filter: &WorkFilter) -> Result<Vec<WorkItem>> {
        self.list_work(filter).await
    }

    async fn work_stats(&self, now: DateTime<Utc>) -> Result<WorkStats> {
        self.work_stats(now).await
    }

    async fn next_work_due(&self, lane: &WorkLane) -> Result<WorkDue> {
        self.next_work_due(lane).await
    }

    // Audit: sql/audit.rs.
    async fn append_audit(&self, event: &NewAudit) -> Result<()> {
        self.append_audit(event).await
    }

    async fn list_audit(&self, namespace: Option<&str>, limit: i64) -> Result<Vec<AuditEvent>> {
        self.list_audit(namespace, limit).await
    }

    // API tokens: sql/tokens.rs.
    async fn create_token(&self, token: &NewToken) -> Result<ApiToken> {
        self.create_token(token).await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>> {
        self.find_token(hash).await
    }

    async fn get_token(&self, id: &str) -> Result<ApiToken> {
        self.get_token(id).await
    }

    async fn find_token_by_name(&self, name: &str) -> Result<Option<ApiToken>> {
        self.find_token_by_name(name).await
    }

    async fn revoke_token(&self, name: &str, at: DateTime<Utc>) -> Result<()> {
        self.revoke_token(name, at).await
    }

    // Fleet: sql/fleet.rs.
    async fn fleet_summary(&self, namespace: Option<&str>) -> Result<FleetSummary> {
        self.fleet_summary(namespace).await
    }

    async fn revision_staleness(&self, now: DateTime<Utc>) -> Result<Vec<PhaseStaleness>> {
        self.revision_staleness(now).await
    }

    async fn placed_clusters(&self, namespace: &str) -> Result<Vec<String>> {
        self.placed_clusters(namespace).await
    }

    // Hub secrets and Gateway transport credentials: sql/secrets.rs.
    async fn hub_secret(&self, name: &str, candidate: &str) -> Result<String> {
        self.hub_secret(name, candidate).await
    }

    async fn replace_hub_secret(&self, name: &str, expected: &str, value: &str) -> Result<bool> {
        self.replace_hub_secret(name, expected, value).await
    }

    async fn set_transport_token_hash(&self, revision_id: &str, token_hash: &str) -> Result<()> {
        self.set_transport_token_hash(revision_id, token_hash).await
    }

    async fn transport_token_hash(&self, revision_id: &str) -> Result<Option<String>> {
        self.transport_token_hash(revision_id).await
    }

    async fn revision_by_transport_hash(&self, token_hash: &str) -> Result<Option<String>> {
        self.revision_by_transport_hash(token_hash).await
    }
}
