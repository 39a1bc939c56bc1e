//! Fleet-wide counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
