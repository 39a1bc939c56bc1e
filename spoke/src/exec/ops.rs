//! The cleanup plans' steps run against the cluster and the provider:
//! [`RevisionOps`] (stop, retire, a failed preparation) and
//! [`NamespaceOps`] (namespace teardown; for an adopted namespace only what
//! clawfed owns in it).

use async_trait::async_trait;
use clawfed_kube::RequestError;
use clawfed_proto::labels;
use clawfed_proto::work::RevisionWork;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, LimitRange, Namespace, PersistentVolumeClaim, ResourceQuota, Secret, Service,
    ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch};
use tokio_util::sync::CancellationToken;

use super::Executor;
use super::outcome::Failure;
use crate::apply::namespace as nsapply;
use crate::apply::{self, harness, merge_params};
use crate::cleanup::{CleanupOps, NamespaceStep, RevisionStep, StepFailed};
use crate::provider::{NamespaceContext, RevisionContext};

/// Runs revision cleanup steps against the cluster and the provider.
pub(super) struct RevisionOps<'a> {
    exec: &'a Executor,
    r: &'a RevisionWork,
    names: harness::Names,
    cancel: CancellationToken,
}

impl<'a> RevisionOps<'a> {
    pub(super) fn new(exec: &'a Executor, r: &'a RevisionWork) -> Self {
        RevisionOps {
            exec,
            r,
            names: harness::names(&r.agent, r.revision),
            cancel: exec.cancel.child_token(),
        }
    }
}

fn step_failed(step: impl std::fmt::Debug, e: impl Into<Failure>) -> StepFailed {
    let f = e.into();
    StepFailed {
        step: format!("{step:?}"),
        reason: f.reason,
        transient: f.transient,
        forbidden: f.forbidden,
    }
}

#[async_trait]
impl CleanupOps<RevisionStep> for RevisionOps<'_> {
    async fn run(&self, step: RevisionStep) -> Result<(), StepFailed> {
        let c = &self.exec.client;
        let ns = self.r.data_plane_namespace.as_str();
        let res: Result<(), Failure> = async {
            match step {
                RevisionStep::DeleteDeployment => {
                    let api = Api::<Deployment>::namespaced(c.clone(), ns);
                    if apply::delete_if_present(
                        &api,
                        &self.names.harness,
                        &DeleteParams::foreground(),
                    )
                    .await?
                    {
                        apply::wait_gone(
                            &api,
                            &self.names.harness,
                            self.exec.config.delete_timeout,
                            &self.cancel,
                        )
                        .await?;
                    }
                }
                RevisionStep::ProviderCleanupRevision => {
                    let ctx = RevisionContext {
                        namespace: ns.into(),
                        agent: self.r.agent.clone(),
                        revision: self.r.revision,
                        revision_id: self.r.revision_id.clone(),
                        name: self.names.harness.clone(),
                    };
                    self.exec
                        .driver
                        .cleanup_revision(&ctx, &self.cancel)
                        .await?;
                }
                RevisionStep::DeleteService => {
                    delete_in::<Service>(c, ns, &self.names.harness).await?;
                }
                RevisionStep::DeleteServiceAccount => {
                    delete_in::<ServiceAccount>(c, ns, &self.names.harness).await?;
                }
                RevisionStep::DeleteCredentialSecret => {
                    delete_in::<Secret>(c, ns, &self.names.credentials).await?;
                }
                RevisionStep::DeleteWorkspace => {
                    delete_in::<PersistentVolumeClaim>(c, ns, &self.names.workspace).await?;
                }
            }
            Ok(())
        }
        .await;
        tracing::debug!(namespace = ns, agent = %self.r.agent, revision = self.r.revision, ?step, ok = res.is_ok(), "spoke.cleanup.step");
        res.map_err(|e| step_failed(step, e))
    }
}

/// Runs namespace teardown steps.
pub(super) struct NamespaceOps<'a> {
    pub(super) exec: &'a Executor,
    pub(super) ctx: NamespaceContext,
    pub(super) adopted: bool,
    pub(super) cancel: CancellationToken,
}

impl NamespaceOps<'_> {
    /// For an adopted namespace: delete only what clawfed owns in it, then
    /// drop clawfed's markers from the namespace.
    async fn delete_owned_objects(&self) -> Result<(), Failure> {
        let c = &self.exec.client;
        let ns = self.ctx.namespace.as_str();
        let lp =
            ListParams::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
        let dp = DeleteParams::background();
        macro_rules! purge {
            ($t:ty, $kind:literal) => {
                Api::<$t>::namespaced(c.clone(), ns)
                    .delete_collection(&dp, &lp)
                    .await
                    .map_err(|e| RequestError::new("deletecollection", $kind, ns, "", e))?;
            };
        }
        // The desired-state records first: nothing is repaired once its
        // record is gone.
        Api::<Secret>::namespaced(c.clone(), ns)
            .delete_collection(
                &dp,
                &ListParams::default().labels(&format!(
                    "{}={},{}=true",
                    labels::MANAGED_BY,
                    labels::MANAGER,
                    crate::drift::desired::LABEL
                )),
            )
            .await
            .map_err(|e| RequestError::new("deletecollection", "Secret", ns, "", e))?;
        purge!(Deployment, "Deployment");
        purge!(Service, "Service");
        purge!(ServiceAccount, "ServiceAccount");
        purge!(Secret, "Secret");
        purge!(PersistentVolumeClaim, "PersistentVolumeClaim");
        purge!(NetworkPolicy, "NetworkPolicy");
        purge!(ResourceQuota, "ResourceQuota");
        purge!(LimitRange, "LimitRange");
        purge!(ConfigMap, "ConfigMap");
        // Drop the markers (the fields this manager applied) before the
        // binding that grants the rights above goes.
        let bare = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let namespaces: Api<Namespace> = Api::all(c.clone());
        namespaces
            .patch(ns, &apply::apply_params(), &Patch::Apply(&bare))
            .await
            .map_err(|e| RequestError::new("apply", "Namespace", "", ns, e))?;
        let marker_patch = serde_json::json!({ "metadata": { "annotations": {
            labels::GENERATION_ANNOTATION: null, labels::WORK_TARGET_ANNOTATION: null } } });
        namespaces
            .patch(ns, &merge_params(), &Patch::Merge(&marker_patch))
            .await
            .map_err(|e| RequestError::new("patch", "Namespace", "", ns, e))?;
        apply::delete_if_present(
            &Api::<RoleBinding>::namespaced(c.clone(), ns),
            nsapply::SPOKE_BINDING,
            &dp,
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl CleanupOps<NamespaceStep> for NamespaceOps<'_> {
    async fn run(&self, step: NamespaceStep) -> Result<(), StepFailed> {
        let res: Result<(), Failure> = async {
            match step {
                NamespaceStep::ProviderCleanupNamespace => {
                    self.exec
                        .driver
                        .cleanup_namespace(&self.ctx, &self.cancel)
                        .await?;
                }
                NamespaceStep::RevokeCredentials => {
                    self.exec
                        .driver
                        .revoke_credentials(&self.ctx, &self.cancel)
                        .await?;
                }
                NamespaceStep::DeleteInfrastructure => {
                    self.exec.observer.unwatch_namespace(&self.ctx.namespace);
                    if self.adopted {
                        self.delete_owned_objects().await?;
                    } else {
                        let api: Api<Namespace> = Api::all(self.exec.client.clone());
                        match api
                            .delete(&self.ctx.namespace, &DeleteParams::background())
                            .await
                        {
                            Ok(_) => {}
                            Err(e) if apply::is_not_found(&e) => {}
                            Err(e) => {
                                return Err(RequestError::new(
                                    "delete",
                                    "Namespace",
                                    "",
                                    &self.ctx.namespace,
                                    e,
                                )
                                .into());
                            }
                        }
                    }
                }
            }
            Ok(())
        }
        .await;
        tracing::info!(namespace = %self.ctx.namespace, ?step, ok = res.is_ok(), "spoke.namespace.teardown_step");
        res.map_err(|e| step_failed(step, e))
    }
}

/// Deletes `name` of kind `K` in `ns` with background propagation; absent
/// is success (the revision cleanup steps that need no wait).
async fn delete_in<K: apply::NamespacedObject>(
    c: &kube::Client,
    ns: &str,
    name: &str,
) -> apply::Result<bool> {
    let api = Api::<K>::namespaced(c.clone(), ns);
    apply::delete_if_present(&api, name, &DeleteParams::background()).await
}
