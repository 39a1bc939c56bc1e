//! Audit records.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One audit record: who did what to which target, with what result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    pub id: i64,
    /// The event's place in the audit stream (`GET /api/v1/audit/stream`):
    /// resume after it. `null` for a moment after the write, until the hub
    /// stamps it.
    pub cursor: Option<i64>,
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
