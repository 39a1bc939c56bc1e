//! Moving an Agent off a cluster, for a drain or a failover: a new
//! revision copied from the one running there (same spec, configuration
//! and frozen images, `movedFrom` naming the cluster), which the pipeline
//! places elsewhere and which replaces its predecessor exclusively.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::WorkError;
use crate::store::{Effects, Move, NewAudit, NewRevision, Store, StoreError};

/// One move to deploy.
#[derive(Debug, Clone)]
pub(super) struct MoveOrder<'a> {
    pub namespace: &'a str,
    pub agent: &'a str,
    pub moved: Move,
    /// The token the move's pipeline re-checks (none: the system's own).
    pub requested_by: Option<String>,
    /// The audit record's actor, action and detail.
    pub actor: &'static str,
    pub action: &'static str,
    pub detail: String,
}

/// Deploys `order`; the new revision's number, or `None` when the store
/// refused it because the Agent changed since it was read (redeployed,
/// stopped, edited, or moved by another replica first): the caller's next
/// pass looks again.
pub(super) async fn deploy_move(
    store: &dyn Store,
    order: MoveOrder<'_>,
    now: DateTime<Utc>,
    max_attempts: i32,
) -> Result<Option<i64>, WorkError> {
    let (ns, agent) = (order.namespace, order.agent);
    let from = store
        .get_revision(ns, agent, order.moved.revision)
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
    let cluster = order.moved.cluster.clone();
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
        moved: Some(order.moved),
        idempotency: None,
        requested_by: order.requested_by.clone(),
    };
    let fx = Effects {
        quotas: Vec::new(),
        audit: NewAudit {
            actor: order.actor.into(),
            action: order.action.into(),
            namespace: Some(ns.to_owned()),
            target: format!("agents/{agent}"),
            result: "ok".into(),
            detail: Some(order.detail),
        },
        work: vec![super::kinds::rollout_work(
            &new.id,
            &namespace.id,
            order.requested_by,
            now,
            max_attempts,
        )],
    };
    match store.deploy(&new, &fx).await {
        Ok(d) => {
            tracing::info!(cluster = %cluster, namespace = %ns, agent = %agent, actor = order.actor,
                from = from.number, to = d.revision.number, "agent.moving");
            Ok(Some(d.revision.number))
        }
        Err(e @ (StoreError::FailedPrecondition(_) | StoreError::Conflict { .. })) => {
            tracing::debug!(cluster = %cluster, agent = %agent, reason = %e, "agent.move_deferred");
            Ok(None)
        }
        Err(e) => Err(WorkError::from_store(e)),
    }
}
