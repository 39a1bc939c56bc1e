//! Work kinds, their constructors (the service queues work with these) and
//! the simple handlers; the pipeline handlers live in `rollout`.

use async_trait::async_trait;
use chrono::Utc;
use tokio_util::sync::CancellationToken;

use super::{WorkError, WorkHandler};
use crate::auth::Action;
use crate::model::WorkItem;
use crate::store::{NewWork, Store};

/// Records a tenant's data-plane namespace as provisioned. (The spoke does
/// the Kubernetes part once the link exists; the hub-side record is what
/// proves the queue end to end.)
pub const NAMESPACE_PROVISION: &str = "namespace.provision";

/// Handler of [`NAMESPACE_PROVISION`].
#[derive(Debug, Default)]
pub struct ProvisionNamespace;

#[async_trait]
impl WorkHandler for ProvisionNamespace {
    fn required_action(&self) -> Action {
        Action::Installation
    }

    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        store
            .mark_namespace_provisioned(&item.target, Utc::now())
            .await
            .map_err(WorkError::from_store)?;
        Ok(())
    }
}

/// Drives one revision through the pipeline (target: the revision id).
pub const REVISION_ROLLOUT: &str = "revision.rollout";
/// Applies a revision's Gateway objects in the control cluster (target:
/// the revision id). Its own lane of workers runs it: it waits on the
/// control apiserver, and the pass that queues it frees its slot at once.
pub const GATEWAY_ENSURE: &str = "gateway.ensure";
/// Stops an Agent: route and Gateway first, then the Harness via the spoke
/// (target: the Agent name).
pub const AGENT_STOP: &str = "agent.stop";
/// The destructive cleanup of a deleted Agent in both clusters (target:
/// the Agent name): its Gateway's objects, and every revision's Harness
/// retired on its own cluster (workspace PVC and credential Secret go).
pub const AGENT_DELETE: &str = "agent.delete";
/// Tears a tenant down in every cluster it was provisioned in (the spoke
/// runs the provider's namespace cleanup first), then deletes it (target:
/// the namespace id).
pub const NAMESPACE_TEARDOWN: &str = "namespace.teardown";

/// A pipeline pass over `revision_id`, due at `run_at`. It joins a pass of
/// the revision already waiting to run (a pass reads the revision's facts
/// when it runs), so a revision has at most one such pass queued.
pub fn rollout_work(
    revision_id: &str,
    namespace_id: &str,
    requested_by: Option<String>,
    run_at: chrono::DateTime<Utc>,
    max_attempts: i32,
) -> NewWork {
    NewWork {
        run_at,
        coalesce: true,
        ..namespace_work(
            REVISION_ROLLOUT,
            namespace_id,
            revision_id,
            requested_by,
            max_attempts,
        )
    }
}

/// Ensuring revision `revision_id`'s Gateway, due now (joining one waiting
/// to run, as passes do).
pub fn gateway_work(revision_id: &str, namespace_id: &str, max_attempts: i32) -> NewWork {
    NewWork {
        kind: GATEWAY_ENSURE.into(),
        ..rollout_work(revision_id, namespace_id, None, Utc::now(), max_attempts)
    }
}

/// Stopping Agent `agent` of `namespace_id`.
pub fn stop_work(
    agent: &str,
    namespace_id: &str,
    requested_by: Option<String>,
    max_attempts: i32,
) -> NewWork {
    namespace_work(AGENT_STOP, namespace_id, agent, requested_by, max_attempts)
}

/// Cleaning up deleted Agent `agent` of `namespace_id`.
pub fn delete_work(
    agent: &str,
    namespace_id: &str,
    requested_by: Option<String>,
    max_attempts: i32,
) -> NewWork {
    NewWork {
        kind: AGENT_DELETE.into(),
        ..stop_work(agent, namespace_id, requested_by, max_attempts)
    }
}

/// Tearing `namespace_id` down.
pub fn teardown_work(
    namespace_id: &str,
    requested_by: Option<String>,
    max_attempts: i32,
) -> NewWork {
    namespace_work(
        NAMESPACE_TEARDOWN,
        namespace_id,
        namespace_id,
        requested_by,
        max_attempts,
    )
}

/// Work of `kind` on `target` in `namespace_id` with no payload, due now
/// and not coalesced: the shape every kind here starts from.
fn namespace_work(
    kind: &str,
    namespace_id: &str,
    target: &str,
    requested_by: Option<String>,
    max_attempts: i32,
) -> NewWork {
    NewWork {
        kind: kind.into(),
        namespace_id: Some(namespace_id.to_owned()),
        target: target.to_owned(),
        payload: serde_json::json!({}),
        requested_by,
        max_attempts,
        run_at: Utc::now(),
        coalesce: false,
    }
}
