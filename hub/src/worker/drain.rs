//! `cluster.drain`: one pass of a cluster's drain. It reads where the
//! drain stands (`drain::plan`, pure), deploys the moves the parallelism
//! allows, and ends the drain when nothing waits or moves; otherwise it
//! queues its next pass.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{WorkError, WorkHandler, recheck_token};
use crate::auth::Action;
use crate::model::{Drain, WorkItem};
use crate::store::{Effects, Move, NewAudit, NewRevision, NewWork, Store, StoreError};

/// A pass over cluster `target`'s running drain.
pub const CLUSTER_DRAIN: &str = "cluster.drain";

/// How soon a drain that is not over looks again. A drain is rare and
/// short-lived and its pass reads a few rows, so it polls its moves
/// rather than being woken by each revision's phase change.
pub const DRAIN_RECHECK: Duration = Duration::from_secs(2);

/// A pass over cluster `cluster`'s drain, due at `run_at`. The first
/// carries the admin's token (re-checked by the worker); the ones a pass
/// queues carry none and coalesce, so a drain has one pass waiting.
pub fn drain_work(
    cluster: &str,
    requested_by: Option<String>,
    run_at: DateTime<Utc>,
    max_attempts: i32,
) -> NewWork {
    NewWork {
        kind: CLUSTER_DRAIN.into(),
        namespace_id: None,
        target: cluster.to_owned(),
        payload: serde_json::json!({}),
        coalesce: requested_by.is_none(),
        requested_by,
        max_attempts,
        run_at,
    }
}

/// Handler of [`CLUSTER_DRAIN`].
#[derive(Debug, Clone)]
pub struct DrainHandler {
    /// Attempts given to the work it queues (its next pass, the moves'
    /// rollout passes).
    pub max_attempts: i32,
}

#[async_trait]
impl WorkHandler for DrainHandler {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        let name = item.target.as_str();
        let cluster = match store.get_cluster(name).await {
            Ok(c) => c,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(WorkError::from_store(e)),
        };
        let Some(drain) = cluster.drain.filter(|d| d.finished_at.is_none()) else {
            return Ok(()); // over, or ended by an uncordon
        };
        let now = Utc::now();
        // Later passes carry no token: the drain's own is checked here.
        if let Some(token) = &drain.requested_by
            && let Some(why) = recheck_token(store, token, Action::Installation, None)
                .await
                .map_err(WorkError::from_store)?
        {
            tracing::warn!(cluster = %name, reason = %why, "drain.ended_unauthorized");
            store
                .finish_drain(name, drain.started_at, now)
                .await
                .map_err(WorkError::from_store)?;
            return Ok(());
        }
        let revisions = store
            .drain_revisions(name, drain.started_at)
            .await
            .map_err(WorkError::from_store)?;
        let plan = crate::drain::plan(name, &drain, &revisions);
        for (ns, agent, moved) in plan.start {
            self.move_agent(store, &drain, &ns, &agent, moved, now)
                .await?;
        }
        if plan.finished {
            if store
                .finish_drain(name, drain.started_at, now)
                .await
                .map_err(WorkError::from_store)?
            {
                let p = &plan.progress;
                tracing::info!(cluster = %name, moved = p.moved, blocked = p.blocked,
                    failed = p.failed, "drain.finished");
            }
            return Ok(());
        }
        let at = now + chrono::Duration::from_std(DRAIN_RECHECK).unwrap_or_default();
        store
            .enqueue_work(&[drain_work(name, None, at, self.max_attempts)])
            .await
            .map_err(WorkError::from_store)?;
        Ok(())
    }
}

impl DrainHandler {
    /// Deploys the move of `agent`: a copy of the revision running on the
    /// drained cluster, which the pipeline places elsewhere. A move the
    /// store refuses (the Agent was redeployed, stopped or edited since
    /// the plan read it) is left to the next pass.
    async fn move_agent(
        &self,
        store: &dyn Store,
        drain: &Drain,
        ns: &str,
        agent: &str,
        moved: Move,
        now: DateTime<Utc>,
    ) -> Result<(), WorkError> {
        let from = store
            .get_revision(ns, agent, moved.revision)
            .await
            .map_err(WorkError::from_store)?;
        let current = store
            .get_agent(ns, agent)
            .await
            .map_err(WorkError::from_store)?;
        let namespace = store
            .get_namespace(ns)
            .await
            .map_err(WorkError::from_store)?;
        let cluster = moved.cluster.clone();
        let new = NewRevision {
            id: Uuid::now_v7().to_string(),
            namespace: ns.to_owned(),
            agent: agent.to_owned(),
            agent_version: current.version,
            spec: from.spec,
            configuration: from.configuration,
            images: from.images,
            resolved_cluster: None,
            rolled_back_from: None,
            moved: Some(moved),
            idempotency: None,
            requested_by: drain.requested_by.clone(),
        };
        let fx = Effects {
            audit: NewAudit {
                actor: "system:drain".into(),
                action: "agent.move".into(),
                namespace: Some(ns.to_owned()),
                target: format!("agents/{agent}"),
                result: "ok".into(),
                detail: Some(format!(
                    "revision {} moved away from cluster {cluster}",
                    from.number
                )),
            },
            work: vec![super::kinds::rollout_work(
                &new.id,
                &namespace.id,
                drain.requested_by.clone(),
                now,
                self.max_attempts,
            )],
        };
        match store.deploy(&new, &fx).await {
            Ok(d) => {
                tracing::info!(cluster = %cluster, namespace = %ns, agent = %agent,
                    from = from.number, to = d.revision.number, "drain.moving");
                Ok(())
            }
            Err(e @ (StoreError::FailedPrecondition(_) | StoreError::Conflict { .. })) => {
                tracing::debug!(cluster = %cluster, agent = %agent, reason = %e, "drain.move_deferred");
                Ok(())
            }
            Err(e) => Err(WorkError::from_store(e)),
        }
    }
}
