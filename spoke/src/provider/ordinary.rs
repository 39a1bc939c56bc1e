//! The ordinary path: the executor applies the Harness Deployment itself, so
//! this driver owns nothing and every hook converges immediately.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{NamespaceContext, ProviderError, RevisionContext, SandboxDriver};

/// The ordinary Deployment driver.
#[derive(Debug, Clone, Default)]
pub struct DeploymentDriver;

#[async_trait]
impl SandboxDriver for DeploymentDriver {
    fn name(&self) -> &str {
        "deployment"
    }

    async fn ensure_namespace(
        &self,
        _ns: &NamespaceContext,
        _cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn cleanup_revision(
        &self,
        _revision: &RevisionContext,
        _cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn cleanup_namespace(
        &self,
        _ns: &NamespaceContext,
        _cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        Ok(())
    }
}
