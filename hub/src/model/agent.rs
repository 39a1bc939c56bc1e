//! Agents: the editable spec (Harness kind, execution mode, resources,
//! placement, channels), the Agent itself, its credentials' metadata, and
//! the request bodies of its endpoints (create, update, credentials, chat,
//! deploy).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use clawfed_proto::kinds::{ExecutionMode, HarnessKind};

use super::{object, objects};

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
    /// An ordered preference: the first listed cluster that can take the
    /// revision wins (only these are considered; not with `cluster`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// Among the clusters the selector matches: `spread` takes the one
    /// with the most free capacity, `pack` the one with the least that
    /// still fits. Absent: the first by name that fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
}

/// How selector placement picks among the clusters that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Spread {
    /// The most free capacity left: Agents spread over the clusters.
    Spread,
    /// The least free capacity that still fits: clusters fill up one by one.
    Pack,
}

impl Spread {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spread => "spread",
            Self::Pack => "pack",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Spread, Self::Pack]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
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
    /// Move the Agent off a cluster that lost its link, fencing it there
    /// first. Absent: the Agent stays where it runs while its cluster is
    /// offline (the execution cluster's autonomy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
}

/// `spec.failover`: the Agent runs under its spoke's execution lease. When
/// the spoke cannot renew it for `afterSeconds`, the spoke stops the
/// Harness there; a little later (`clawfed_proto::failover::periods`) the
/// hub deploys it elsewhere, with a fresh workspace (claims do not move
/// between clusters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Failover {
    /// Seconds without a lease renewal before the spoke fences the Agent
    /// (10 to 86400).
    pub after_seconds: u32,
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
