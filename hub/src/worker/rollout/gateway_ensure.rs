//! `gateway.ensure`: a revision's Gateway objects applied in the control
//! cluster under the Agent's lease, recorded, and the revision's pipeline
//! woken.

use std::time::Duration;

use chrono::Utc;

use super::spec::gateway_target;
use super::{PassError, Rollout, revision_and_agent};
use crate::auth::Action;
use crate::model::{AgentRevision, Namespace, WorkItem};
use crate::pipeline::gateway_ensure_allowed;
use crate::store::Store;
use crate::worker::WorkError;

/// A Gateway ensure that finds its Agent's lease held tries again this
/// often, this many times, before the worker defers it: the pass that
/// queued it ends within milliseconds.
const LEASE_PATIENCE_STEP: Duration = Duration::from_millis(10);
const LEASE_PATIENCE_TRIES: usize = 20;

impl Rollout {
    /// `gateway.ensure`: applies a revision's Gateway objects in the control
    /// cluster and records it, holding the Agent's lease (so no pass,
    /// stop or retirement of the Agent runs meanwhile), then wakes the
    /// revision's pipeline.
    async fn ensure_gateway(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        let Some((_, agent)) = revision_and_agent(store, &item.target).await? else {
            return Ok(());
        };
        // The pass that queued this ensure usually still holds the lease
        // for a few milliseconds: wait that out here rather than defer the
        // item by the worker's busy delay.
        for _ in 0..LEASE_PATIENCE_TRIES {
            match self
                .with_agent_lease(store, &agent.id, self.ensure_gateway_held(store, item))
                .await?
            {
                // Woken after the lease is released, so the pass does not
                // find it busy.
                Some(Some((rev, ns))) => return self.requeue(store, &rev, &ns, Utc::now()).await,
                Some(None) => return Ok(()),
                None => tokio::time::sleep(LEASE_PATIENCE_STEP).await,
            }
        }
        Err(WorkError::Busy(
            "another pipeline pass of this Agent is running".into(),
        ))
    }

    /// Applies and records the Gateway under the lease; the revision and
    /// namespace to wake a pass for once it is applied.
    async fn ensure_gateway_held(
        &self,
        store: &dyn Store,
        item: &WorkItem,
    ) -> Result<Option<(AgentRevision, Namespace)>, WorkError> {
        let (mut rev, agent, ns, g) = self.read_facts(store, &item.target).await?;
        if !gateway_ensure_allowed(&g.facts) {
            // Applied by an earlier attempt, or superseded, stopped, failed
            // or denied since it was queued: nothing to apply.
            tracing::debug!(revision = %rev.id, phase = rev.phase.as_str(), "pipeline.gateway_ensure_skipped");
            return Ok(None);
        }
        let started = Utc::now();
        let target = gateway_target(
            &ns,
            &g.data_plane_namespace,
            &agent,
            &rev,
            self.config.tunnel.as_ref(),
            self.config.workload.harness_port,
        );
        if let Err(failure) = self.gateways.ensure(&target).await {
            self.observe("gateway_ensure", "failed", started);
            let last_attempt = item.attempts >= item.max_attempts;
            if failure.transient && !last_attempt {
                return Err(WorkError::retryable(format!("gateway: {failure}")));
            }
            let reason = if failure.transient {
                format!("gateway: {failure} (after {} attempts)", item.attempts)
            } else {
                format!("gateway: {failure}")
            };
            return match self.fail(store, &ns, &g, rev, reason).await {
                Ok(_) => Ok(None),
                Err(PassError::Stale) => Err(WorkError::retryable(
                    "the revision changed while its Gateway failed; deciding again",
                )),
                Err(PassError::Work(e)) => Err(e),
            };
        }
        self.observe("gateway_ensure", "ok", started);
        rev.progress.gateway_applied_at = Some(Utc::now());
        match self.save(store, &mut rev).await {
            Ok(()) => {}
            // Applying again is harmless (server-side apply).
            Err(PassError::Stale) => {
                return Err(WorkError::retryable(
                    "the revision changed while its Gateway was applied; ensuring again",
                ));
            }
            Err(PassError::Work(e)) => return Err(e),
        }
        // The pass goes on (the Gateway watch wakes it again when the
        // Gateway turns Ready).
        Ok(Some((rev, ns)))
    }
}

rollout_handler!(
    /// `gateway.ensure` handler.
    GatewayEnsureHandler,
    Action::Deploy,
    ensure_gateway
);
