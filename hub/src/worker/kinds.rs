//! Work kinds and their handlers.

use async_trait::async_trait;
use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::{WorkError, WorkHandler};
use crate::auth::Action;
use crate::model::WorkItem;
use crate::store::Store;

/// Records a tenant's data-plane namespace as provisioned. (The spoke does
/// the Kubernetes part once the link exists; the hub-side record is what
/// proves the queue end to end.)
pub const NAMESPACE_PROVISION: &str = "namespace.provision";

/// Handler of [`NAMESPACE_PROVISION`].
#[derive(Debug, Default)]
pub struct ProvisionNamespace;

#[async_trait]
impl WorkHandler for ProvisionNamespace {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        store
            .mark_namespace_provisioned(&item.target, Utc::now())
            .await
            .map_err(WorkError::from_store)?;
        Ok(())
    }
}
