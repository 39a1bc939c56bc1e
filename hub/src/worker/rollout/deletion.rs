//! A deleted Agent's runtime state in both clusters. The hub keeps its
//! revision history and audit; its runtime state follows
//! `pipeline.retainOnAgentDelete`:
//! - `false` (default): destroyed. In the control cluster the Gateway's
//!   objects go, storage and transport Secret included; in each execution
//!   cluster every revision not yet retired is retired on its own cluster
//!   (its credential Secret goes), and the Agent-owned workspace claim goes
//!   on every cluster the Agent ever ran on: each retirement says so
//!   (`agentDeleted`, generation `AGENT_DELETE`), and a cluster whose
//!   revisions were all retired before gets it again for its latest one.
//! - `true`: kept as the stop left it (PVCs, credential Secrets, the
//!   Gateway's storage), for an operator to archive or remove.

use std::collections::BTreeMap;

use clawfed_proto::work::{self as wire, generation};

use super::spec::{harness_target, revision_work};
use super::{PassError, Rollout, store_err};
use crate::auth::Action;
use crate::model::{AgentRevision, RevisionPhase, WorkItem};
use crate::store::{Store, StoreError};
use crate::worker::WorkError;

impl Rollout {
    async fn delete_agent(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        let ns_name = item
            .namespace
            .clone()
            .ok_or_else(|| WorkError::permanent("agent.delete without a namespace"))?;
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
            .delete(&ns.id, &ns.name, agent)
            .await
            .map_err(|e| WorkError::retryable_because("gateway delete", e))?;
        let mut retired = 0;
        // Per cluster: the revisions that had Harness work there.
        let mut placed: BTreeMap<String, Vec<AgentRevision>> = BTreeMap::new();
        for rev in store
            .list_revisions(&ns.name, agent)
            .await
            .map_err(store_err)?
        {
            let Some(cluster_name) = rev.resolved_cluster.clone() else {
                continue; // never placed: nothing of it runs anywhere
            };
            let cluster = match store.get_cluster(&cluster_name).await {
                Ok(c) => c,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(store_err(e)),
            };
            let latest = store
                .outbox_latest_generation(&cluster.id, &harness_target(&ns, &rev))
                .await
                .map_err(store_err)?;
            match latest {
                None => continue, // no Harness work ever went there
                // Its Agent-deletion retirement is queued (a retried pass).
                Some(g) if g >= generation::AGENT_DELETE => continue,
                Some(_) => placed.entry(cluster.id).or_default().push(rev),
            }
        }
        for (cluster_id, revs) in placed {
            let live: Vec<&AgentRevision> = revs
                .iter()
                .filter(|r| r.phase != RevisionPhase::Retired)
                .collect();
            // Every revision there retired before: the latest one carries
            // the claim's removal.
            let to_send = if live.is_empty() {
                revs.iter().max_by_key(|r| r.number).into_iter().collect()
            } else {
                live
            };
            let data_plane_namespace = self
                .physical_namespace_name(store, &ns, &cluster_id)
                .await?;
            for rev in to_send {
                let mut work = revision_work(&ns, &data_plane_namespace, rev);
                work.agent_deleted = true;
                self.send(
                    &cluster_id,
                    &harness_target(&ns, rev),
                    generation::AGENT_DELETE,
                    &wire::WorkSpec::HarnessRetire(work),
                )
                .await?;
                if rev.phase == RevisionPhase::Retired {
                    continue;
                }
                let mut rev = rev.clone();
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
