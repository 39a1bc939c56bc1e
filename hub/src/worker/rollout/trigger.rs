//! Turns spoke reports into pipeline passes: a report on a revision's
//! Harness (or its namespace) queues a pass over the revisions it concerns,
//! so the pipeline is event driven, not polled.

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

impl RolloutTrigger {
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
