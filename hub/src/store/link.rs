//! The spoke link's part of the store: bootstrap tokens, certificates and
//! revocation, the durable per-cluster outbox, and spoke reports.
//!
//! The outbox is level-based: an item carries the FULL desired spec of its
//! target at a generation. Putting a newer generation deletes the older
//! unacked items of that target (supersession before sending), so a spoke
//! that was away receives only what is current.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{Effects, Result};
use crate::model::{Cluster, ConnectionState};

/// What a spoke says of itself in its Hello: it replaces what the store
/// holds for the cluster.
#[derive(Debug, Clone, Copy)]
pub struct SpokeHello<'a> {
    pub version: &'a str,
    pub capabilities: &'a [String],
    /// The cluster's labels, from the spoke's configuration.
    pub labels: &'a std::collections::BTreeMap<String, String>,
}

/// A bootstrap token to create (the secret is shown once; this is its hash).
#[derive(Debug, Clone)]
pub struct NewBootstrapToken {
    pub cluster_name: String,
    pub hash: String,
    /// An admin's decision that this token may re-enroll an existing name.
    pub reenroll: bool,
    /// Enrollment waits for `cluster approve` before a certificate is issued.
    pub require_approval: bool,
    pub created_by: String,
    pub expires_at: DateTime<Utc>,
}

/// A stored bootstrap token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub cluster_name: String,
    pub reenroll: bool,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
}

/// Why an enrollment was refused. Nothing is changed when it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnrollRejected {
    /// No token has that secret.
    #[error("unknown bootstrap token")]
    UnknownToken,
    /// The token was used before (tokens are single-use).
    #[error("bootstrap token was already used")]
    TokenUsed,
    /// The token's lifetime is over.
    #[error("bootstrap token expired")]
    TokenExpired,
    /// The token was issued for another cluster name.
    #[error("bootstrap token was issued for another cluster name")]
    WrongCluster,
    /// The token needs an admin's approval, which has not been given yet;
    /// the spoke retries. Nothing is consumed.
    #[error("enrollment is awaiting approval (clawfed-hub cluster approve NAME)")]
    AwaitingApproval,
    /// The name is enrolled and the token carries no re-enrollment decision.
    #[error(
        "cluster {0:?} is already enrolled; re-enrollment needs a token created with --reenroll"
    )]
    AlreadyEnrolled(String),
    /// Another enrolled cluster name is the same Kubernetes cluster (its
    /// kube-system UID): shared clusters are unsupported. Nothing is
    /// consumed.
    #[error(
        "this Kubernetes cluster (kube-system uid {uid}) is already enrolled as {other:?}: \
         shared execution clusters are not supported (one spoke per cluster); start the \
         spoke with --allow-shared-cluster to enrol anyway"
    )]
    SharedCluster {
        /// The name it is enrolled under.
        other: String,
        /// The kube-system namespace UID both report.
        uid: String,
    },
}

/// What a spoke says about the cluster it enrols.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterClaim {
    /// The UID of the cluster's kube-system namespace.
    pub kubernetes_uid: Option<String>,
    /// The operator forced enrolment into a cluster another name has.
    pub allow_shared: bool,
}

/// A certificate's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateStatus {
    pub cluster_id: String,
    pub revoked: bool,
}

/// A revoked certificate (for the in-memory deny-list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedCertificate {
    pub cluster_id: String,
    pub serial: String,
    pub revoked_at: DateTime<Utc>,
    /// The revocation's place in commit order: page by it, never by
    /// `revoked_at` (the revoker's clock, read before its commit).
    pub sequence: i64,
}

/// One outbox item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    pub cluster_id: String,
    pub sequence: i64,
    pub target: String,
    pub kind: String,
    pub generation: i64,
    /// The full desired spec, JSON.
    pub spec: String,
    pub created_at: DateTime<Utc>,
}

/// Unacked outbox items of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxSummary {
    pub cluster_id: String,
    pub cluster_name: String,
    pub depth: i64,
    pub max_sequence: i64,
}

/// A stored report from a spoke, the latest per (target, kind).
#[derive(Debug, Clone, PartialEq)]
pub struct SpokeReport {
    pub cluster_id: String,
    pub target: String,
    pub kind: String,
    pub generation: i64,
    pub body: serde_json::Value,
    pub received_at: DateTime<Utc>,
}

/// The link's storage.
#[async_trait]
pub trait LinkStore: Send + Sync {
    /// Creates a bootstrap token for `cluster_name`. Refused with
    /// `FailedPrecondition` when the name is enrolled and `reenroll` is false.
    async fn create_bootstrap_token(
        &self,
        token: &NewBootstrapToken,
        fx: &Effects,
    ) -> Result<BootstrapToken>;

    /// Consumes a bootstrap token and creates (or, with a re-enrollment
    /// token, revives) the cluster in state `pending`, recording the
    /// claim's Kubernetes cluster UID. Refused, consuming nothing, when
    /// another enrolled name has that UID and the claim does not allow it.
    async fn begin_enrollment(
        &self,
        token_hash: &str,
        cluster_name: &str,
        claim: &ClusterClaim,
        now: DateTime<Utc>,
    ) -> Result<Result<Cluster, EnrollRejected>>;

    /// Approves the pending enrollment of `cluster_name` (a spoke presented
    /// a valid approval-requiring token). Returns whether one was pending.
    async fn approve_enrollment(
        &self,
        cluster_name: &str,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<bool>;

    /// Records a certificate issued to a cluster.
    async fn add_certificate(
        &self,
        cluster_id: &str,
        serial: &str,
        not_after: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<()>;

    async fn get_cluster_by_id(&self, id: &str) -> Result<Cluster>;

    /// When each cluster's newest unrevoked certificate expires, by
    /// cluster id (clusters with none left are absent).
    async fn certificate_expiry(&self) -> Result<std::collections::HashMap<String, DateTime<Utc>>>;

    /// A certificate's standing, `None` when the hub never issued it.
    async fn certificate_status(&self, serial: &str) -> Result<Option<CertificateStatus>>;

    /// Revokes a cluster: state `revoked`, every certificate revoked.
    async fn revoke_cluster(&self, name: &str, at: DateTime<Utc>, fx: &Effects) -> Result<Cluster>;

    /// Certificates revoked after revocation sequence `after` (all with 0),
    /// in sequence order.
    async fn revoked_after(&self, after: i64) -> Result<Vec<RevokedCertificate>>;

    /// Records connection state and what the spoke said of itself; never
    /// overrides a revocation.
    async fn set_connection_state(
        &self,
        cluster_id: &str,
        state: ConnectionState,
        last_seen: DateTime<Utc>,
        hello: Option<SpokeHello<'_>>,
    ) -> Result<()>;

    /// Records the capacity the cluster's spoke reported, received at
    /// `at` (the hub's clock); replaces the previous report. Not a watch
    /// event: reports come whenever Pods come and go.
    async fn set_cluster_capacity(
        &self,
        cluster_id: &str,
        capacity: clawfed_proto::capacity::Capacity,
        at: DateTime<Utc>,
    ) -> Result<()>;

    /// Records an execution lease renewal of the cluster's spoke received
    /// at `at` (the database's clock; also its last_seen). The hub answers
    /// the renewal only after this returns.
    async fn renew_execution_lease(&self, cluster_id: &str, at: DateTime<Utc>) -> Result<()>;

    /// Replaces the Harness work targets the cluster's spoke reports it
    /// fenced (empty: none).
    async fn set_fenced_targets(&self, cluster_id: &str, targets: &[String]) -> Result<()>;

    /// Marks clusters offline whose last_seen is older than `before` while
    /// they are recorded online (a crashed hub leaves them online).
    async fn mark_stale_offline(&self, before: DateTime<Utc>) -> Result<u64>;

    /// Puts the desired spec of `target` at `generation` into the cluster's
    /// outbox, deleting older unacked items of the target. Returns the new
    /// sequence, or `None` when the outbox already holds this generation or
    /// a newer one.
    async fn outbox_put(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        spec: &str,
    ) -> Result<Option<i64>>;

    /// Unacked items after `after_sequence`, in sequence order.
    async fn outbox_pending(
        &self,
        cluster_id: &str,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<OutboxItem>>;

    /// Acks one item; only the item of this cluster, sequence, target and
    /// generation. Returns whether it was unacked before.
    async fn outbox_ack(
        &self,
        cluster_id: &str,
        sequence: i64,
        target: &str,
        generation: i64,
        now: DateTime<Utc>,
    ) -> Result<bool>;

    /// Acks every unacked item the spoke already applied (its Hello):
    /// generation at or below the applied one. Returns how many.
    async fn outbox_ack_applied(
        &self,
        cluster_id: &str,
        applied: &[(String, i64)],
        now: DateTime<Utc>,
    ) -> Result<u64>;

    /// Whether `target` was ever sent to this cluster (reports about other
    /// targets are refused).
    async fn outbox_knows_target(&self, cluster_id: &str, target: &str) -> Result<bool>;

    /// Whether `target` was ever sent to any cluster.
    async fn outbox_target_exists(&self, target: &str) -> Result<bool>;

    /// The latest generation put for `target`, acked or not.
    async fn outbox_latest_generation(&self, cluster_id: &str, target: &str)
    -> Result<Option<i64>>;

    /// Unacked depth and head per cluster.
    async fn outbox_summary(&self) -> Result<Vec<OutboxSummary>>;

    /// What the cluster acked: the latest acked `(target, kind,
    /// generation)` per target (the hub's side of the applied digest).
    async fn outbox_acked_latest(&self, cluster_id: &str) -> Result<Vec<(String, String, i64)>>;

    /// Queues the latest acked item of each of `targets` again (a copy
    /// with a new sequence), unless a newer item of the target is already
    /// queued: drift the spoke could not repair is repaired by re-applying
    /// the same generation. Returns the new sequences.
    async fn outbox_resend(&self, cluster_id: &str, targets: &[String]) -> Result<Vec<i64>>;

    /// Stores a report, replacing the previous one of that target and kind
    /// unless it is for an older generation.
    async fn put_report(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        body: &serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Reports of one cluster.
    async fn list_reports(&self, cluster_id: &str) -> Result<Vec<SpokeReport>>;

    /// Every cluster `target` was sent to (by name, in name order), with
    /// its latest report of `kind` when one came.
    async fn target_reports(
        &self,
        target: &str,
        kind: &str,
    ) -> Result<Vec<(String, Option<SpokeReport>)>>;

    /// The latest report of one kind on one target of a cluster.
    async fn get_report(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
    ) -> Result<Option<SpokeReport>>;
}
