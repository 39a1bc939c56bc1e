//! Tenants (namespaces): the namespace, its state in each execution
//! cluster, and the body that creates one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
