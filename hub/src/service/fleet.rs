//! The fleet as a whole: its counts, and the watch stream of its events
//! (held to the caller's scope, and ended once its token stops being
//! valid).

use std::sync::Arc;

use chrono::Utc;

use super::{Result, Service, ServiceError};
use crate::auth::{Action, Principal};
use crate::model::FleetSummary;
use crate::store::{Store, StoreError};

impl Service {
    /// Fleet counts over what the caller may read: a tenant's cover its own
    /// namespace and the clusters its revisions are placed on.
    pub async fn fleet_summary(&self, p: &Principal) -> Result<FleetSummary> {
        let scope = if p.is_installation_admin() {
            None
        } else {
            Some(p.namespace.as_deref().unwrap_or_default())
        };
        Ok(self.store.fleet_summary(scope).await?)
    }

    /// A stream of watch events after `cursor` (see
    /// [`crate::watch::start_after`]) that the caller may see: everything
    /// for installation admins; for a tenant token its own namespace's
    /// events and those of the clusters its revisions are placed on. With
    /// `follow` false the stream ends once it has caught up.
    pub async fn watch(
        &self,
        p: &Principal,
        cursor: Option<i64>,
        follow: bool,
    ) -> Result<crate::watch::Subscription> {
        use crate::watch::{CursorError, Scope};
        self.check_read(p, Action::Read, p.namespace.as_deref())?;
        let feed = self
            .watch
            .get()
            .ok_or_else(|| ServiceError::Unavailable("the watch feed is not running".into()))?;
        let scope = if p.is_installation_admin() {
            Scope::All
        } else {
            let own = self.own_namespace(p).await?;
            let placed = self.store.placed_clusters(&own.name).await?;
            Scope::tenant(own.name, own.id, placed)
        };
        let bounds = self.store.event_bounds().await?;
        let after = crate::watch::start_after(cursor, bounds).map_err(|e| match e {
            CursorError::Negative(_) => ServiceError::InvalidArgument {
                field: "cursor".into(),
                reason: e.to_string(),
            },
            CursorError::TooOld { .. } | CursorError::Ahead { .. } => {
                ServiceError::OutOfRange(e.to_string())
            }
        })?;
        let guard = token_guard(self.store.clone(), p, feed.token_recheck());
        Ok(feed.open(scope, after, follow).until_invalid(guard))
    }
}

/// Resolves, with the reason, once `p`'s token is revoked, expired or
/// deleted: looked up every `recheck`, and at its expiry. A store error is
/// not a verdict (looked up again next time); the hub's own operator
/// commands have no token to lose.
pub(super) fn token_guard(
    store: Arc<dyn Store>,
    p: &Principal,
    recheck: std::time::Duration,
) -> crate::watch::TokenGuard {
    let (id, system) = (p.token_id.clone(), p.is_system());
    Box::pin(async move {
        if system {
            return std::future::pending().await;
        }
        loop {
            let wait = match store.get_token(&id).await {
                Err(StoreError::NotFound { .. }) => return "the token was deleted".to_owned(),
                Err(e) => {
                    tracing::warn!(error = %e, "watch.token_recheck_failed");
                    recheck
                }
                Ok(t) if t.revoked_at.is_some() => return "the token was revoked".to_owned(),
                Ok(t) => match t.expires_at {
                    Some(at) => match (at - Utc::now()).to_std() {
                        Ok(left) if !left.is_zero() => left.min(recheck),
                        _ => return "the token expired".to_owned(),
                    },
                    None => recheck,
                },
            };
            tokio::time::sleep(wait).await;
        }
    })
}
