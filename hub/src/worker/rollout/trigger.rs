//! Turns spoke reports into pipeline passes: a report on a revision's
//! Harness (or its namespace) queues a pass over the revisions it concerns,
//! so the pipeline is event driven, not polled. So does a Gateway turning
//! Ready in the control cluster (the hub's Gateway watch): the revision
//! waiting for it gets a pass at once.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use clawfed_proto::work::target::Target;

use crate::model::{NamespaceState, RevisionPhase};
use crate::store::{NewWork, Store, StoreError};
use crate::worker::kinds::{rollout_work, teardown_work};

/// Queues pipeline passes for reports.
#[derive(Clone)]
pub struct RolloutTrigger {
    pub store: Arc<dyn Store>,
    pub max_attempts: i32,
}

impl std::fmt::Debug for RolloutTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RolloutTrigger").finish_non_exhaustive()
    }
}

#[async_trait]
impl crate::link::ReportListener for RolloutTrigger {
    async fn on_report(&self, _cluster_id: &str, target: &str, _kind: &str) {
        if let Err(e) = self.queue_for(target).await {
            tracing::warn!(target = %target, error = %e, "pipeline.trigger_failed");
        }
    }
}

#[async_trait]
impl crate::gateway::ReadyListener for RolloutTrigger {
    async fn gateway_ready(&self, ready: crate::gateway::GatewayReady) {
        if let Err(e) = self
            .queue_for_gateway(&ready.tenant, &ready.agent, ready.revision)
            .await
        {
            // The pass's own recheck (`pipeline.gatewayRecheckMs`) still
            // comes.
            tracing::warn!(tenant = %ready.tenant, agent = %ready.agent, revision = ready.revision, error = %e, "pipeline.gateway_trigger_failed");
        }
    }
}

impl RolloutTrigger {
    /// Queues a pass, due now, over revision `revision` of `tenant`'s Agent
    /// `agent` when it waits for readiness (its Gateway turned Ready);
    /// returns whether one was queued. A revision in an earlier phase reads
    /// the Gateway when it gets there, a later one needs it no more.
    pub async fn queue_for_gateway(
        &self,
        tenant: &str,
        agent: &str,
        revision: i64,
    ) -> Result<bool, StoreError> {
        let store = self.store.as_ref();
        let rev = match store.get_revision(tenant, agent, revision).await {
            Ok(rev) => rev,
            Err(StoreError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        if rev.phase != RevisionPhase::WaitingReady {
            return Ok(false);
        }
        let ns = match store.get_namespace(tenant).await {
            Ok(ns) => ns,
            Err(StoreError::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        store
            .enqueue_work(&[rollout_work(
                &rev.id,
                &ns.id,
                None,
                Utc::now(),
                self.max_attempts,
            )])
            .await?;
        tracing::debug!(revision = %rev.id, "pipeline.gateway_triggered");
        Ok(true)
    }

    /// Queues passes for the revisions a report on `target` concerns.
    pub async fn queue_for(&self, target: &str) -> Result<(), StoreError> {
        let store = self.store.as_ref();
        let Ok(target) = target.parse::<Target>() else {
            return Ok(()); // not a pipeline target
        };
        let ns = match store.get_namespace_by_id(target.namespace_id()).await {
            Ok(ns) => ns,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut revisions = Vec::new();
        match &target {
            Target::Harness {
                agent, revision, ..
            } => {
                // The revision itself (a stop it waits for), and the latest
                // one, which may wait for this predecessor's stop or
                // retirement.
                if let Ok(rev) = store.get_revision(&ns.name, agent, *revision).await {
                    revisions.push(rev);
                }
                if let Ok(agent) = store.get_agent(&ns.name, agent).await
                    && let Some(latest) = agent.latest_revision
                    && latest != *revision
                    && let Ok(rev) = store.get_revision(&ns.name, &agent.name, latest).await
                {
                    revisions.push(rev);
                }
            }
            Target::Namespace { .. } => {
                if ns.state == NamespaceState::Deleting {
                    store
                        .enqueue_work(&[teardown_work(&ns.id, None, self.max_attempts)])
                        .await?;
                    return Ok(());
                }
                for agent in store.list_agents(&ns.name).await? {
                    if let Some(latest) = agent.latest_revision
                        && let Ok(rev) = store.get_revision(&ns.name, &agent.name, latest).await
                    {
                        revisions.push(rev);
                    }
                }
            }
        }
        let work: Vec<NewWork> = revisions
            .iter()
            .filter(|r| {
                !matches!(
                    r.phase,
                    RevisionPhase::Retired | RevisionPhase::Stopped | RevisionPhase::Failed
                )
            })
            .map(|r| rollout_work(&r.id, &ns.id, None, Utc::now(), self.max_attempts))
            .collect();
        tracing::debug!(target = %target, queued = work.len(), "pipeline.triggered");
        if !work.is_empty() {
            store.enqueue_work(&work).await?;
        }
        Ok(())
    }
}
