//! Diagnostics of an Agent's runtime Pods (`GET .../agents/{name}/diagnose`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
