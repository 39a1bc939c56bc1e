//! Tenant teardown: every cluster the tenant was provisioned in deletes its
//! namespace (the spoke runs the provider's namespace cleanup first), then
//! the hub deletes the tenant's Gateway namespace in the control cluster;
//! the tenant is deleted when all are gone, and kept as `teardown-failed`
//! with the reason otherwise.

use clawfed_proto::work::{self as spec, target};

use super::facts::outcome;
use super::{Rollout, store_err};
use crate::auth::Action;
use crate::model::WorkItem;
use crate::pipeline::WorkOutcome;
use crate::store::{Store, StoreError};
use crate::worker::WorkError;

impl Rollout {
    /// One pass of a namespace teardown: ask every cluster that has the
    /// namespace to delete it, then delete the tenant once all say it is
    /// gone; a failure keeps the tenant (and the spoke keeps the
    /// infrastructure) with the reason.
    async fn teardown(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        use crate::model::NamespaceState;
        let ns = match store.get_namespace_by_id(&item.target).await {
            Ok(ns) => ns,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(store_err(e)),
        };
        if ns.state != NamespaceState::Deleting {
            return Ok(());
        }
        // Each deletion request gets its own generation, so a retried
        // delete after a failure is new work for the spoke.
        let generation = ns.updated_at.timestamp_millis();
        let target = target::namespace(&ns.id);
        let work = spec::WorkSpec::NamespaceDelete(spec::NamespaceDeleteWork {
            tenant: ns.name.clone(),
            namespace_id: ns.id.clone(),
            data_plane_namespace: ns.data_plane_namespace.clone(),
        });
        let mut waiting = 0;
        let mut failures = Vec::new();
        let mut retrying = Vec::new();
        for cluster in store.list_clusters().await.map_err(store_err)? {
            let Some(sent) = store
                .outbox_latest_generation(&cluster.id, &target)
                .await
                .map_err(store_err)?
            else {
                continue; // never provisioned there
            };
            if sent < generation {
                self.send(&cluster.id, &target, generation, &work).await?;
                waiting += 1;
                continue;
            }
            match outcome(store, &cluster.id, &target, generation).await? {
                WorkOutcome::Applied => {}
                WorkOutcome::Waiting => waiting += 1,
                WorkOutcome::Retrying(reason) => {
                    waiting += 1;
                    retrying.push(format!("{}: {reason}", cluster.name));
                }
                WorkOutcome::Failed(reason) => failures.push(format!("{}: {reason}", cluster.name)),
            }
        }
        let system = |action: &str, result: &str, detail: Option<String>| crate::store::NewAudit {
            actor: "system:pipeline".into(),
            action: action.into(),
            namespace: Some(ns.name.clone()),
            target: format!("namespaces/{}", ns.name),
            result: result.into(),
            detail,
        };
        if !failures.is_empty() {
            let reason = format!(
                "teardown failed, infrastructure kept: {}",
                failures.join("; ")
            );
            tracing::error!(namespace = %ns.name, reason = %reason, "pipeline.teardown_failed");
            store
                .set_namespace_state(
                    &ns.id,
                    NamespaceState::TeardownFailed,
                    Some(&reason),
                    &crate::store::Effects::audit(system(
                        "namespace.teardown",
                        "error",
                        Some(reason.clone()),
                    )),
                )
                .await
                .map_err(store_err)?;
            return Ok(());
        }
        if waiting > 0 {
            // A spoke retrying its cleanup keeps the infrastructure. (The
            // namespace row is not touched: its updated_at is the teardown's
            // generation.) Their reports bring the next pass.
            if !retrying.is_empty() {
                tracing::warn!(namespace = %ns.name, reason = %retrying.join("; "), "pipeline.teardown_retrying");
            }
            return Ok(());
        }
        // The tenant's Gateway namespace in the control cluster goes last,
        // with every Gateway left in it (its Agents are gone by now).
        self.gateways
            .delete_namespace(&ns.id)
            .await
            .map_err(|e| WorkError::retryable_because("gateway namespace", e))?;
        match store
            .delete_namespace(
                &ns.name,
                &crate::store::Effects::audit(system("namespace.deleted", "ok", None)),
            )
            .await
        {
            Ok(()) | Err(StoreError::NotFound { .. }) => {
                tracing::info!(namespace = %ns.name, "pipeline.namespace_deleted");
                Ok(())
            }
            Err(e) => Err(store_err(e)),
        }
    }
}

rollout_handler!(
    /// `namespace.teardown` handler.
    TeardownHandler,
    Action::DeleteNamespace,
    teardown
);
