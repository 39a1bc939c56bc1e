//! Stop, retire and namespace teardown ordering (DESIGN.md, "Stop, retire,
//! cleanup") as pure plans, and one runner that executes a plan step by step
//! against [`CleanupOps`], stopping at the first failure.
//!
//! - Stop: delete the ordinary Deployment when present and wait until it is
//!   gone, then ALWAYS run the provider's revision cleanup (an absent
//!   Deployment does not skip it), then the revision's Service and
//!   ServiceAccount. PVC and credential Secret are kept.
//! - Retire: stop, then the destructive part of the revision's own objects:
//!   its credential Secret. The Agent-owned workspace claim is kept for the
//!   Agent's next revision.
//! - Agent deleted: retire, then the Agent-owned workspace claim.
//! - Namespace teardown: the provider's namespace cleanup first, then the
//!   credential revocation, and only then any Kubernetes infrastructure; a
//!   failure in either of the first two deletes nothing.
//! - A preparation error runs the workload cleanup hooks ([`PREPARATION_FAILED`]).

use async_trait::async_trait;

/// One step of revision cleanup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RevisionStep {
    /// Delete the ordinary Harness Deployment (if present) and wait until gone.
    DeleteDeployment,
    /// The provider's `cleanup_revision` (always runs).
    ProviderCleanupRevision,
    /// Delete the Harness Service.
    DeleteService,
    /// Delete the Harness ServiceAccount.
    DeleteServiceAccount,
    /// Delete the credential Secret (retire only).
    DeleteCredentialSecret,
    /// Delete the Agent-owned workspace PVC (the Agent's deletion only).
    DeleteWorkspace,
}

/// One step of namespace teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NamespaceStep {
    /// The provider's `cleanup_namespace`.
    ProviderCleanupNamespace,
    /// Revoke the credentials issued for the namespace.
    RevokeCredentials,
    /// Delete the Kubernetes infrastructure (the namespace, or for an adopted
    /// one the objects clawfed owns in it).
    DeleteInfrastructure,
}

/// Stop: keeps PVC and credential Secret.
pub const STOP: &[RevisionStep] = &[
    RevisionStep::DeleteDeployment,
    RevisionStep::ProviderCleanupRevision,
    RevisionStep::DeleteService,
    RevisionStep::DeleteServiceAccount,
];

/// Retire: the destructive cleanup of the revision's own objects; the
/// Agent-owned claim stays.
pub const RETIRE: &[RevisionStep] = &[
    RevisionStep::DeleteDeployment,
    RevisionStep::ProviderCleanupRevision,
    RevisionStep::DeleteService,
    RevisionStep::DeleteServiceAccount,
    RevisionStep::DeleteCredentialSecret,
];

/// The retirement sent when the Agent is deleted: retire, then the
/// Agent-owned claim (after the Deployment is gone, so no Pod holds it).
pub const AGENT_DELETED: &[RevisionStep] = &[
    RevisionStep::DeleteDeployment,
    RevisionStep::ProviderCleanupRevision,
    RevisionStep::DeleteService,
    RevisionStep::DeleteServiceAccount,
    RevisionStep::DeleteCredentialSecret,
    RevisionStep::DeleteWorkspace,
];

/// The workload cleanup hooks after a preparation error: remove the runtime
/// that may have started, keep data (the work may be retried).
pub const PREPARATION_FAILED: &[RevisionStep] = &[
    RevisionStep::DeleteDeployment,
    RevisionStep::ProviderCleanupRevision,
];

/// Namespace teardown.
pub const NAMESPACE_TEARDOWN: &[NamespaceStep] = &[
    NamespaceStep::ProviderCleanupNamespace,
    NamespaceStep::RevokeCredentials,
    NamespaceStep::DeleteInfrastructure,
];

/// A cleanup step failed.
#[derive(Debug, thiserror::Error)]
#[error("cleanup step {step} failed: {reason}")]
pub struct StepFailed {
    /// The failed step.
    pub step: String,
    /// Why.
    pub reason: String,
    /// True when retrying may succeed.
    pub transient: bool,
    /// True when the apiserver answered 403 Forbidden.
    pub forbidden: bool,
}

/// Executes cleanup steps (the I/O side).
#[async_trait]
pub trait CleanupOps<S>: Send + Sync {
    /// Runs one step.
    async fn run(&self, step: S) -> Result<(), StepFailed>;
}

/// Runs `plan` in order, stopping at the first failure; later steps never run.
pub async fn run_plan<S, O>(ops: &O, plan: &[S]) -> Result<(), StepFailed>
where
    S: Copy + Send + Sync,
    O: CleanupOps<S> + ?Sized,
{
    for step in plan {
        ops.run(*step).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder<S> {
        ran: Mutex<Vec<S>>,
        fail: Option<S>,
    }

    #[async_trait]
    impl<S: Copy + PartialEq + Send + Sync + std::fmt::Debug> CleanupOps<S> for Recorder<S> {
        async fn run(&self, step: S) -> Result<(), StepFailed> {
            self.ran.lock().expect("lock").push(step);
            if self.fail == Some(step) {
                return Err(StepFailed {
                    step: format!("{step:?}"),
                    reason: "injected".into(),
                    transient: false,
                    forbidden: false,
                });
            }
            Ok(())
        }
    }

    fn rec<S>(fail: Option<S>) -> Recorder<S> {
        Recorder {
            ran: Mutex::new(Vec::new()),
            fail,
        }
    }

    #[tokio::test]
    async fn stop_runs_provider_cleanup_after_the_deployment_and_keeps_data() {
        let r = rec(None);
        run_plan(&r, STOP).await.expect("stop");
        let ran = r.ran.into_inner().expect("lock");
        assert_eq!(ran[0], RevisionStep::DeleteDeployment);
        assert_eq!(ran[1], RevisionStep::ProviderCleanupRevision);
        assert!(!ran.contains(&RevisionStep::DeleteWorkspace));
        assert!(!ran.contains(&RevisionStep::DeleteCredentialSecret));
    }

    #[tokio::test]
    async fn retire_is_stop_plus_the_revisions_credential_and_keeps_the_agents_claim() {
        assert_eq!(&RETIRE[..STOP.len()], STOP);
        assert!(RETIRE.contains(&RevisionStep::DeleteCredentialSecret));
        assert!(
            !RETIRE.contains(&RevisionStep::DeleteWorkspace),
            "the next revision mounts the Agent's claim"
        );
    }

    #[tokio::test]
    async fn the_agents_deletion_is_retire_then_its_claim() {
        assert_eq!(&AGENT_DELETED[..RETIRE.len()], RETIRE);
        assert_eq!(AGENT_DELETED.last(), Some(&RevisionStep::DeleteWorkspace));
    }

    #[tokio::test]
    async fn failed_deployment_deletion_does_not_reach_the_provider() {
        let r = rec(Some(RevisionStep::DeleteDeployment));
        assert!(run_plan(&r, STOP).await.is_err());
        assert_eq!(
            r.ran.into_inner().expect("lock"),
            vec![RevisionStep::DeleteDeployment]
        );
    }

    #[tokio::test]
    async fn provider_namespace_cleanup_failure_deletes_no_infrastructure() {
        let r = rec(Some(NamespaceStep::ProviderCleanupNamespace));
        let err = run_plan(&r, NAMESPACE_TEARDOWN).await.expect_err("fails");
        assert!(err.to_string().contains("ProviderCleanupNamespace"));
        assert_eq!(
            r.ran.into_inner().expect("lock"),
            vec![NamespaceStep::ProviderCleanupNamespace]
        );
    }

    #[tokio::test]
    async fn failed_revocation_blocks_teardown() {
        let r = rec(Some(NamespaceStep::RevokeCredentials));
        assert!(run_plan(&r, NAMESPACE_TEARDOWN).await.is_err());
        let ran = r.ran.into_inner().expect("lock");
        assert_eq!(
            ran,
            vec![
                NamespaceStep::ProviderCleanupNamespace,
                NamespaceStep::RevokeCredentials
            ]
        );
    }

    #[tokio::test]
    async fn preparation_failure_hooks_remove_runtime_only() {
        let r = rec(None);
        run_plan(&r, PREPARATION_FAILED).await.expect("hooks");
        assert_eq!(
            r.ran.into_inner().expect("lock"),
            vec![
                RevisionStep::DeleteDeployment,
                RevisionStep::ProviderCleanupRevision
            ]
        );
    }
}
