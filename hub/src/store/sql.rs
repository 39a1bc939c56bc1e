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
mod failover;
mod fleet;
mod namespaces;
mod quotas;
mod revisions;
mod run;
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
    ApiToken, AuditSequenced, Backend, ClusterRecord, Deployed, Effects, FailoverCandidate,
    NewAgent, NewAudit, NewNamespace, NewRevision, NewToken, NewWork, PhaseStaleness, Reclaimed,
    Recovered, Result, Store, StoreError, WorkDue, WorkFilter, WorkLane, WorkStats, postgres,
    sqlite,
};
use crate::model::{
    Agent, AgentRevision, AgentSpec, AuditEvent, Cluster, Configuration, DesiredState,
    FleetSummary, Namespace, NamespaceState, RevisionPhase, WorkItem,
};

pub(super) use clusters::{CLUSTER_COLS, cluster_from_row};
use codec::is_unique_violation;
pub(super) use codec::{from_ms, ms, not_found};
pub(super) use failover::{renew_execution_lease, set_fenced_targets};
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

/// Where [`SqlStore::update_document`] finds a kind of versioned document.
#[derive(Debug, Clone, Copy)]
struct Document {
    table: &'static str,
    /// The kind named in errors.
    kind: &'static str,
    column: &'static str,
}

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
        // Every set of effects carries its audit event.
        self.signals.audit.notify();
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

    /// Replaces the JSON document of a namespaced, versioned row (an
    /// Agent's spec, a Configuration's data) at the caller's version, with
    /// its effects, in one transaction: `Conflict` when the version is
    /// stale, `NotFound` when the row does not exist.
    async fn update_document(
        &self,
        doc: Document,
        namespace: &str,
        name: &str,
        value: String,
        expected: i64,
        fx: &Effects,
    ) -> Result<()> {
        let Document {
            table,
            kind,
            column,
        } = doc;
        // Deleted Agents keep their row (and name) for their history.
        let live = if table == "agents" {
            " AND deleted_at IS NULL"
        } else {
            ""
        };
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let ns_id = self.namespace_id(&mut tx, namespace).await?;
        let query = sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET {column} = $1, version = version + 1, updated_at = $2 \
             WHERE namespace_id = $3 AND name = $4 AND version = $5{live}"
        )))
        .bind(value)
        .bind(ms(now))
        .bind(ns_id.clone())
        .bind(name.to_owned())
        .bind(expected);
        if self.run_in(&mut tx, query).await? == 0 {
            // Why it matched no row: the object exists (so the caller's
            // version is stale) or it does not.
            let query = sqlx::query(AssertSqlSafe(format!(
                "SELECT 1 FROM {table} WHERE namespace_id = $1 AND name = $2{live}"
            )))
            .bind(ns_id)
            .bind(name.to_owned());
            return Err(match self.row_in(&mut tx, query).await? {
                Some(_) => StoreError::Conflict {
                    kind,
                    name: name.to_owned(),
                    expected,
                },
                None => not_found(kind, name),
            });
        }
        self.commit_with_effects(tx, fx, now).await
    }

    async fn namespace_id(&self, tx: &mut Tx, name: &str) -> Result<String> {
        let query = sqlx::query("SELECT id FROM namespaces WHERE name = $1").bind(name.to_owned());
        self.row_in(tx, query)
            .await?
            .map(|row| row.get::<String, _>(0))
            .ok_or_else(|| not_found("namespace", name))
    }

    pub(super) async fn write_effects(
        &self,
        tx: &mut Tx,
        fx: &Effects,
        now: DateTime<Utc>,
    ) -> Result<()> {
        for quota in &fx.quotas {
            quotas::check(self, tx, quota, now).await?;
        }
        audit::insert_audit(self, tx, &fx.audit, now).await?;
        for work in &fx.work {
            work::insert_work(self, tx, work, now).await?;
        }
        Ok(())
    }
}

/// Past `ping`, each method calls the function of the same name in the
/// module of its table, named by that module and taking the store first
/// (`agents::get_agent(self, …)`).
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
        self.run(sqlx::query("SELECT 1")).await?;
        Ok(())
    }

    // Namespaces: sql/namespaces.rs.
    async fn create_namespace(&self, ns: &NewNamespace, fx: &Effects) -> Result<Namespace> {
        namespaces::create_namespace(self, ns, fx).await
    }

    async fn get_namespace(&self, name: &str) -> Result<Namespace> {
        namespaces::get_namespace(self, name).await
    }

    async fn get_namespace_by_id(&self, id: &str) -> Result<Namespace> {
        namespaces::get_namespace_by_id(self, id).await
    }

    async fn list_namespaces(&self, only: Option<&str>) -> Result<Vec<Namespace>> {
        namespaces::list_namespaces(self, only).await
    }

    async fn delete_namespace(&self, name: &str, fx: &Effects) -> Result<()> {
        namespaces::delete_namespace(self, name, fx).await
    }

    // Quotas: sql/quotas.rs.
    async fn quota_usage(
        &self,
        namespace: &str,
        now: DateTime<Utc>,
    ) -> Result<crate::quota::QuotaUsage> {
        quotas::quota_usage(self, namespace, now).await
    }

    async fn set_namespace_state(
        &self,
        id: &str,
        state: NamespaceState,
        reason: Option<&str>,
        fx: &Effects,
    ) -> Result<Namespace> {
        namespaces::set_namespace_state(self, id, state, reason, fx).await
    }

    async fn mark_namespace_provisioned(&self, id: &str, at: DateTime<Utc>) -> Result<Namespace> {
        namespaces::mark_namespace_provisioned(self, id, at).await
    }

    // Configurations: sql/configurations.rs.
    async fn create_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        fx: &Effects,
    ) -> Result<Configuration> {
        configurations::create_configuration(self, namespace, name, data, fx).await
    }

    async fn get_configuration(&self, namespace: &str, name: &str) -> Result<Configuration> {
        configurations::get_configuration(self, namespace, name).await
    }

    async fn list_configurations(&self, namespace: &str) -> Result<Vec<Configuration>> {
        configurations::list_configurations(self, namespace).await
    }

    async fn update_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Configuration> {
        configurations::update_configuration(self, namespace, name, data, expected_version, fx)
            .await
    }

    async fn delete_configuration(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()> {
        configurations::delete_configuration(self, namespace, name, fx).await
    }

    // Agents: sql/agents.rs.
    async fn create_agent(&self, agent: &NewAgent, fx: &Effects) -> Result<Agent> {
        agents::create_agent(self, agent, fx).await
    }

    async fn get_agent(&self, namespace: &str, name: &str) -> Result<Agent> {
        agents::get_agent(self, namespace, name).await
    }

    async fn list_agents(&self, namespace: &str) -> Result<Vec<Agent>> {
        agents::list_agents(self, namespace).await
    }

    async fn update_agent(
        &self,
        namespace: &str,
        name: &str,
        spec: &AgentSpec,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Agent> {
        agents::update_agent(self, namespace, name, spec, expected_version, fx).await
    }

    async fn delete_agent(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()> {
        agents::delete_agent(self, namespace, name, fx).await
    }

    async fn set_desired_state(
        &self,
        namespace: &str,
        name: &str,
        state: DesiredState,
        fx: &Effects,
    ) -> Result<Agent> {
        agents::set_desired_state(self, namespace, name, state, fx).await
    }

    // Revisions: sql/revisions.rs.
    async fn deploy(&self, rev: &NewRevision, fx: &Effects) -> Result<Deployed> {
        revisions::deploy(self, rev, fx).await
    }

    async fn list_revisions(&self, namespace: &str, agent: &str) -> Result<Vec<AgentRevision>> {
        revisions::list_revisions(self, namespace, agent).await
    }

    async fn get_revision_by_id(&self, id: &str) -> Result<AgentRevision> {
        revisions::get_revision_by_id(self, id).await
    }

    async fn update_revision(
        &self,
        id: &str,
        expected_version: i64,
        phase: RevisionPhase,
        reason: Option<&str>,
        progress: &crate::model::RevisionProgress,
    ) -> Result<AgentRevision> {
        revisions::update_revision(self, id, expected_version, phase, reason, progress).await
    }

    // Agent passes: sql/agents.rs.
    async fn begin_agent_pass(
        &self,
        agent_id: &str,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool> {
        agents::begin_agent_pass(self, agent_id, holder, now, until).await
    }

    async fn end_agent_pass(&self, agent_id: &str, holder: &str) -> Result<()> {
        agents::end_agent_pass(self, agent_id, holder).await
    }

    // Revisions: sql/revisions.rs.
    async fn place_revision(&self, id: &str, cluster: &str) -> Result<()> {
        revisions::place_revision(self, id, cluster).await
    }

    async fn activate_revision(&self, namespace: &str, agent: &str, number: i64) -> Result<bool> {
        revisions::activate_revision(self, namespace, agent, number).await
    }

    async fn clear_active_revision(&self, namespace: &str, agent: &str) -> Result<()> {
        revisions::clear_active_revision(self, namespace, agent).await
    }

    async fn get_revision(
        &self,
        namespace: &str,
        agent: &str,
        number: i64,
    ) -> Result<AgentRevision> {
        revisions::get_revision(self, namespace, agent, number).await
    }

    // Clusters: sql/clusters.rs.
    async fn upsert_cluster(&self, c: &ClusterRecord) -> Result<Cluster> {
        clusters::upsert_cluster(self, c).await
    }

    async fn list_clusters(&self) -> Result<Vec<Cluster>> {
        clusters::list_clusters(self).await
    }

    async fn get_cluster(&self, name: &str) -> Result<Cluster> {
        clusters::get_cluster(self, name).await
    }

    async fn set_cordon(
        &self,
        name: &str,
        cordoned_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<Cluster> {
        clusters::set_cordon(self, name, cordoned_at, now, fx).await
    }

    async fn start_drain(
        &self,
        name: &str,
        parallelism: u32,
        requested_by: &str,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<Cluster> {
        clusters::start_drain(self, name, parallelism, requested_by, now, fx).await
    }

    async fn finish_drain(
        &self,
        name: &str,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        clusters::finish_drain(self, name, started_at, now).await
    }

    async fn drain_revisions(
        &self,
        name: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<AgentRevision>> {
        clusters::drain_revisions(self, name, since).await
    }

    async fn execution_lease(&self, cluster: &str) -> Result<Option<DateTime<Utc>>> {
        failover::execution_lease(self, cluster).await
    }

    async fn failover_candidates(
        &self,
        lapsed_before: DateTime<Utc>,
        retry_before: DateTime<Utc>,
    ) -> Result<Vec<FailoverCandidate>> {
        failover::failover_candidates(self, lapsed_before, retry_before).await
    }

    // Work queue: sql/work.rs.
    async fn enqueue_work(&self, items: &[NewWork]) -> Result<Vec<String>> {
        work::enqueue_work(self, items).await
    }

    async fn claim_work(
        &self,
        worker: &str,
        limit: u32,
        lease: Duration,
        now: DateTime<Utc>,
        lane: &WorkLane,
    ) -> Result<Vec<WorkItem>> {
        work::claim_work(self, worker, limit, lease, now, lane).await
    }

    async fn heartbeat_work(
        &self,
        worker: &str,
        ids: &[String],
        lease_until: DateTime<Utc>,
    ) -> Result<u64> {
        work::heartbeat_work(self, worker, ids, lease_until).await
    }

    async fn complete_work(&self, worker: &str, ids: &[String], now: DateTime<Utc>) -> Result<u64> {
        work::complete_work(self, worker, ids, now).await
    }

    async fn retry_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        work::retry_work(self, worker, id, run_at, error, now).await
    }

    async fn fail_work(
        &self,
        worker: &str,
        id: &str,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        work::fail_work(self, worker, id, error, now).await
    }

    async fn defer_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        work::defer_work(self, worker, id, run_at, reason, now).await
    }

    async fn release_work(&self, worker: &str, id: &str, now: DateTime<Utc>) -> Result<bool> {
        work::release_work(self, worker, id, now).await
    }

    async fn recover_expired_work(&self, now: DateTime<Utc>) -> Result<Recovered> {
        work::recover_expired_work(self, now).await
    }

    async fn reclaim_incarnation(
        &self,
        owner_prefix: &str,
        now: DateTime<Utc>,
    ) -> Result<Reclaimed> {
        work::reclaim_incarnation(self, owner_prefix, now).await
    }

    async fn get_work(&self, id: &str) -> Result<WorkItem> {
        work::get_work(self, id).await
    }

    async fn list_work(&self, filter: &WorkFilter) -> Result<Vec<WorkItem>> {
        work::list_work(self, filter).await
    }

    async fn work_stats(&self, now: DateTime<Utc>) -> Result<WorkStats> {
        work::work_stats(self, now).await
    }

    async fn next_work_due(&self, lane: &WorkLane) -> Result<WorkDue> {
        work::next_work_due(self, lane).await
    }

    // Audit: sql/audit.rs.
    async fn append_audit(&self, event: &NewAudit) -> Result<()> {
        audit::append_audit(self, event).await
    }

    async fn list_audit(&self, namespace: Option<&str>, limit: i64) -> Result<Vec<AuditEvent>> {
        audit::list_audit(self, namespace, limit).await
    }

    async fn sequence_audit(&self, limit: i64) -> Result<AuditSequenced> {
        audit::sequence_audit(self, limit).await
    }

    async fn audit_after(
        &self,
        cursor: i64,
        namespace: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AuditEvent>> {
        audit::audit_after(self, cursor, namespace, limit).await
    }

    async fn audit_head(&self) -> Result<i64> {
        audit::audit_head(self).await
    }

    // API tokens: sql/tokens.rs.
    async fn create_token(&self, token: &NewToken) -> Result<ApiToken> {
        tokens::create_token(self, token).await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>> {
        tokens::find_token(self, hash).await
    }

    async fn get_token(&self, id: &str) -> Result<ApiToken> {
        tokens::get_token(self, id).await
    }

    async fn find_token_by_name(&self, name: &str) -> Result<Option<ApiToken>> {
        tokens::find_token_by_name(self, name).await
    }

    async fn revoke_token(&self, name: &str, at: DateTime<Utc>) -> Result<()> {
        tokens::revoke_token(self, name, at).await
    }

    // Fleet: sql/fleet.rs.
    async fn fleet_summary(&self, namespace: Option<&str>) -> Result<FleetSummary> {
        fleet::fleet_summary(self, namespace).await
    }

    async fn revision_staleness(&self, now: DateTime<Utc>) -> Result<Vec<PhaseStaleness>> {
        fleet::revision_staleness(self, now).await
    }

    async fn placed_clusters(&self, namespace: &str) -> Result<Vec<String>> {
        fleet::placed_clusters(self, namespace).await
    }

    // Hub secrets and Gateway transport credentials: sql/secrets.rs.
    async fn hub_secret(&self, name: &str, candidate: &str) -> Result<String> {
        secrets::hub_secret(self, name, candidate).await
    }

    async fn replace_hub_secret(&self, name: &str, expected: &str, value: &str) -> Result<bool> {
        secrets::replace_hub_secret(self, name, expected, value).await
    }

    async fn set_transport_token_hash(&self, revision_id: &str, token_hash: &str) -> Result<()> {
        secrets::set_transport_token_hash(self, revision_id, token_hash).await
    }

    async fn transport_token_hash(&self, revision_id: &str) -> Result<Option<String>> {
        secrets::transport_token_hash(self, revision_id).await
    }

    async fn revision_by_transport_hash(&self, token_hash: &str) -> Result<Option<String>> {
        secrets::revision_by_transport_hash(self, token_hash).await
    }
}
