//! Execution clusters: their connection state, the enrolled cluster, and
//! bootstrap tokens.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
    /// What the cluster's spoke last reported it can take; null until it
    /// reports (a spoke of an older version, or the ledger applier, never
    /// does).
    #[serde(default)]
    pub capacity: Option<ClusterCapacity>,
    /// When new placements on the cluster stopped (`clusters cordon`, or a
    /// drain); null while it takes new revisions.
    #[serde(default)]
    pub cordoned_at: Option<DateTime<Utc>>,
    /// The cluster's latest drain, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<super::Drain>,
}

#[cfg(test)]
impl Cluster {
    /// A cluster named `name` in `state` with nothing else set, for unit
    /// tests to change the fields they are about.
    pub fn fixture(name: &str, state: ConnectionState) -> Self {
        Self {
            id: name.into(),
            name: name.into(),
            labels: BTreeMap::new(),
            capabilities: vec![],
            certificate_serials: vec![],
            connection_state: state,
            last_seen: None,
            version: String::new(),
            created_at: DateTime::UNIX_EPOCH,
            outbox_depth: None,
            provider: None,
            certificate_expires_at: None,
            capacity: None,
            cordoned_at: None,
            drain: None,
        }
    }
}

impl Cluster {
    /// No new revision is placed here.
    pub fn cordoned(&self) -> bool {
        self.cordoned_at.is_some()
    }

    /// A drain is moving its Agents away.
    pub fn draining(&self) -> bool {
        self.drain.as_ref().is_some_and(|d| d.finished_at.is_none())
    }
}

/// CPU in millicores and memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceAmounts {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

impl From<clawfed_proto::capacity::Resources> for ResourceAmounts {
    fn from(r: clawfed_proto::capacity::Resources) -> Self {
        Self {
            cpu_millis: r.cpu_millis,
            memory_bytes: r.memory_bytes,
        }
    }
}

impl From<ResourceAmounts> for clawfed_proto::capacity::Resources {
    fn from(r: ResourceAmounts) -> Self {
        Self {
            cpu_millis: r.cpu_millis,
            memory_bytes: r.memory_bytes,
        }
    }
}

/// A cluster's capacity as its spoke last reported it: the Ready,
/// schedulable nodes the installation's `runtime.nodeSelector` selects,
/// their allocatable CPU and memory, and that minus the requests of the
/// Pods bound to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCapacity {
    pub nodes: u32,
    pub allocatable: ResourceAmounts,
    pub free: ResourceAmounts,
    /// When the hub received the report (the hub's clock).
    pub reported_at: DateTime<Utc>,
}

impl ClusterCapacity {
    /// The report as the contract's type, for placement.
    pub fn as_capacity(&self) -> clawfed_proto::capacity::Capacity {
        clawfed_proto::capacity::Capacity {
            nodes: self.nodes,
            allocatable: self.allocatable.into(),
            free: self.free.into(),
        }
    }
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
