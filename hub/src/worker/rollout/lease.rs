//! An Agent's lease: one pass (or Gateway ensure, stop) per Agent at a time
//! across hub processes, renewed while its work runs; the passes it turned
//! away in this process are woken as it is released.

use chrono::Utc;

use super::{Rollout, pass_holder, store_err};
use crate::store::Store;
use crate::worker::WorkError;
use crate::worker::kinds::rollout_work;

impl Rollout {
    /// Runs `f` holding the Agent's lease; `None` when another pass holds it.
    pub(super) async fn with_agent_lease<T>(
        &self,
        store: &dyn Store,
        agent_id: &str,
        f: impl std::future::Future<Output = Result<T, WorkError>>,
    ) -> Result<Option<T>, WorkError> {
        let now = store.now();
        let until = now + chrono::Duration::from_std(self.config.pass_lease).unwrap_or_default();
        let holder = pass_holder(&self.holder);
        if !store
            .begin_agent_pass(agent_id, &holder, now, until)
            .await
            .map_err(store_err)?
        {
            return Ok(None);
        }
        // Renewed while the work runs: a Gateway ensure against a loaded
        // control apiserver can outlast one lease, and a pass let in then
        // made the ensure's save stale, so it applied the Gateway again.
        let mut work = std::pin::pin!(f);
        let result = tokio::select! {
            r = &mut work => r,
            () = self.renew_agent_lease(store, agent_id, &holder) => {
                // Lost: the work ends without it; the revision's version
                // still fences its saves.
                work.await
            }
        };
        if let Err(e) = store.end_agent_pass(agent_id, &holder).await {
            // The lease runs out by itself.
            tracing::warn!(agent = %agent_id, error = %e, "pipeline.lease_release_failed");
        }
        self.wake_waiters(store, agent_id).await;
        result.map(Some)
    }

    /// Queues, due now, the passes the lease just released turned away.
    async fn wake_waiters(&self, store: &dyn Store, agent_id: &str) {
        let work: Vec<_> = self
            .waiters
            .take(agent_id)
            .into_iter()
            .map(|(revision_id, namespace_id)| {
                rollout_work(
                    &revision_id,
                    &namespace_id,
                    None,
                    Utc::now(),
                    self.config.max_attempts,
                )
            })
            .collect();
        if work.is_empty() {
            return;
        }
        if let Err(e) = store.enqueue_work(&work).await {
            // Their own retry (BUSY_FALLBACK) still comes.
            tracing::warn!(agent = %agent_id, error = %e, "pipeline.wake_waiters_failed");
        }
    }

    /// Extends `holder`'s lease every third of a lease; returns once it is
    /// lost (another holder took it after a renewal failed to reach the
    /// store in time).
    async fn renew_agent_lease(&self, store: &dyn Store, agent_id: &str, holder: &str) {
        let lease = chrono::Duration::from_std(self.config.pass_lease).unwrap_or_default();
        loop {
            tokio::time::sleep(self.config.pass_lease / 3).await;
            let now = store.now();
            match store
                .begin_agent_pass(agent_id, holder, now, now + lease)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(agent = %agent_id, "pipeline.lease_lost");
                    return;
                }
                // Tried again at the next third; the lease is still live.
                Err(e) => {
                    tracing::warn!(agent = %agent_id, error = %e, "pipeline.lease_renew_failed")
                }
            }
        }
    }

    /// Runs work `f` holding the Agent's lease; busy (tried again shortly,
    /// the attempt not counted) while another pass holds it.
    pub(super) async fn holding_agent_lease(
        &self,
        store: &dyn Store,
        agent_id: &str,
        f: impl std::future::Future<Output = Result<(), WorkError>>,
    ) -> Result<(), WorkError> {
        match self.with_agent_lease(store, agent_id, f).await? {
            Some(()) => Ok(()),
            None => Err(WorkError::Busy(
                "another pipeline pass of this Agent is running".into(),
            )),
        }
    }
}
