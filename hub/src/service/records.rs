//! The hub's records a caller reads: audit events and work items, held to
//! the caller's namespace (and to its current incarnation).

use super::{Result, Service, ServiceError};
use crate::auth::{Action, Principal};
use crate::model::{AuditEvent, WorkItem, WorkState};
use crate::store::WorkFilter;

/// Limits of list calls.
const DEFAULT_LIST_LIMIT: i64 = 100;
const MAX_LIST_LIMIT: i64 = 1000;

impl Service {
    /// Audit events, newest first. Tenant admins read their own namespace.
    pub async fn list_audit(
        &self,
        p: &Principal,
        namespace: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<AuditEvent>> {
        let limit = list_limit(limit)?;
        let scope = self.scope(p, namespace)?;
        self.check_read(p, Action::ReadAudit, scope.as_deref())?;
        // Stamped first: what was committed before this request lists with
        // its stream cursor (which never changes once given).
        // Best effort: a listing without cursors is still a listing.
        if let Some(feed) = self.audit.get()
            && let Err(e) = feed.head().await
        {
            tracing::warn!(error = %e, "audit.sequence_error");
        }
        let events = self.store.list_audit(scope.as_deref(), limit).await?;
        if p.is_installation_admin() {
            return Ok(events);
        }
        // Audit events are kept by namespace name and outlive the namespace:
        // a tenant re-created under an old name sees only its own events.
        let current = self.own_namespace(p).await?;
        Ok(events
            .into_iter()
            .filter(|e| e.at >= current.created_at)
            .collect())
    }

    /// A stream of the audit events after `cursor` (see
    /// [`crate::audit_stream::start_after`]) the caller may read: every
    /// namespace's (or `namespace`'s) for installation admins, a tenant's
    /// own otherwise. With `follow` false it ends once it has caught up.
    pub async fn stream_audit(
        &self,
        p: &Principal,
        namespace: Option<&str>,
        cursor: Option<i64>,
        follow: bool,
    ) -> Result<crate::audit_stream::AuditSubscription> {
        use crate::audit_stream::{AuditCursorError, AuditScope, start_after};
        let scope = self.scope(p, namespace)?;
        self.check_read(p, Action::ReadAudit, scope.as_deref())?;
        let feed = self
            .audit
            .get()
            .ok_or_else(|| ServiceError::Unavailable("the audit stream is not running".into()))?;
        let since = if p.is_installation_admin() {
            None
        } else {
            Some(self.own_namespace(p).await?.created_at)
        };
        let head = feed.head().await?;
        let after = start_after(cursor, head).map_err(|e| match e {
            AuditCursorError::Negative(_) => ServiceError::InvalidArgument {
                field: "cursor".into(),
                reason: e.to_string(),
            },
            AuditCursorError::Ahead { .. } => ServiceError::OutOfRange(e.to_string()),
        })?;
        let guard = super::fleet::token_guard(self.store.clone(), p, feed.token_recheck());
        Ok(feed
            .open(
                AuditScope {
                    namespace: scope,
                    since,
                },
                after,
                follow,
            )
            .until_invalid(guard))
    }

    /// Work items, newest first.
    pub async fn list_work(
        &self,
        p: &Principal,
        namespace: Option<&str>,
        state: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<WorkItem>> {
        let limit = list_limit(limit)?;
        let state = state
            .map(|s| {
                WorkState::parse(s).ok_or_else(|| ServiceError::InvalidArgument {
                    field: "state".into(),
                    reason: format!("{s:?} is not one of pending, claimed, done, failed"),
                })
            })
            .transpose()?;
        let scope = self.scope(p, namespace)?;
        self.check_read(p, Action::Read, scope.as_deref())?;
        let items = self
            .store
            .list_work(&WorkFilter {
                namespace: scope,
                state,
                limit,
            })
            .await?;
        if p.is_installation_admin() {
            return Ok(items);
        }
        // Work items keep the namespace name they were made under; a
        // re-created namespace of the same name does not see the old ones.
        let current = self.own_namespace(p).await?;
        Ok(items
            .into_iter()
            .filter(|w| w.namespace_id.as_deref() == Some(current.id.as_str()))
            .collect())
    }

    /// One work item; items of other tenants are "not found".
    pub async fn get_work(&self, p: &Principal, id: &str) -> Result<WorkItem> {
        let item = self.store.get_work(id).await?;
        let visible = p.is_installation_admin()
            || match (&item.namespace_id, self.own_namespace(p).await) {
                (Some(ns_id), Ok(own)) => *ns_id == own.id,
                _ => false,
            };
        if !visible {
            return Err(ServiceError::NotFound(format!(
                "work item {id:?} not found"
            )));
        }
        Ok(item)
    }

    /// The namespace a listing covers: the requested one, or for a tenant
    /// token its own.
    fn scope(&self, p: &Principal, requested: Option<&str>) -> Result<Option<String>> {
        if p.is_installation_admin() {
            return Ok(requested.map(str::to_owned));
        }
        let own = p.namespace.clone();
        match requested {
            Some(ns) if Some(ns) != own.as_deref() => Err(ServiceError::PermissionDenied(format!(
                "token is scoped to namespace {:?}",
                own.unwrap_or_default()
            ))),
            _ => Ok(own),
        }
    }
}

fn list_limit(limit: Option<i64>) -> Result<i64> {
    match limit {
        None => Ok(DEFAULT_LIST_LIMIT),
        Some(n) if (1..=MAX_LIST_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ServiceError::InvalidArgument {
            field: "limit".into(),
            reason: format!("must be between 1 and {MAX_LIST_LIMIT}"),
        }),
    }
}
