//! Tenant quotas: how many Agents, running Agents, revisions an hour and
//! credentials a tenant (namespace) may have. Pure: the settings, the
//! limit that applies to a tenant, and the refusal's words.
//!
//! The store enforces them inside the transaction that would exceed one
//! (`store::Effects::quotas`): it counts after the write, with the
//! tenant's row locked on PostgreSQL, so concurrent requests cannot pass a
//! limit together; the write is rolled back when the count is over.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `quotas`: every tenant's limits, and per tenant what differs. A limit
/// unset is no limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
// Every field is optional: a partial section keeps the other defaults.
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct QuotaSettings {
    /// The limits of every tenant.
    pub default: TenantQuota,
    /// By namespace name: limits over `default`, field by field.
    pub namespaces: BTreeMap<String, TenantQuota>,
}

/// One tenant's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TenantQuota {
    /// Agents (not deleted).
    pub agents: Option<u32>,
    /// Agents whose desired state is running (deployed and not stopped).
    pub running_agents: Option<u32>,
    /// Revisions the tenant's deploys and rollbacks made in the last hour
    /// (a hub's own moves, drains and failovers, are not counted against
    /// it).
    pub revisions_per_hour: Option<u32>,
    /// Managed credentials set on the tenant's Agents.
    pub credentials: Option<u32>,
}

/// What a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKind {
    Agents,
    RunningAgents,
    RevisionsPerHour,
    Credentials,
}

impl QuotaKind {
    /// Every kind, in the order the API lists them.
    pub const ALL: [Self; 4] = [
        Self::Agents,
        Self::RunningAgents,
        Self::RevisionsPerHour,
        Self::Credentials,
    ];

    /// The setting's (and the API's) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agents => "agents",
            Self::RunningAgents => "runningAgents",
            Self::RevisionsPerHour => "revisionsPerHour",
            Self::Credentials => "credentials",
        }
    }
}

impl TenantQuota {
    /// This quota's limit of `kind`.
    pub fn limit(&self, kind: QuotaKind) -> Option<u32> {
        match kind {
            QuotaKind::Agents => self.agents,
            QuotaKind::RunningAgents => self.running_agents,
            QuotaKind::RevisionsPerHour => self.revisions_per_hour,
            QuotaKind::Credentials => self.credentials,
        }
    }

    /// `self`, with what `over` sets replacing it.
    fn overlaid(self, over: &Self) -> Self {
        Self {
            agents: over.agents.or(self.agents),
            running_agents: over.running_agents.or(self.running_agents),
            revisions_per_hour: over.revisions_per_hour.or(self.revisions_per_hour),
            credentials: over.credentials.or(self.credentials),
        }
    }
}

impl QuotaSettings {
    /// The limits of tenant `namespace`.
    pub fn of(&self, namespace: &str) -> TenantQuota {
        match self.namespaces.get(namespace) {
            Some(over) => self.default.overlaid(over),
            None => self.default,
        }
    }

    /// Whether any limit is set at all.
    pub fn is_empty(&self) -> bool {
        self.default == TenantQuota::default()
            && self
                .namespaces
                .values()
                .all(|q| *q == TenantQuota::default())
    }
}

/// One quota of a tenant: its limit and what is in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaItem {
    /// `agents`, `runningAgents`, `revisionsPerHour` or `credentials`.
    pub name: String,
    /// Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    pub used: i64,
}

/// A tenant's quotas (`GET /api/v1/namespaces/{ns}/quota`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantQuotaStatus {
    pub namespace: String,
    pub items: Vec<QuotaItem>,
}

/// What a tenant has in use, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaUsage {
    pub agents: i64,
    pub running_agents: i64,
    pub revisions_last_hour: i64,
    pub credentials: i64,
}

impl QuotaUsage {
    /// The count of `kind`.
    pub fn of(&self, kind: QuotaKind) -> i64 {
        match kind {
            QuotaKind::Agents => self.agents,
            QuotaKind::RunningAgents => self.running_agents,
            QuotaKind::RevisionsPerHour => self.revisions_last_hour,
            QuotaKind::Credentials => self.credentials,
        }
    }

    /// Each kind with `quota`'s limit beside what is in use.
    pub fn status(&self, namespace: &str, quota: &TenantQuota) -> TenantQuotaStatus {
        TenantQuotaStatus {
            namespace: namespace.to_owned(),
            items: QuotaKind::ALL
                .into_iter()
                .map(|kind| QuotaItem {
                    name: kind.as_str().to_owned(),
                    limit: quota.limit(kind).map(i64::from),
                    used: self.of(kind),
                })
                .collect(),
        }
    }
}

/// A write refused because it would take a tenant past a quota.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "quota {} of namespace {namespace:?} exceeded: limit {limit}, {used} in use \
     (quotas.{} in the hub's configuration)",
    kind.as_str(),
    kind.as_str()
)]
pub struct QuotaExceeded {
    pub kind: QuotaKind,
    pub namespace: String,
    pub limit: i64,
    /// In use before the refused request.
    pub used: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_limits_overlay_the_defaults_field_by_field() {
        let s: QuotaSettings = serde_yaml_ng::from_str(
            "default: { agents: 10, revisionsPerHour: 60 }\n\
             namespaces: { big: { agents: 100, credentials: 5 } }\n",
        )
        .unwrap();
        let big = s.of("big");
        assert_eq!(big.limit(QuotaKind::Agents), Some(100));
        assert_eq!(big.limit(QuotaKind::RevisionsPerHour), Some(60));
        assert_eq!(big.limit(QuotaKind::Credentials), Some(5));
        assert_eq!(big.limit(QuotaKind::RunningAgents), None);
        let other = s.of("other");
        assert_eq!(other.limit(QuotaKind::Agents), Some(10));
        assert_eq!(other.limit(QuotaKind::Credentials), None);
        assert!(!s.is_empty());
        assert!(QuotaSettings::default().is_empty());
    }

    #[test]
    fn unknown_quotas_are_errors() {
        let err = serde_yaml_ng::from_str::<QuotaSettings>("default: { pods: 3 }\n").unwrap_err();
        assert!(err.to_string().contains("pods"), "{err}");
    }

    #[test]
    fn the_status_lists_every_kind_and_the_refusal_names_the_setting() {
        let usage = QuotaUsage {
            agents: 3,
            running_agents: 1,
            revisions_last_hour: 7,
            credentials: 0,
        };
        let quota = TenantQuota {
            agents: Some(3),
            ..TenantQuota::default()
        };
        let status = usage.status("team", &quota);
        let names: Vec<_> = status.items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["agents", "runningAgents", "revisionsPerHour", "credentials"]
        );
        assert_eq!(status.items[0].limit, Some(3));
        assert_eq!(status.items[2].used, 7);
        assert_eq!(status.items[2].limit, None);

        let refused = QuotaExceeded {
            kind: QuotaKind::Agents,
            namespace: "team".into(),
            limit: 3,
            used: 3,
        };
        assert_eq!(
            refused.to_string(),
            "quota agents of namespace \"team\" exceeded: limit 3, 3 in use \
             (quotas.agents in the hub's configuration)"
        );
    }
}
