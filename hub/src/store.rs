//! Desired-state store: one trait, a PostgreSQL and a SQLite backend.
//!
//! # Layout
//! - this file: the [`Store`] trait, its input types and [`StoreError`].
//! - `sql.rs`: the SQL both backends share, written once over sqlx's `Any`
//!   driver with `$N` placeholders (SQLite accepts them too).
//! - `link.rs`, `sql_link.rs`: the spoke link's part (bootstrap tokens,
//!   certificates, the durable per-cluster outbox, reports).
//! - `group.rs`: group commit of the link's hot writes (outbox puts, acks,
//!   reports): one transaction for the writes that queue up together.
//! - `credentials.rs`, `sql_credentials.rs`: managed Agent credentials,
//!   sealed (the store never sees a plaintext), and the copies deploys
//!   freeze into revisions.
//! - `session.rs`, `sql_session.rs`: which hub replica owns each
//!   cluster's link session (fencing epoch, lease).
//! - `watch.rs`, `sql_watch.rs`: the watch API's durable, bounded, ordered
//!   event log.
//! - `postgres.rs`, `sqlite.rs`: what differs per backend: connecting,
//!   the work-claim statement and error classification.
//! - `schema.rs`: migrations, applied (`clawfed-hub migrate`) or checked
//!   (`serve` with an application role that has no DDL rights).
//!
//! Every mutation of desired state takes [`Effects`]: its audit event and
//! the work it enqueues are written in the same transaction, so an audit
//! record or a work item can never be lost or be left without its change.

pub mod clock;
mod credentials;
mod group;
mod link;
mod postgres;
mod schema;
mod session;
mod sql;
mod sql_credentials;
mod sql_link;
mod sql_session;
mod sql_watch;
mod sqlite;
mod watch;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::auth::Role;
use crate::model::{
    Agent, AgentRevision, AgentSpec, AuditEvent, Cluster, Configuration, ConnectionState,
    DesiredState, FleetSummary, ImageRef, Namespace, WorkItem, WorkState,
};

pub use credentials::*;
pub use group::GroupStats;
pub use link::*;
pub use schema::{MigrationInfo, Migrations, SchemaError, SchemaStatus};
pub use session::*;
pub use sql::SqlStore;
pub use watch::*;

/// Result type of the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist.
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    /// An object with that identity already exists.
    #[error("{kind} {name:?} already exists")]
    AlreadyExists { kind: &'static str, name: String },
    /// The caller's version is stale: someone else changed the object.
    #[error(
        "{kind} {name:?} was changed concurrently (expected version {expected}); read it again"
    )]
    Conflict {
        kind: &'static str,
        name: String,
        expected: i64,
    },
    /// The change is not allowed in the object's current state.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The database cannot be reached or is overloaded; retrying may help.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// Applying migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database's schema is not this binary's (a migration pending,
    /// or a newer release's schema).
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A stored value could not be decoded (a bug or a hand-edited row).
    #[error("stored {what} is corrupt: {detail}")]
    Corrupt { what: &'static str, detail: String },
    /// The database URL names no supported backend.
    #[error("unsupported database url {0:?}: use postgres://… or sqlite://…")]
    UnsupportedUrl(String),
    /// The write would take a tenant past a quota; it was rolled back.
    #[error(transparent)]
    QuotaExceeded(#[from] crate::quota::QuotaExceeded),
}

/// Which backend a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// An audit event to append.
#[derive(Debug, Clone)]
pub struct NewAudit {
    pub actor: String,
    pub action: String,
    pub namespace: Option<String>,
    pub target: String,
    pub result: String,
    pub detail: Option<String>,
}

/// What [`Store::sequence_audit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditSequenced {
    /// The newest cursor given out.
    pub head: i64,
    /// Events given a cursor by this call.
    pub stamped: u64,
}

/// A work item to enqueue.
#[derive(Debug, Clone)]
pub struct NewWork {
    pub kind: String,
    pub namespace_id: Option<String>,
    pub target: String,
    pub payload: serde_json::Value,
    pub requested_by: Option<String>,
    pub max_attempts: i32,
    pub run_at: DateTime<Utc>,
    /// Joins a pending item of the same kind and target that has not run
    /// yet and has no requester, keeping the earlier due time of the two,
    /// instead of adding a second (only when this one has no requester
    /// either). For work that reads all its input when it runs, such as a
    /// rollout pass: a second item beside the first would only repeat it,
    /// and passes that queue passes must not multiply.
    pub coalesce: bool,
}

/// The side effects written atomically with a mutation.
#[derive(Debug, Clone)]
pub struct Effects {
    pub audit: NewAudit,
    pub work: Vec<NewWork>,
    /// Tenant quotas the write must stay within, checked in its
    /// transaction after the write (over one: rolled back, nothing kept).
    pub quotas: Vec<QuotaCheck>,
}

impl Effects {
    /// Just the audit event.
    pub fn audit(audit: NewAudit) -> Self {
        Self {
            audit,
            work: Vec::new(),
            quotas: Vec::new(),
        }
    }
}

/// One tenant quota a write must stay within.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaCheck {
    pub namespace: String,
    pub kind: crate::quota::QuotaKind,
    pub limit: i64,
}

/// A namespace to create.
#[derive(Debug, Clone)]
pub struct NewNamespace {
    pub id: String,
    pub name: String,
    pub display_name: String,
    pub data_plane_namespace: String,
    pub adopted: bool,
}

/// An Agent to create.
#[derive(Debug, Clone)]
pub struct NewAgent {
    pub namespace: String,
    pub name: String,
    pub spec: AgentSpec,
}

/// A deploy: the snapshot to freeze into a new revision.
#[derive(Debug, Clone)]
pub struct NewRevision {
    /// Chosen by the caller so work for the revision can be queued with it.
    pub id: String,
    pub namespace: String,
    pub agent: String,
    /// The draft version the snapshot was made from; a concurrent edit of
    /// the draft makes the deploy a conflict instead of a mixed snapshot.
    pub agent_version: i64,
    pub spec: AgentSpec,
    pub configuration: serde_json::Value,
    pub images: Vec<ImageRef>,
    pub resolved_cluster: Option<String>,
    pub rolled_back_from: Option<i64>,
    /// A drain's move: the copy of the revision running on the drained
    /// cluster, deployed only while that revision is still the Agent's
    /// latest and the Agent is asked to run.
    pub moved: Option<Move>,
    pub idempotency: Option<IdempotencyKey>,
    /// The API token (id) that asked for it.
    pub requested_by: Option<String>,
}

/// A revision a failover scan looks at, with its cluster's lease.
#[derive(Debug, Clone)]
pub struct FailoverCandidate {
    /// The Agent's active revision, on the cluster it may leave.
    pub revision: AgentRevision,
    /// The Agent's latest revision: the active one, or a move of it off
    /// that cluster which failed (for example: no cluster took it) before
    /// the scan's retry cut-off. A new move copies this one.
    pub latest_revision: i64,
    pub namespace_id: String,
    /// The newest execution lease renewal of its cluster's spoke.
    pub lease_renewed_at: Option<DateTime<Utc>>,
    /// The Harness work targets its cluster's spoke reports it fenced.
    pub fenced_targets: Vec<String>,
}

/// What a drain's move of an Agent copies, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The drained cluster.
    pub cluster: String,
    /// The revision running there: the Agent's latest when the move is
    /// deployed, or the move is refused (a deploy of the Agent's own
    /// came first).
    pub revision: i64,
}

/// A client-supplied idempotency key and the fingerprint of its request.
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    pub key: String,
    pub fingerprint: String,
}

/// The outcome of a deploy.
#[derive(Debug, Clone)]
pub struct Deployed {
    pub revision: AgentRevision,
    /// False when an idempotent retry returned the earlier revision.
    pub created: bool,
}

/// A stored API token (never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub namespace: Option<String>,
    pub namespace_id: Option<String>,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiToken> for crate::auth::Principal {
    /// The caller a (valid) token stands for.
    fn from(token: ApiToken) -> Self {
        Self {
            token_id: token.id,
            token_name: token.name,
            role: token.role,
            namespace: token.namespace,
        }
    }
}

/// A token to create.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub name: String,
    /// Namespace name; `None` only for installation admins.
    pub namespace: Option<String>,
    pub role: Role,
    pub hash: String,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A cluster record to insert or update by name.
#[derive(Debug, Clone)]
pub struct ClusterRecord {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
    pub certificate_serials: Vec<String>,
    pub connection_state: ConnectionState,
    pub last_seen: Option<DateTime<Utc>>,
    pub version: String,
}

/// Filter of a work listing.
#[derive(Debug, Clone, Default)]
pub struct WorkFilter {
    pub namespace: Option<String>,
    pub state: Option<WorkState>,
    pub limit: i64,
}

/// Outstanding work, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkStats {
    /// Items pending or claimed.
    pub pending: i64,
    /// How long the longest-waiting due item (pending or claimed) has been
    /// due; items scheduled for later do not count.
    pub oldest_pending_age: Option<Duration>,
}

/// Revisions of one in-progress phase, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseStaleness {
    /// The phase's wire spelling.
    pub phase: String,
    /// Revisions in the phase.
    pub revisions: i64,
    /// How long the least recently updated of them has gone without an
    /// update. Every pass that decides a step writes the revision, and a pass
    /// past the phase's deadline fails it, so an age past the deadline means
    /// no pass has run since: the revision is stuck.
    pub oldest_update_age: Duration,
}

/// Which kinds of work a worker claims. Kinds that wait on something slow
/// (a Gateway ensure against the control apiserver) get a worker of their
/// own, so they never take the slots of the pipeline's short passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WorkLane {
    /// Every kind.
    #[default]
    All,
    /// Only these kinds.
    Only(Vec<String>),
    /// Every kind but these.
    Except(Vec<String>),
}

impl WorkLane {
    /// The kinds named, as the JSON array the claim binds (`None` for
    /// [`WorkLane::All`], which binds nothing).
    pub fn kinds_json(&self) -> Option<String> {
        match self {
            WorkLane::All => None,
            WorkLane::Only(k) | WorkLane::Except(k) => {
                Some(serde_json::to_string(k).unwrap_or_else(|_| "[]".into()))
            }
        }
    }
}

/// What taking back a dead incarnation's claims did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Work claims returned to pending.
    pub work: u64,
    /// Agent-pass leases released.
    pub passes: u64,
}

/// What recovering expired leases did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Claims returned to pending for another worker.
    pub requeued: u64,
    /// Claims that had used their last attempt and were failed.
    pub failed: u64,
}

/// When the queue next has something for a worker, as far as the store
/// can tell cheaply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkDue {
    /// The earliest `run_at` of a pending item (may be in the past).
    pub next_run_at: Option<DateTime<Utc>>,
    /// The earliest lease expiry of a claimed item (then it is recovered).
    pub next_lease_expiry: Option<DateTime<Utc>>,
}

/// The desired-state store.
#[async_trait]
pub trait Store:
    LinkStore + CredentialStore + WatchStore + SessionStore + Send + Sync + 'static
{
    /// Which backend this is.
    fn backend(&self) -> Backend;
    /// What this store signals after its commits, so waiting loops in this
    /// process wake at once (writes by other processes are only seen by
    /// their safety polls).
    fn signals(&self) -> crate::wake::StoreSignals;
    /// Checks the database answers (for `/readyz`).
    async fn ping(&self) -> Result<()>;
    /// Now, by the database's clock ([`clock::StoreClock`]): what leases
    /// are stamped and judged by, so replicas whose clocks disagree agree
    /// on them.
    fn now(&self) -> DateTime<Utc>;
    /// Measures the database's clock again; returns its offset from this
    /// process's (zero on SQLite, which is in process).
    async fn sync_clock(&self) -> Result<chrono::Duration>;

    // Namespaces.
    async fn create_namespace(&self, ns: &NewNamespace, fx: &Effects) -> Result<Namespace>;
    async fn get_namespace(&self, name: &str) -> Result<Namespace>;
    async fn get_namespace_by_id(&self, id: &str) -> Result<Namespace>;
    /// All namespaces, or only `only` when given.
    async fn list_namespaces(&self, only: Option<&str>) -> Result<Vec<Namespace>>;
    /// Deletes an empty namespace (no Agents); its tokens go with it.
    async fn delete_namespace(&self, name: &str, fx: &Effects) -> Result<()>;
    /// What tenant `namespace` has in use of each quota; revisions count
    /// from an hour before `now`.
    async fn quota_usage(
        &self,
        namespace: &str,
        now: DateTime<Utc>,
    ) -> Result<crate::quota::QuotaUsage>;
    /// Sets a namespace's state (and why), with its audit and work.
    async fn set_namespace_state(
        &self,
        id: &str,
        state: crate::model::NamespaceState,
        reason: Option<&str>,
        fx: &Effects,
    ) -> Result<Namespace>;
    /// Records that provisioning finished; idempotent.
    async fn mark_namespace_provisioned(&self, id: &str, at: DateTime<Utc>) -> Result<Namespace>;

    // Configurations.
    async fn create_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        fx: &Effects,
    ) -> Result<Configuration>;
    async fn get_configuration(&self, namespace: &str, name: &str) -> Result<Configuration>;
    async fn list_configurations(&self, namespace: &str) -> Result<Vec<Configuration>>;
    async fn update_configuration(
        &self,
        namespace: &str,
        name: &str,
        data: &serde_json::Value,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Configuration>;
    async fn delete_configuration(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()>;

    // Agents.
    async fn create_agent(&self, agent: &NewAgent, fx: &Effects) -> Result<Agent>;
    async fn get_agent(&self, namespace: &str, name: &str) -> Result<Agent>;
    async fn list_agents(&self, namespace: &str) -> Result<Vec<Agent>>;
    async fn update_agent(
        &self,
        namespace: &str,
        name: &str,
        spec: &AgentSpec,
        expected_version: i64,
        fx: &Effects,
    ) -> Result<Agent>;
    /// Deletes a stopped Agent and its revisions.
    async fn delete_agent(&self, namespace: &str, name: &str, fx: &Effects) -> Result<()>;
    async fn set_desired_state(
        &self,
        namespace: &str,
        name: &str,
        state: DesiredState,
        fx: &Effects,
    ) -> Result<Agent>;

    // Revisions.
    /// Freezes a new revision (numbered after the latest), or returns the
    /// revision an earlier call with the same idempotency key made. The
    /// Agent's current sealed credentials are copied into the revision in
    /// the same transaction.
    async fn deploy(&self, rev: &NewRevision, fx: &Effects) -> Result<Deployed>;
    async fn list_revisions(&self, namespace: &str, agent: &str) -> Result<Vec<AgentRevision>>;
    async fn get_revision_by_id(&self, id: &str) -> Result<AgentRevision>;
    /// Records a revision's phase, reason and progress if it is still at
    /// `expected_version` (compare-and-swap); `Conflict` when another pass
    /// saved first, so a stale pass never overwrites newer progress.
    async fn update_revision(
        &self,
        id: &str,
        expected_version: i64,
        phase: crate::model::RevisionPhase,
        reason: Option<&str>,
        progress: &crate::model::RevisionProgress,
    ) -> Result<AgentRevision>;
    /// Records the cluster a revision was placed on (once).
    async fn place_revision(&self, id: &str, cluster: &str) -> Result<()>;
    /// Points the Agent at revision `number` as active, only while the
    /// Agent is running and `number` is its latest revision. Returns
    /// whether it did.
    async fn activate_revision(&self, namespace: &str, agent: &str, number: i64) -> Result<bool>;
    /// The Agent has no active revision (it was stopped).
    async fn clear_active_revision(&self, namespace: &str, agent: &str) -> Result<()>;
    /// Takes the Agent's pipeline lease for `holder` until `until` (or
    /// extends it when `holder` has it). False while another holder's lease
    /// is live: one pass per Agent at a time, across hub processes.
    async fn begin_agent_pass(
        &self,
        agent_id: &str,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool>;
    /// Gives the lease back (no-op unless `holder` has it).
    async fn end_agent_pass(&self, agent_id: &str, holder: &str) -> Result<()>;
    async fn get_revision(
        &self,
        namespace: &str,
        agent: &str,
        number: i64,
    ) -> Result<AgentRevision>;

    // Clusters.
    async fn upsert_cluster(&self, cluster: &ClusterRecord) -> Result<Cluster>;
    async fn list_clusters(&self) -> Result<Vec<Cluster>>;
    async fn get_cluster(&self, name: &str) -> Result<Cluster>;
    /// Cordons cluster `name` at `cordoned_at` (a cordoned one keeps its
    /// first time) or uncordons it (`None`), which also ends a running
    /// drain at `now`.
    async fn set_cordon(
        &self,
        name: &str,
        cordoned_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<Cluster>;
    /// Starts a drain of cluster `name` at `now` (cordoning it), or, while
    /// one runs, gives it the new `parallelism`; `fx` queues its pass.
    async fn start_drain(
        &self,
        name: &str,
        parallelism: u32,
        requested_by: &str,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<Cluster>;
    /// Ends cluster `name`'s drain that started at `started_at`, if it
    /// still runs (a newer drain is left alone).
    async fn finish_drain(
        &self,
        name: &str,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// What a drain of cluster `name` started at `since` concerns: the
    /// unfinished revisions (pending to stopping) of every Agent that has
    /// one placed there or moved one away since, and those moves.
    async fn drain_revisions(&self, name: &str, since: DateTime<Utc>)
    -> Result<Vec<AgentRevision>>;
    /// When the newest execution lease renewal of cluster `cluster`'s
    /// spoke was recorded (none: never).
    async fn execution_lease(&self, cluster: &str) -> Result<Option<DateTime<Utc>>>;
    /// What a failover scan looks at: the active revisions of running
    /// failover-enabled Agents on clusters that reported a fence or
    /// recorded no lease renewal since `lapsed_before`, when the revision
    /// is the Agent's latest or the latest is a move of it off that
    /// cluster that failed before `retry_before` (a move retried).
    async fn failover_candidates(
        &self,
        lapsed_before: DateTime<Utc>,
        retry_before: DateTime<Utc>,
    ) -> Result<Vec<FailoverCandidate>>;

    // Work queue.
    async fn enqueue_work(&self, items: &[NewWork]) -> Result<Vec<String>>;
    /// Claims up to `limit` due pending items of `lane` for `worker` until
    /// `now + lease`, counting an attempt on each. Concurrent claimers never
    /// get the same item.
    async fn claim_work(
        &self,
        worker: &str,
        limit: u32,
        lease: Duration,
        now: DateTime<Utc>,
        lane: &WorkLane,
    ) -> Result<Vec<WorkItem>>;
    /// Extends the leases `worker` still holds; returns how many it holds.
    async fn heartbeat_work(
        &self,
        worker: &str,
        ids: &[String],
        lease_until: DateTime<Utc>,
    ) -> Result<u64>;
    /// Marks items done; only the lease holder may. Returns how many.
    async fn complete_work(&self, worker: &str, ids: &[String], now: DateTime<Utc>) -> Result<u64>;
    /// Returns a claimed item to pending, due at `run_at`, keeping `error`.
    async fn retry_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Fails a claimed item for good, keeping `error`.
    async fn fail_work(
        &self,
        worker: &str,
        id: &str,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Gives a claimed item back to pending, due at `run_at`, without
    /// counting the attempt (the work was busy, not failing), keeping
    /// `reason` as its last error.
    async fn defer_work(
        &self,
        worker: &str,
        id: &str,
        run_at: DateTime<Utc>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
    /// Gives a claimed item back untouched (shutdown interrupted it): it is
    /// pending again, due now, and the attempt is not counted.
    async fn release_work(&self, worker: &str, id: &str, now: DateTime<Utc>) -> Result<bool>;
    /// Returns claims whose lease expired to pending (or fails them when
    /// they used their last attempt).
    async fn recover_expired_work(&self, now: DateTime<Utc>) -> Result<Recovered>;
    /// Takes back, at once, the work claims and Agent-pass leases whose
    /// holder names start with `owner_prefix` (a restarted hub's dead
    /// incarnation, `<instance id>~`): the claims return to pending, due
    /// `now`, the attempt not counted; the passes are released.
    async fn reclaim_incarnation(
        &self,
        owner_prefix: &str,
        now: DateTime<Utc>,
    ) -> Result<Reclaimed>;
    async fn get_work(&self, id: &str) -> Result<WorkItem>;
    async fn list_work(&self, filter: &WorkFilter) -> Result<Vec<WorkItem>>;
    async fn work_stats(&self, now: DateTime<Utc>) -> Result<WorkStats>;
    /// When pending work of `lane` falls due next and when the first claim
    /// (of any kind) expires: how long an idle worker of `lane` may sleep.
    async fn next_work_due(&self, lane: &WorkLane) -> Result<WorkDue>;

    // Audit.
    async fn append_audit(&self, event: &NewAudit) -> Result<()>;
    /// Newest first; `namespace` restricts to one tenant.
    async fn list_audit(&self, namespace: Option<&str>, limit: i64) -> Result<Vec<AuditEvent>>;
    /// Gives committed events their stream cursors, in the order they
    /// became visible (at most `limit` per call).
    async fn sequence_audit(&self, limit: i64) -> Result<AuditSequenced>;
    /// Sequenced events after `cursor`, oldest first, at most `limit`;
    /// `namespace` restricts to one tenant.
    async fn audit_after(
        &self,
        cursor: i64,
        namespace: Option<&str>,
        limit: i64,
    ) -> Result<Vec<AuditEvent>>;
    /// The newest audit cursor given out (0: none).
    async fn audit_head(&self) -> Result<i64>;

    // API tokens.
    async fn create_token(&self, token: &NewToken) -> Result<ApiToken>;
    /// Looks a token up by the hash of its secret.
    async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>>;
    async fn get_token(&self, id: &str) -> Result<ApiToken>;
    /// Looks a token up by its (unique) name: how a client certificate's
    /// CN is resolved.
    async fn find_token_by_name(&self, name: &str) -> Result<Option<ApiToken>>;
    async fn revoke_token(&self, name: &str, at: DateTime<Utc>) -> Result<()>;

    // Fleet.
    /// Counts, for one namespace or (None) the whole installation. Scoped to
    /// a namespace, clusters count only where its revisions are placed.
    async fn fleet_summary(&self, namespace: Option<&str>) -> Result<FleetSummary>;
    /// Names of the clusters `namespace`'s revisions are placed on (their
    /// resolved cluster), sorted.
    async fn placed_clusters(&self, namespace: &str) -> Result<Vec<String>>;
    /// Per in-progress phase (pending, provisioning, preparing,
    /// waiting-ready, stopping) that has revisions: their count and the age
    /// of the least recently updated one at `now`.
    async fn revision_staleness(&self, now: DateTime<Utc>) -> Result<Vec<PhaseStaleness>>;

    // Hub secrets and Gateway transport credentials.
    /// The hub secret `name`: the stored value, or `candidate` stored now
    /// when there is none. The first writer wins, so every hub replica on
    /// this database gets the same value.
    async fn hub_secret(&self, name: &str, candidate: &str) -> Result<String>;
    /// Replaces the hub secret `name` with `value` only while it still
    /// holds `expected` (compare-and-set: a replica or operator that
    /// changed it meanwhile wins). Returns whether it was replaced.
    async fn replace_hub_secret(&self, name: &str, expected: &str, value: &str) -> Result<bool>;
    /// Records the SHA-256 (hex) of a revision's Gateway transport token,
    /// replacing an earlier one. `NotFound` when the revision does not exist.
    async fn set_transport_token_hash(&self, revision_id: &str, token_hash: &str) -> Result<()>;
    /// The recorded transport token hash of a revision.
    async fn transport_token_hash(&self, revision_id: &str) -> Result<Option<String>>;
    /// The revision whose Gateway transport token has this hash (how a
    /// tunnel ingress authenticates a Gateway).
    async fn revision_by_transport_hash(&self, token_hash: &str) -> Result<Option<String>>;
}

/// Connection pool settings (PostgreSQL; SQLite always holds one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Connections held at most.
    pub max_connections: u32,
    /// How long a call waits for a connection.
    pub acquire_timeout: std::time::Duration,
}

impl Default for PoolSettings {
    /// The hub's defaults with the default worker batch (32 + 16).
    fn default() -> Self {
        Self {
            max_connections: 48,
            acquire_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// Opens the store a database URL names (`postgres://…`, `sqlite://…`) and
/// applies pending migrations (tests and tools acting as the migration
/// role; the hub itself uses [`open`]).
pub async fn connect(url: &str) -> Result<SqlStore> {
    connect_with(url, PoolSettings::default()).await
}

/// [`connect`] with explicit pool settings.
pub async fn connect_with(url: &str, pool: PoolSettings) -> Result<SqlStore> {
    open(url, pool, Migrations::Apply).await
}

/// Opens the store, applying pending migrations or requiring none
/// ([`Migrations`]).
pub async fn open(url: &str, pool: PoolSettings, migrations: Migrations) -> Result<SqlStore> {
    Ok(open_reporting(url, pool, migrations).await?.0)
}

/// What `clawfed-hub migrate` did.
#[derive(Debug, Clone)]
pub struct MigrateReport {
    /// The migrations applied now, in order (none when up to date).
    pub applied: Vec<MigrationInfo>,
    /// The newest migration of the schema.
    pub version: i64,
    /// The schema the application role was granted, when one was named.
    pub granted_schema: Option<String>,
}

/// Applies pending migrations and, when `application_role` is named
/// (PostgreSQL), grants it the rows of every table and nothing more
/// (see `schema::grant_application_role`). Idempotent.
pub async fn migrate(
    url: &str,
    pool: PoolSettings,
    application_role: Option<&str>,
) -> Result<MigrateReport> {
    let (store, applied) = open_reporting(url, pool, Migrations::Apply).await?;
    let mut conn = store
        .pool()
        .acquire()
        .await
        .map_err(|e| store.classify(e))?;
    let granted_schema = match application_role {
        None => None,
        Some(_) if store.backend() != Backend::Postgres => {
            return Err(StoreError::FailedPrecondition(
                "an application role applies to PostgreSQL only".into(),
            ));
        }
        Some(role) => Some(
            schema::grant_application_role(&mut conn, role)
                .await
                .map_err(|e| store.classify(e))?,
        ),
    };
    let version = schema::newest_applied(&mut conn, store.backend())
        .await
        .map_err(|e| store.classify(e))?;
    Ok(MigrateReport {
        applied,
        version,
        granted_schema,
    })
}

/// Opens the store without applying or checking migrations, and reads its
/// schema beside this binary's (`clawfed-hub version`). Read the store's
/// rows only when the schema is current.
pub async fn inspect(url: &str, pool: PoolSettings) -> Result<(SqlStore, SchemaStatus)> {
    let (store, _) = open_reporting(url, pool, Migrations::Inspect).await?;
    let migrator = match store.backend() {
        Backend::Postgres => &postgres::MIGRATOR,
        Backend::Sqlite => &sqlite::MIGRATOR,
    };
    let mut conn = store
        .pool()
        .acquire()
        .await
        .map_err(|e| store.classify(e))?;
    let status = schema::status(&mut conn, store.backend(), migrator)
        .await
        .map_err(|e| store.classify(e))?;
    drop(conn);
    Ok((store, status))
}

async fn open_reporting(
    url: &str,
    pool: PoolSettings,
    migrations: Migrations,
) -> Result<(SqlStore, Vec<MigrationInfo>)> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        postgres::connect(url, pool, migrations).await
    } else if url.starts_with("sqlite:") {
        sqlite::connect(url, migrations).await
    } else {
        Err(StoreError::UnsupportedUrl(url.to_owned()))
    }
}
