//! Durable work items and their states.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
