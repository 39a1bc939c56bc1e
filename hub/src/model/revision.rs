//! Revisions: the immutable snapshot of an Agent admitted at deploy, its
//! images, its phase and the pipeline's durable progress.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AgentSpec;

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
    /// The cluster a drain moved the Agent away from with this revision
    /// (a copy of the one that ran there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
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
