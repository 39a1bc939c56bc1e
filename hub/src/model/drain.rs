//! Cordon and drain of an execution cluster: the drain's record and its
//! progress, Agent by Agent.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Body of `POST /api/v1/clusters/{name}/drain`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainRequest {
    /// How many Agents move at once (default 1, at most
    /// [`MAX_DRAIN_PARALLELISM`]).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub parallelism: Option<u32>,
}

/// The most Agents one drain moves at once.
pub const MAX_DRAIN_PARALLELISM: u32 = 64;

/// The latest drain of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drain {
    /// How many Agents it moves at once.
    pub parallelism: u32,
    pub started_at: DateTime<Utc>,
    /// When it ended: nothing left to move (some Agents may be blocked or
    /// have failed to move: see `progress`), or the cluster was
    /// uncordoned. Null while it runs.
    pub finished_at: Option<DateTime<Utc>>,
    /// Agent by Agent; filled when one cluster is read by an installation
    /// admin (and in the drain's own answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<DrainProgress>,
    /// The API token (id) that started it: the moves are deployed as it.
    #[serde(skip)]
    pub requested_by: Option<String>,
}

/// Where a drain stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainProgress {
    /// Agents still to move (or whose revision there is still settling).
    pub waiting: u32,
    /// Agents being moved now (at most the parallelism), or leaving by a
    /// deploy of their own.
    pub moving: u32,
    /// Agents now active on another cluster.
    pub moved: u32,
    /// Agents that cannot move (pinned to the cluster).
    pub blocked: u32,
    /// Agents whose move failed (the revision's reason says why).
    pub failed: u32,
    /// Every Agent the drain concerns, by namespace and name.
    pub agents: Vec<DrainAgent>,
}

/// One Agent in a drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainAgent {
    pub namespace: String,
    pub agent: String,
    pub state: DrainAgentState,
    /// The revision that ran on the drained cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_revision: Option<i64>,
    /// The revision the drain made to move it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_revision: Option<i64>,
    /// Where that revision was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_cluster: Option<String>,
    /// What the Agent's workspace is where it moved: claims do not move
    /// between clusters, so a moved Agent starts with a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceOrigin>,
    /// Why it waits, is blocked or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An Agent's state in a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DrainAgentState {
    Waiting,
    Moving,
    Moved,
    Blocked,
    Failed,
}

impl DrainAgentState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Moving => "moving",
            Self::Moved => "moved",
            Self::Blocked => "blocked",
            Self::Failed => "failed",
        }
    }
}

/// Where a moved Agent's workspace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceOrigin {
    /// A new, empty claim on the new cluster (the old one stays where it
    /// was, under the retention policy of a retired revision).
    Fresh,
}

impl WorkspaceOrigin {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fresh => "fresh",
        }
    }
}
