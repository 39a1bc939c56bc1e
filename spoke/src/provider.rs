//! The SandboxDriver provider: what runs Harness workloads beyond plain
//! Kubernetes objects. The executor calls it at fixed points (see
//! [`crate::cleanup`] for the order); each call receives a cancellation signal.
//!
//! - [`ordinary::DeploymentDriver`]: the ordinary path; the executor applies
//!   the Harness Deployment itself and the driver owns nothing extra.
//! - [`crd::CrdSandboxDriver`]: owns the Harness through a custom resource it
//!   installs (CRD `sandboxharnesses.sandbox.clawfed.io`) and manages,
//!   proving delegation.

pub mod crd;
pub mod ordinary;

use std::collections::BTreeMap;

use async_trait::async_trait;
use clawfed_proto::work::HarnessWork;
use k8s_openapi::api::core::v1::PodSpec;
use tokio_util::sync::CancellationToken;

/// Errors of a provider.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider does not provision Harnesses (ordinary drivers).
    #[error("provider {0} does not provision harnesses")]
    Unsupported(String),
    /// A Kubernetes request failed.
    #[error("provider kubernetes request: {0}")]
    Kube(#[from] crate::apply::Error),
    /// The provider failed for its own reasons.
    #[error("provider failed: {0}")]
    Failed(String),
    /// The call was cancelled.
    #[error("provider call cancelled")]
    Cancelled,
}

impl From<clawfed_kube::RequestError> for ProviderError {
    fn from(e: clawfed_kube::RequestError) -> Self {
        ProviderError::Kube(e.into())
    }
}

impl ProviderError {
    /// True when the apiserver answered 403 Forbidden.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, ProviderError::Kube(e) if e.is_forbidden())
    }

    /// True when retrying the same work later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ProviderError::Kube(e) => e.is_transient(),
            ProviderError::Cancelled => true,
            ProviderError::Unsupported(_) | ProviderError::Failed(_) => false,
        }
    }
}

/// The namespace a provider call is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceContext {
    /// The physical namespace.
    pub namespace: String,
    /// The tenant (clawfed namespace name).
    pub tenant: String,
    /// The clawfed namespace id.
    pub namespace_id: String,
}

/// A Harness the provider is asked to own.
#[derive(Debug, Clone)]
pub struct HarnessContext<'a> {
    /// The work.
    pub work: &'a HarnessWork,
    /// Name for the provider's object(s).
    pub name: String,
    /// Ownership labels for the provider's objects.
    pub object_labels: BTreeMap<String, String>,
    /// Labels every Harness Pod must carry (selector + requirement labels).
    pub pod_labels: BTreeMap<String, String>,
    /// The hardened Pod spec the Harness must run with.
    pub pod_spec: PodSpec,
    /// The work target and generation (for the generation annotations).
    pub target: String,
    /// The work generation.
    pub generation: i64,
}

/// A revision whose provider-owned parts are to be cleaned up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionContext {
    /// The physical namespace.
    pub namespace: String,
    /// The Agent.
    pub agent: String,
    /// The revision number.
    pub revision: i64,
    /// The revision id.
    pub revision_id: String,
    /// Name of the provider's object(s) for the revision.
    pub name: String,
}

/// A SandboxDriver provider.
#[async_trait]
pub trait SandboxDriver: Send + Sync {
    /// A short name for logs and reports.
    fn name(&self) -> &str;

    /// Prepares a data-plane namespace for the provider (after the spoke has
    /// applied the namespace and its guard rails).
    async fn ensure_namespace(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError>;

    /// True when the provider can own Harnesses ([`SandboxDriver::provision_harness`]).
    fn provisions_harness(&self) -> bool {
        false
    }

    /// The longest data-plane namespace name the provider's workspaces can
    /// carry (`None`: any valid name). Provider work in a longer (adopted)
    /// namespace is refused.
    fn max_namespace_len(&self) -> Option<usize> {
        None
    }

    /// The containment the provider declares for the Harnesses it owns
    /// (`clawfed_proto::capability::CONTAINMENT_*`): dedicated native
    /// OpenClaw is placed only where all of them are declared.
    fn containment(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Optional: runs the Harness for provider-mode work.
    async fn provision_harness(
        &self,
        harness: &HarnessContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        let _ = (harness, cancel);
        Err(ProviderError::Unsupported(self.name().to_string()))
    }

    /// Removes whatever the provider owns for a revision. Called on every stop
    /// and retire after the ordinary Deployment is absent, whether or not the
    /// revision ever had one; must converge when nothing is left.
    async fn cleanup_revision(
        &self,
        revision: &RevisionContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError>;

    /// Removes whatever the provider owns in a namespace; runs before any
    /// namespace infrastructure is deleted, and a failure blocks the teardown.
    async fn cleanup_namespace(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError>;

    /// Revokes credentials the provider issued for the namespace; a failure
    /// blocks the teardown. Default: nothing to revoke.
    async fn revoke_credentials(
        &self,
        ns: &NamespaceContext,
        cancel: &CancellationToken,
    ) -> Result<(), ProviderError> {
        let _ = (ns, cancel);
        Ok(())
    }
}

/// What the spoke advertises in Hello about its SandboxDriver: its name,
/// whether it provisions Harnesses, and the containment it declares (only
/// meaningful for a provisioning driver).
pub fn capabilities(driver: &dyn SandboxDriver) -> Vec<String> {
    use clawfed_proto::capability;
    let mut out = vec![capability::sandbox_driver(driver.name())];
    if driver.provisions_harness() {
        out.push(capability::SANDBOX_PROVISIONS.to_owned());
        out.extend(driver.containment().into_iter().map(str::to_owned));
    }
    out
}
