//! `agent.stop`: the route and Gateway runtime first (hub), then the
//! Harness of every revision that may still run one (spoke).

use chrono::Utc;

use super::{Flow, PassError, PassResult, Rollout, store_err};
use crate::auth::Action;
use crate::model::{Agent, AgentRevision, DesiredState, Namespace, RevisionPhase, WorkItem};
use crate::pipeline::{Step, decide_stop};
use crate::store::{Store, StoreError};
use crate::worker::WorkError;

impl Rollout {
    /// Stops an Agent: route and Gateway runtime first (hub), then the
    /// Harness of every revision that may still run one (spoke). A revision
    /// is `stopping` until its cluster confirms the stop. Converges when
    /// things are already gone.
    async fn stop_agent(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        let ns_name = item
            .namespace
            .clone()
            .ok_or_else(|| WorkError::permanent("stop work without a namespace"))?;
        let agent = match store.get_agent(&ns_name, &item.target).await {
            Ok(a) => a,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(store_err(e)),
        };
        self.holding_agent_lease(
            store,
            &agent.id,
            self.stop_agent_held(store, item, &ns_name),
        )
        .await
    }

    async fn stop_agent_held(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        ns_name: &str,
    ) -> Result<(), WorkError> {
        let ns = store.get_namespace(ns_name).await.map_err(store_err)?;
        let agent = store
            .get_agent(ns_name, &item.target)
            .await
            .map_err(store_err)?;
        if agent.desired_state != DesiredState::Stopped {
            return Ok(()); // redeployed since: nothing to stop
        }
        self.gateways
            .stop(&ns.id, &ns.name, &agent.name)
            .await
            .map_err(|e| WorkError::retryable_because("gateway stop", e))?;
        store
            .clear_active_revision(&ns.name, &agent.name)
            .await
            .map_err(store_err)?;
        for rev in store
            .list_revisions(&ns.name, &agent.name)
            .await
            .map_err(store_err)?
        {
            if matches!(
                rev.phase,
                RevisionPhase::Retired | RevisionPhase::Stopped | RevisionPhase::Failed
            ) {
                continue;
            }
            for _ in 0..3 {
                let fresh = store.get_revision_by_id(&rev.id).await.map_err(store_err)?;
                match self.stop_revision(store, &ns, &agent, fresh).await {
                    Err(PassError::Stale) => continue,
                    Err(PassError::Work(e)) => return Err(e),
                    Ok(_) => break,
                }
            }
        }
        tracing::info!(agent = %agent.name, namespace = %ns.name, elapsedMs = (Utc::now() - item.created_at).num_milliseconds(), "pipeline.stopped");
        self.observe("stop", "ok", item.created_at);
        Ok(())
    }

    /// Drives one revision of a stopped Agent as far as it goes now (the
    /// stop is sent; its report brings the rest through a pass).
    async fn stop_revision(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        agent: &Agent,
        mut rev: AgentRevision,
    ) -> PassResult {
        for _ in 0..4 {
            let g = self.gather(store, ns, agent, &rev).await?;
            let step = decide_stop(&g.facts);
            if matches!(step, Step::Wait { .. } | Step::Finished) {
                break;
            }
            self.perform(store, ns, agent, rev.clone(), &g, step)
                .await?;
            rev = store.get_revision_by_id(&rev.id).await.map_err(store_err)?;
        }
        Ok(Flow::Settled)
    }
}

rollout_handler!(
    /// `agent.stop` handler.
    StopHandler,
    Action::Deploy,
    stop_agent
);
