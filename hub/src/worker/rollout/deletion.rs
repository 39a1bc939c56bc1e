//! A deleted Agent's runtime state in both clusters. The hub keeps its
//! revision history and audit; its runtime state follows
//! `pipeline.retainOnAgentDelete`:
//! - `false` (default): destroyed. In the control cluster the Gateway's
//!   objects go, storage and transport Secret included; in each execution
//!   cluster every revision that ever had Harness work is retired on its
//!   own cluster (its workspace PVC and credential Secret go).
//! - `true`: kept as the stop left it (PVCs, credential Secrets, the
//!   Gateway's storage), for an operator to archive or remove.

use clawfed_proto::work::{self as wire, generation};

use super::spec::{harness_target, revision_work};
use super::{PassError, Rollout, store_err};
use crate::auth::Action;
use crate::model::{RevisionPhase, WorkItem};
use crate::store::{Store, StoreError};
use crate::worker::WorkError;

impl Rollout {
    async fn delete_agent(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        let ns_name = item
            .namespace
            .clone()
            .ok_or_else(|| WorkError::Permanent("agent.delete without a namespace".into()))?;
        let ns = match store.get_namespace(&ns_name).await {
            Ok(ns) => ns,
            // The tenant went, and its Agents' history with it.
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(store_err(e)),
        };
        let agent = item.target.as_str();
        if self.config.retain_on_agent_delete {
            tracing::info!(agent, namespace = %ns.name, "pipeline.agent_deleted_state_retained");
            return Ok(());
        }
        self.gateways
            .delete(&ns.name, agent)
            .await
            .map_err(|e| WorkError::Retryable(format!("gateway delete: {e}")))?;
        let mut retired = 0;
        for rev in store
            .list_revisions(&ns.name, agent)
            .await
            .map_err(store_err)?
        {
            if rev.phase == RevisionPhase::Retired {
                continue; // destructively cleaned already
            }
            let Some(cluster_name) = rev.resolved_cluster.clone() else {
                continue; // never placed: nothing of it runs anywhere
            };
            let cluster = match store.get_cluster(&cluster_name).await {
                Ok(c) => c,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(store_err(e)),
            };
            let target = harness_target(&ns, &rev);
            if store
                .outbox_latest_generation(&cluster.id, &target)
                .await
                .map_err(store_err)?
                .is_none()
            {
                continue; // no Harness work ever went there
            }
            let data_plane_namespace = self
                .physical_namespace_name(store, &ns, &cluster.id)
                .await?;
            let work =
                wire::WorkSpec::HarnessRetire(revision_work(&ns, &data_plane_namespace, &rev));
            self.send(&cluster.id, &target, generation::HARNESS_RETIRE, &work)
                .await?;
            let mut rev = rev;
            match self
                .enter(
                    store,
                    &mut rev,
                    RevisionPhase::Retired,
                    Some("agent deleted".into()),
                )
                .await
            {
                // A stale copy: the retirement is queued either way.
                Ok(()) | Err(PassError::Stale) => {}
                Err(PassError::Work(e)) => return Err(e),
            }
            retired += 1;
        }
        tracing::info!(agent, namespace = %ns.name, retired, "pipeline.agent_deleted_state_removed");
        Ok(())
    }
}

rollout_handler!(
    /// `agent.delete` handler.
    DeleteHandler,
    Action::EditDraft,
    delete_agent
);
