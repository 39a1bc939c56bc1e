//! Cordon, uncordon and drain of an execution cluster (installation
//! admins), and a drain's progress when one cluster is read.

use chrono::Utc;

use super::access::Mutation;
use super::{Result, Service, ServiceError};
use crate::auth::{Action, Principal};
use crate::model::{Cluster, DrainRequest, MAX_DRAIN_PARALLELISM};
use crate::worker::drain::drain_work;

impl Service {
    /// Cordons cluster `name`: no new revision is placed there; what runs
    /// there keeps running.
    pub async fn cordon_cluster(&self, p: &Principal, name: &str) -> Result<Cluster> {
        let m = Mutation::new(p, "cluster.cordon", None, format!("clusters/{name}"));
        self.authorize(Action::Installation, &m).await?;
        // Cordoning twice keeps the first time (the store's rule).
        let now = Utc::now();
        let result = self
            .store
            .set_cordon(name, Some(now), now, &m.ok())
            .await
            .map_err(Into::into);
        self.finish(&m, result).await
    }

    /// Uncordons cluster `name`: it takes new revisions again, and a drain
    /// that still runs ends (its moves in flight finish).
    pub async fn uncordon_cluster(&self, p: &Principal, name: &str) -> Result<Cluster> {
        let m = Mutation::new(p, "cluster.uncordon", None, format!("clusters/{name}"));
        self.authorize(Action::Installation, &m).await?;
        let result = self
            .store
            .set_cordon(name, None, Utc::now(), &m.ok())
            .await
            .map_err(Into::into);
        self.finish(&m, result).await
    }

    /// Drains cluster `name`: cordons it and moves each Agent running
    /// there to another cluster, `parallelism` at a time, each by the
    /// exclusive replacement rule (stopped there and confirmed, then
    /// started elsewhere). Asking again while it runs changes only its
    /// parallelism. Answers the cluster with the drain's progress.
    pub async fn drain_cluster(
        &self,
        p: &Principal,
        name: &str,
        req: DrainRequest,
    ) -> Result<Cluster> {
        let m = Mutation::new(p, "cluster.drain", None, format!("clusters/{name}"));
        self.mutate(Action::Installation, &m, async {
            let parallelism = req.parallelism.unwrap_or(1);
            if !(1..=MAX_DRAIN_PARALLELISM).contains(&parallelism) {
                return Err(ServiceError::InvalidArgument {
                    field: "parallelism".into(),
                    reason: format!("must be between 1 and {MAX_DRAIN_PARALLELISM}"),
                });
            }
            if !self.policy.pipeline {
                return Err(ServiceError::FailedPrecondition(
                    "draining moves Agents with the pipeline, which this hub does not run \
                     (the link is disabled)"
                        .into(),
                ));
            }
            let now = Utc::now();
            let mut fx = m.ok();
            fx.audit.detail = Some(format!("parallelism {parallelism}"));
            fx.work.push(drain_work(
                name,
                Some(p.token_id.clone()),
                now,
                self.policy.work_max_attempts,
            ));
            let mut cluster = self
                .store
                .start_drain(name, parallelism, &p.token_id, now, &fx)
                .await?;
            self.with_drain_progress(&mut cluster).await?;
            Ok(cluster)
        })
        .await
    }

    /// Fills `cluster`'s drain progress, Agent by Agent (the
    /// installation-admin view of one cluster).
    pub(super) async fn with_drain_progress(&self, cluster: &mut Cluster) -> Result<()> {
        if let Some(drain) = &mut cluster.drain {
            let revisions = self
                .store
                .drain_revisions(&cluster.name, drain.started_at)
                .await?;
            drain.progress = Some(crate::drain::plan(&cluster.name, drain, &revisions).progress);
        }
        Ok(())
    }
}
