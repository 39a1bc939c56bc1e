//! Domain types of the hub: what the store keeps and what REST returns.
//!
//! REST serializes these directly (camelCase JSON); gRPC converts them to and
//! from `clawfed.admin.v1` messages in `api::grpc`. Request types reject
//! unknown fields so a typo is an error, not a silently ignored setting.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use serde::de::{MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

pub mod event;

/// A request struct that must arrive as a JSON object. serde's derived
/// structs also accept a sequence and fill the fields by position
/// (`["x"]` would create namespace `x`); this accepts only a map.
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        object(d).map(Object)
    }
}

/// `deserialize_with` for a struct field that must be a JSON object.
pub fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct OnlyMaps<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for OnlyMaps<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(OnlyMaps(PhantomData))
}

/// `deserialize_with` for a list whose items must be JSON objects.
pub fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Ok(Vec::<Object<T>>::deserialize(d)?
        .into_iter()
        .map(|o| o.0)
        .collect())
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Namespace {
    pub id: String,
    pub name: String,
    pub display_name: String,
    /// The physical Kubernetes namespace in execution clusters.
    pub data_plane_namespace: String,
    /// True when `dataPlaneNamespace` was chosen by an operator. Each
    /// execution cluster adopts it only while it carries the operator's label
    /// `clawfed.io/adoptable=true`; otherwise the spoke refuses the work
    /// ("not marked for adoption") and its admission policy refuses the writes.
    pub adopted: bool,
    pub state: NamespaceState,
    /// Set by the worker once the hub accepted the namespace (it is usable
    /// for Agents). Whether it exists in an execution cluster is per
    /// cluster, in `clusters`, as that cluster's spoke reported it.
    pub provisioned_at: Option<DateTime<Utc>>,
    /// Each execution cluster the namespace was sent to, with what its
    /// spoke reported (empty until an Agent of the namespace is placed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<NamespaceClusterStatus>,
    /// Why the namespace is in its state, when that needs saying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A tenant's data-plane namespace in one execution cluster, as its spoke
/// reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceClusterStatus {
    pub cluster: String,
    pub state: NamespaceClusterState,
    /// The physical namespace the spoke ensured (a legacy or adopted name
    /// when it found one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_plane_namespace: Option<String>,
    /// The spoke's reason, when not provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<DateTime<Utc>>,
}

/// Where a tenant's namespace stands in one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NamespaceClusterState {
    /// Sent; the spoke has not answered yet.
    Pending,
    /// The spoke reported it ensured.
    Provisioned,
    /// Not yet: the spoke keeps retrying a transient failure.
    Retrying,
    /// The spoke refused it, with the reason.
    Failed,
    /// Torn down in that cluster.
    Deleted,
}

impl NamespaceClusterState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Provisioned => "provisioned",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
            Self::Deleted => "deleted",
        }
    }
}

/// Lifecycle of a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NamespaceState {
    /// Created; provisioning work is queued.
    Pending,
    /// Provisioned and usable.
    Active,
    /// Being torn down in the execution clusters (provider cleanup first).
    Deleting,
    /// Teardown failed in a cluster; its infrastructure was kept.
    TeardownFailed,
}

impl NamespaceState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Active => "active",
            Self::Deleting => "deleting",
            Self::TeardownFailed => "teardown-failed",
        }
    }
}

/// Body of `POST /api/v1/namespaces`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateNamespace {
    /// DNS-1123 label, unique across the installation.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )]
    pub name: String,
    /// Free text: at most 256 characters, no control characters.
    #[serde(default)]
    #[schema(max_length = 256, pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*$")]
    pub display_name: Option<String>,
    /// Adopt this operator-chosen Kubernetes namespace instead of `oce-<hash>`.
    /// It must already exist in the execution clusters and carry the label
    /// `clawfed.io/adoptable=true`, which only an operator sets.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )]
    pub adopt_namespace: Option<String>,
}

/// A named configuration document in a tenant, referenced by Agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    pub id: String,
    pub namespace: String,
    pub name: String,
    /// A JSON object.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST .../configurations`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateConfiguration {
    /// DNS-1123 label, unique in the namespace.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )]
    pub name: String,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// Body of `PUT .../configurations/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateConfiguration {
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    /// The version last read; a stale version is a conflict.
    pub version: i64,
}

/// Which Harness runs the Agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HarnessKind {
    EmbeddedOpenclaw,
    DedicatedOpenclaw,
    DedicatedCodex,
}

impl HarnessKind {
    /// The wire spelling, as in JSON and gRPC.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EmbeddedOpenclaw => "embedded-openclaw",
            Self::DedicatedOpenclaw => "dedicated-openclaw",
            Self::DedicatedCodex => "dedicated-codex",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::EmbeddedOpenclaw,
            Self::DedicatedOpenclaw,
            Self::DedicatedCodex,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// Whether a new revision replaces its predecessors exclusively (each
    /// stopped and confirmed before the new Harness starts). Every kind
    /// does: each keeps its state on the Agent-owned ReadWriteOnce claim,
    /// which one runtime at a time may mount (for embedded OpenClaw this is
    /// the seed's Recreate rollout of the Agent's gateway; for dedicated
    /// ones its exclusive preparation contract).
    pub fn replaces_exclusively(self) -> bool {
        true
    }

    /// Dedicated Harnesses own RWO workspace storage, so a replacement stops
    /// its predecessor before it starts.
    pub fn is_dedicated(self) -> bool {
        !matches!(self, Self::EmbeddedOpenclaw)
    }

    /// Dedicated runtimes get a separate Gateway in the control cluster;
    /// embedded OpenClaw runs its gateway inside the data-plane workload.
    pub fn has_control_gateway(self) -> bool {
        self.is_dedicated()
    }

    /// The Harness is the OpenClaw runtime: it gets the Agent's
    /// Configuration as its config file and answers model turns.
    pub fn is_openclaw(self) -> bool {
        matches!(self, Self::EmbeddedOpenclaw | Self::DedicatedOpenclaw)
    }
}

/// Who owns the Harness workload in the execution cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionMode {
    /// An ordinary Deployment applied by the spoke.
    #[default]
    Ordinary,
    /// A SandboxDriver provider owns the Harness.
    Provider,
}

impl ExecutionMode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ordinary => "ordinary",
            Self::Provider => "provider",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Ordinary, Self::Provider]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Kubernetes resource quantities for the Harness container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<String>,
}

/// Where the Harness may run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Placement {
    /// A cluster name; absent means any cluster matching the selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_selector: BTreeMap<String, String>,
}

/// The editable definition of an Agent (its draft).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSpec {
    pub harness_kind: HarnessKind,
    #[serde(default)]
    pub execution_mode: ExecutionMode,
    /// Harness image reference; `name@sha256:<64 hex>` pins a digest.
    /// Empty or absent: the installation's default agent image
    /// (`images.agent`), when it has one.
    #[serde(default)]
    pub image: String,
    /// Gateway image; the hub's configured default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_image: Option<String>,
    /// Name of a Configuration in the same namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    #[serde(default, deserialize_with = "object")]
    pub resources: Resources,
    /// Labels the Harness Pod must carry (readiness checks every one).
    #[serde(default)]
    pub requirement_labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "object")]
    pub placement: Placement,
    #[serde(default)]
    pub plugins: Vec<String>,
    /// External messaging channels (e.g. `slack`, `telegram`); an enabled
    /// one needs a dedicated harness kind.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "objects"
    )]
    pub channels: Vec<Channel>,
}

/// An external messaging channel of an Agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Channel {
    /// DNS-1123 label, unique in the Agent.
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )]
    pub name: String,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

/// A managed credential of an Agent as the API shows it: metadata only,
/// never the value (credentials are write-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialMeta {
    /// `model-api-key` or `service-account`.
    pub kind: String,
    /// Bumped by every set: a counter, not derived from the value.
    pub version: i64,
    pub set_at: DateTime<Utc>,
}

/// Body of `PUT .../agents/{name}/credentials/{kind}`. The value is
/// write-only: no answer, log or audit record ever contains it.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetCredential {
    /// The secret value (at most 16 KiB, no NUL characters).
    #[schema(min_length = 1, max_length = 16384)]
    pub value: String,
}

impl std::fmt::Debug for SetCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetCredential")
            .field("value", &"<redacted>")
            .finish()
    }
}

/// What the operator wants an Agent to be doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DesiredState {
    Running,
    Stopped,
}

impl DesiredState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
        }
    }
}

/// An Agent: its draft spec plus where its revisions stand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub spec: AgentSpec,
    pub desired_state: DesiredState,
    pub active_revision: Option<i64>,
    pub latest_revision: Option<i64>,
    /// Bumped by every change of the draft spec.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST .../agents`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateAgent {
    /// DNS-1123 label of at most 40 characters, unique in the namespace.
    #[schema(
        min_length = 1,
        max_length = 40,
        pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )]
    pub name: String,
    #[serde(deserialize_with = "object")]
    pub spec: AgentSpec,
}

/// Body of `PUT .../agents/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateAgent {
    #[serde(deserialize_with = "object")]
    pub spec: AgentSpec,
    /// The version last read; a stale version is a conflict.
    pub version: i64,
}

/// Body of `POST .../agents/{name}/chat`: one message to the Agent's
/// runtime.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChatRequest {
    /// The user's message.
    #[schema(min_length = 1, max_length = 16384)]
    pub message: String,
    /// The runtime's conversation (its OpenAI `user`: history is kept per
    /// conversation); absent: one per caller, `clawfed-chat-<token name>`.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 128, pattern = "^[A-Za-z0-9._:-]+$")]
    pub conversation: Option<String>,
}

/// The model's answer to a [`ChatRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatAnswer {
    pub namespace: String,
    pub agent: String,
    /// The revision that answered (the active one).
    pub revision: i64,
    pub conversation: String,
    /// The model's answer, as the runtime returned it.
    pub answer: String,
    /// From the hub's request to the runtime's complete answer.
    pub elapsed_ms: i64,
}

/// Body of `POST .../agents/{name}/deploy` (optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeployRequest {
    /// Rollback: make the new revision from this earlier revision's snapshot.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub from_revision: Option<i64>,
}

/// An image as admitted into a revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRef {
    /// `harness` or `gateway`.
    pub role: String,
    pub reference: String,
    /// `sha256:<hex>` when the reference pins one.
    pub digest: Option<String>,
}

/// Lifecycle phase of a revision. The pipeline moves it forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RevisionPhase {
    Pending,
    Provisioning,
    Preparing,
    WaitingReady,
    Active,
    Retired,
    /// Its Harness stop was sent; `stopped` once the spoke reports it done.
    Stopping,
    Stopped,
    Failed,
}

impl RevisionPhase {
    /// Every phase, in pipeline order.
    pub const ALL: [Self; 9] = [
        Self::Pending,
        Self::Provisioning,
        Self::Preparing,
        Self::WaitingReady,
        Self::Active,
        Self::Retired,
        Self::Stopping,
        Self::Stopped,
        Self::Failed,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Provisioning => "provisioning",
            Self::Preparing => "preparing",
            Self::WaitingReady => "waiting-ready",
            Self::Active => "active",
            Self::Retired => "retired",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// An immutable snapshot of an Agent, admitted at deploy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentRevision {
    pub id: String,
    pub namespace: String,
    pub agent: String,
    /// 1, 2, 3… per Agent.
    pub number: i64,
    pub spec: AgentSpec,
    /// The configuration document frozen at deploy (`null` when none).
    #[schema(value_type = Option<Object>)]
    pub configuration: serde_json::Value,
    pub images: Vec<ImageRef>,
    /// The cluster placement resolved to, when known.
    pub resolved_cluster: Option<String>,
    pub phase: RevisionPhase,
    pub reason: Option<String>,
    /// The revision this one was rolled back from.
    pub rolled_back_from: Option<i64>,
    /// Pipeline progress: effects done and phase timings.
    #[serde(default)]
    pub progress: RevisionProgress,
    /// Bumped on every pipeline save (compare-and-swap).
    #[serde(default)]
    pub version: i64,
    /// The API token (id) that deployed it; pipeline passes re-check it.
    #[serde(skip)]
    pub requested_by: Option<String>,
    /// The spoke's latest readiness verdict for this revision, with its
    /// reason (or the error that kept it from a verdict), when one came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<crate::link::report::ReadinessReport>,
    /// Drift the spoke repaired on this revision's objects, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::link::report::DriftReport>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What the pipeline has done for a revision, durably, so a restarted hub
/// resumes without repeating effects. Times are RFC 3339.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionProgress {
    /// When each phase was entered.
    #[serde(default)]
    pub phases: BTreeMap<String, DateTime<Utc>>,
    /// When the Gateway's ensure was queued (`gateway.ensure` work, its
    /// own lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_queued_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_applied_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessors_stopped_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activated_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessors_retired_at: Option<DateTime<Utc>>,
    /// After this, waiting for readiness fails the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_deadline: Option<DateTime<Utc>>,
    /// Milliseconds spent: prepareMs, readinessWaitMs, activationMs, elapsedMs.
    #[serde(default)]
    pub durations_ms: BTreeMap<String, i64>,
}

/// Connection state of an execution cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectionState {
    Pending,
    Online,
    Offline,
    Revoked,
}

impl ConnectionState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Online => "online",
            Self::Offline => "offline",
            Self::Revoked => "revoked",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Online, Self::Offline, Self::Revoked]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// An enrolled execution cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
    /// Serials of the cluster's client certificates. Installation admins
    /// only: empty (absent) for tenant tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificate_serials: Vec<String>,
    pub connection_state: ConnectionState,
    pub last_seen: Option<DateTime<Utc>>,
    pub version: String,
    pub created_at: DateTime<Utc>,
    /// Work queued for the cluster and not yet acked. Installation admins
    /// only: absent for tenant tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbox_depth: Option<i64>,
    /// The SandboxDriver the spoke runs, from its `sandbox-driver:<name>`
    /// capability; null when it advertises none.
    #[serde(default)]
    pub provider: Option<String>,
    /// When the cluster's newest unrevoked client certificate expires (the
    /// spoke renews before then). Installation admins only: absent for
    /// tenant tokens, and when no unrevoked certificate is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_expires_at: Option<DateTime<Utc>>,
}

/// Body of `POST /api/v1/clusters/{name}/bootstrap-tokens`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateBootstrapToken {
    /// Lifetime in seconds (default 3600, at most 7 days).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub ttl_seconds: Option<i64>,
    /// Allow re-enrolling an already enrolled cluster name.
    #[serde(default)]
    pub reenroll: bool,
    /// Issue the certificate only after `POST /clusters/{name}/approve`.
    #[serde(default)]
    pub require_approval: bool,
}

/// A freshly created bootstrap token; the secret is shown only here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapTokenCreated {
    pub cluster_name: String,
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub reenroll: bool,
}

/// State of a durable work item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorkState {
    /// Waiting for `runAt`.
    Pending,
    /// Held by a worker under a lease.
    Claimed,
    Done,
    /// Gave up after `maxAttempts`, or could never succeed.
    Failed,
}

impl WorkState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Claimed => "claimed",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Claimed, Self::Done, Self::Failed]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// A durable work item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkItem {
    pub id: String,
    pub kind: String,
    /// The tenant whose object the work acts on (name).
    pub namespace: Option<String>,
    #[serde(skip)]
    pub namespace_id: Option<String>,
    /// The object acted on (an id).
    pub target: String,
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
    /// The API token whose request made the work; re-checked before effects.
    #[serde(skip)]
    pub requested_by: Option<String>,
    pub state: WorkState,
    pub attempts: i32,
    pub max_attempts: i32,
    pub run_at: DateTime<Utc>,
    #[serde(skip)]
    pub lease_owner: Option<String>,
    #[serde(skip)]
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One audit record: who did what to which target, with what result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// `token:<name>` for API callers, `system:<component>` for the hub itself.
    pub actor: String,
    pub action: String,
    pub namespace: Option<String>,
    pub target: String,
    /// `ok`, `denied` or `error`.
    pub result: String,
    pub detail: Option<String>,
}

/// Fleet-wide counts, scoped to what the caller may read. Agent counts
/// keep desired state (what was asked for) apart from actual state (what
/// runs), so an Agent that is wanted but not placed anywhere shows as a gap
/// (`agentsNotRunning`) instead of as running.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetSummary {
    pub namespaces: i64,
    pub agents: i64,
    /// Actual: Agents with an `active` revision (placed, applied and Ready
    /// on a cluster), whatever their desired state.
    pub agents_running: i64,
    /// Desired: Agents whose desired state is `stopped`.
    pub agents_stopped: i64,
    /// Desired: Agents whose desired state is `running`, placed or not.
    pub agents_desired_running: i64,
    /// The gap: Agents whose desired state is `running` but that have no
    /// `active` revision (not yet placed, applied or Ready, or failed).
    pub agents_not_running: i64,
    pub revisions_by_phase: BTreeMap<String, i64>,
    pub clusters: i64,
    pub clusters_online: i64,
    pub work_pending: i64,
    pub work_failed: i64,
}

/// A list response.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct List<T> {
    pub items: Vec<T>,
}

impl<T> From<Vec<T>> for List<T> {
    fn from(items: Vec<T>) -> Self {
        Self { items }
    }
}

/// One bounded diagnostic check of a runtime Pod
/// (`clawfed_proto::diagnostics`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticCheck {
    /// Short generic name, e.g. `plugins`.
    pub name: String,
    /// `ok`, `warn`, `fail` or `unknown`.
    pub status: String,
    /// Short single-line detail.
    pub detail: String,
}

/// The diagnostics of one runtime Pod (Harness or Gateway).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentDiagnosis {
    /// The Pod read, when one was.
    pub pod: Option<String>,
    pub checks: Vec<DiagnosticCheck>,
}

/// `GET .../agents/{name}/diagnose`: bounded checks of the Agent's active
/// (or latest) revision. Missing Pods and unreachable endpoints are
/// `unknown` checks; diagnosing never changes the deployment's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    pub namespace: String,
    pub agent: String,
    pub revision: i64,
    pub revision_id: String,
    /// The execution cluster the revision is placed on.
    pub cluster: Option<String>,
    /// Read by the revision's spoke in its execution cluster.
    pub harness: ComponentDiagnosis,
    /// Read by the hub in the control cluster.
    pub gateway: ComponentDiagnosis,
}
