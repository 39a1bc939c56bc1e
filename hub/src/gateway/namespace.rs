//! Each tenant's managed Gateway namespace: made (marked with the tenant's
//! namespace id, Pod Security `restricted`), the hub's runtime role bound
//! there to the hub alone, the tenant's quota and container defaults
//! applied; deleted at the tenant's teardown. A namespace of that name
//! without the tenant's mark is never used or deleted.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use clawfed_kube::{RequestError, is_forbidden, is_status};
use clawfed_proto::labels;

use super::client::{AUTHORIZE_WAIT, Gateways, Step, TenantGateways, deleted, label_of};
use super::error::{Error, Result};
use super::objects;

impl Gateways {
    /// Deletes the managed Gateway namespace of the tenant `namespace_id`
    /// (its teardown: every Agent's Gateway and storage with it) and waits
    /// until it is gone. Only a namespace carrying the tenant's
    /// [`labels::GATEWAY_NAMESPACE`] mark is deleted; an absent one is done.
    pub async fn delete_namespace(&self, namespace_id: &str) -> Result<Step> {
        let tenant = self.tenant(namespace_id);
        let name = tenant.namespace.clone();
        let api = Api::<Namespace>::all(self.client.clone());
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| RequestError::new("get", "Namespace", "", &name, e))?;
        let Some(found) = found else {
            return Ok(deleted("Namespace", &name, false));
        };
        if label_of(&found.metadata, labels::GATEWAY_NAMESPACE) != Some(namespace_id) {
            return Err(Error::NamespaceUnavailable {
                namespace: name,
                reason: format!(
                    "not marked {}={namespace_id}: not clawfed's to delete",
                    labels::GATEWAY_NAMESPACE
                ),
            });
        }
        let existed = clawfed_kube::object::delete_if_present(
            &api,
            "Namespace",
            &name,
            &DeleteParams::background(),
        )
        .await?;
        if existed {
            tenant.wait_gone(&api, "Namespace", &name).await?;
        }
        self.passed.namespace.set(&name, false);
        self.passed.routing.set(&name, false);
        tracing::info!(namespace = %name, namespace_id, "gateway.namespace_deleted");
        Ok(deleted("Namespace", &name, existed))
    }
}

impl TenantGateways {
    /// The tenant's Gateway namespace, ready for its Gateways (made and
    /// bound at most once per `CHECK_TTL` while it passes).
    pub(super) async fn ensure_namespace(&self, tenant: &str) -> Result<()> {
        if self.passed.namespace.fresh(self.ns()) {
            return Ok(());
        }
        let verdict = self.ensure_namespace_now(tenant).await;
        self.passed.namespace.set(self.ns(), verdict.is_ok());
        verdict
    }

    /// Creates the tenant's Gateway namespace (marked with its namespace
    /// id), binds the hub's Gateway runtime role there, and applies the
    /// tenant's quota and container defaults. A namespace of that name
    /// carrying another id, or none, is refused: it is not this tenant's.
    async fn ensure_namespace_now(&self, tenant: &str) -> Result<()> {
        let api = Api::<Namespace>::all(self.client.clone());
        let unavailable = |reason: String| Error::NamespaceUnavailable {
            namespace: self.ns().to_string(),
            reason,
        };
        let found = match api.get_opt(self.ns()).await {
            Ok(found) => found,
            Err(e) if is_forbidden(&e) => {
                return Err(unavailable(
                    "clawfed-hub may not read namespaces (apply deploy/hub/rbac.yaml)".into(),
                ));
            }
            Err(e) => return Err(RequestError::new("get", "Namespace", "", self.ns(), e).into()),
        };
        if let Some(found) = &found {
            let mark = label_of(&found.metadata, labels::GATEWAY_NAMESPACE);
            if mark != Some(self.namespace_id.as_str()) {
                return Err(unavailable(format!(
                    "it exists without the mark {}={} (not this tenant's)",
                    labels::GATEWAY_NAMESPACE,
                    self.namespace_id
                )));
            }
        } else {
            let ns = objects::gateway_namespace(self.ns(), &self.namespace_id, tenant);
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) => {}
                Err(e) if is_forbidden(&e) => {
                    return Err(unavailable(format!(
                        "clawfed-hub may not create it: {e} (apply deploy/hub/rbac.yaml and admission.yaml)"
                    )));
                }
                Err(e) => {
                    return Err(RequestError::new("create", "Namespace", "", self.ns(), e).into());
                }
            }
        }
        let c = &self.config;
        self.apply(&objects::runtime_binding(self.ns(), c)).await?;
        self.wait_authorized().await?;
        let (quota, limits) = (
            objects::namespace_quota(self.ns(), c),
            objects::namespace_limits(self.ns(), c),
        );
        futures::try_join!(self.apply(&quota), self.apply(&limits))?;
        tracing::info!(namespace = %self.ns(), namespace_id = %self.namespace_id, "gateway.namespace_ready");
        Ok(())
    }

    /// Waits until the RoleBinding just applied is in force (the
    /// authorizer learns of it from a watch, a moment later): the hub may
    /// create ServiceAccounts there. Bounded; a binding still not honoured
    /// is a transient failure.
    async fn wait_authorized(&self) -> Result<()> {
        let mut interval = clawfed_kube::object::FIRST_POLL;
        let start = tokio::time::Instant::now();
        loop {
            let denied = self.access_review("", "serviceaccounts", "create").await?;
            let Some(reason) = denied else {
                return Ok(());
            };
            if start.elapsed() >= AUTHORIZE_WAIT {
                return Err(Error::BindingPending {
                    namespace: self.ns().to_string(),
                    waited: AUTHORIZE_WAIT,
                    reason,
                });
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(clawfed_kube::object::MAX_POLL);
        }
    }

    /// Makes the next ensure or activation check the namespace and the
    /// routing rights again (a write failed: one may have changed).
    pub(super) fn forget_checks(&self) {
        self.passed.namespace.set(self.ns(), false);
        self.passed.routing.set(self.ns(), false);
    }
}
