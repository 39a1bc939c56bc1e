//! `cluster.drain`: one pass of a cluster's drain. It reads where the
//! drain stands (`drain::plan`, pure), deploys the moves the parallelism
//! allows, and ends the drain when nothing waits or moves; otherwise it
//! queues its next pass.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::moves::{MoveOrder, deploy_move};
use super::{WorkError, WorkHandler, recheck_token};
use crate::auth::Action;
use crate::model::WorkItem;
use crate::store::{NewWork, Store, StoreError};

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
            let order = MoveOrder {
                namespace: &ns,
                agent: &agent,
                detail: format!(
                    "revision {} moved away from cluster {}",
                    moved.revision, moved.cluster
                ),
                moved,
                requested_by: drain.requested_by.clone(),
                actor: "system:drain",
                action: "agent.move",
            };
            deploy_move(store, order, now, self.max_attempts).await?;
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
