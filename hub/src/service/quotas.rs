//! Tenant quotas: what a tenant has in use beside its limits, and the
//! checks each counted write carries into its transaction.

use super::{Result, Service};
use crate::auth::{Action, Principal};
use crate::quota::{QuotaKind, TenantQuotaStatus};
use crate::store::QuotaCheck;

impl Service {
    /// Tenant `ns`'s quotas: each limit (absent: none) and what is in use.
    pub async fn quota(&self, p: &Principal, ns: &str) -> Result<TenantQuotaStatus> {
        self.check_read(p, Action::Read, Some(ns))?;
        let usage = self.store.quota_usage(ns, self.store.now()).await?;
        Ok(usage.status(ns, &self.policy.quotas.of(ns)))
    }

    /// The checks a write in tenant `ns` that adds to `kinds` carries: one
    /// per kind the tenant has a limit of.
    pub(super) fn quota_checks(&self, ns: &str, kinds: &[QuotaKind]) -> Vec<QuotaCheck> {
        let quota = self.policy.quotas.of(ns);
        kinds
            .iter()
            .filter_map(|&kind| {
                quota.limit(kind).map(|limit| QuotaCheck {
                    namespace: ns.to_owned(),
                    kind,
                    limit: i64::from(limit),
                })
            })
            .collect()
    }
}
