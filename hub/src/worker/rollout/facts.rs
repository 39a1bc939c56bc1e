//! Reads what is durably known about a revision (outbox, typed spoke
//! reports, recorded progress, the deployer's authority) into the pure
//! [`Facts`] the state machine decides on. Reads only: no effects.

use chrono::{DateTime, Utc};
use clawfed_proto::work::generation;

use super::spec::{gateway_target, harness_target, namespace_target};
use super::{Rollout, store_err};
use crate::auth::Action;
use crate::link::report::{self, ReadinessReport, WorkResultReport};
use crate::model::{Agent, AgentRevision, DesiredState, Namespace, RevisionPhase};
use crate::pipeline::{Facts, Predecessor, Readiness, WorkOutcome};
use crate::store::Store;
use crate::worker::{WorkError, recheck_token};

/// The facts and what the driver needs to act on them.
#[derive(Debug, Clone)]
pub(super) struct Gathered {
    pub facts: Facts,
    /// The id of the cluster the revision is placed on.
    pub cluster_id: Option<String>,
    /// The tenant's physical namespace on that cluster: the name its spoke
    /// reported (a legacy or adopted name), else the `oce-` name.
    pub data_plane_namespace: String,
    /// Earlier revisions not retired yet, oldest first.
    pub predecessors: Vec<Located>,
}

/// A revision and where it runs.
#[derive(Debug, Clone)]
pub(super) struct Located {
    pub revision: AgentRevision,
    pub cluster_id: Option<String>,
    pub data_plane_namespace: String,
}

/// Where a target stands on one cluster.
struct TargetState {
    /// Newest generation in the outbox, if any was ever queued.
    latest: Option<i64>,
    result: Option<(i64, WorkResultReport)>,
}

impl TargetState {
    fn sent(&self, at_least: i64) -> bool {
        self.latest.is_some_and(|g| g >= at_least)
    }

    /// The outcome of the work at `generation` (a result for a later
    /// generation answers it too).
    fn outcome(&self, generation: i64) -> WorkOutcome {
        match &self.result {
            Some((g, r)) if *g >= generation => {
                if r.applied {
                    WorkOutcome::Applied
                } else if r.retrying {
                    WorkOutcome::Retrying(r.reason.clone())
                } else if r.reason.is_empty() {
                    WorkOutcome::Failed("refused by the spoke".into())
                } else {
                    WorkOutcome::Failed(r.reason.clone())
                }
            }
            _ => WorkOutcome::Waiting,
        }
    }
}

async fn target_state(
    store: &dyn Store,
    cluster_id: &str,
    target: &str,
) -> Result<TargetState, WorkError> {
    let latest = store
        .outbox_latest_generation(cluster_id, target)
        .await
        .map_err(store_err)?;
    let result = match store
        .get_report(cluster_id, target, report::WORK_RESULT)
        .await
        .map_err(store_err)?
    {
        None => None,
        Some(r) => match serde_json::from_value::<WorkResultReport>(r.body) {
            Ok(body) => Some((r.generation, body)),
            Err(e) => {
                tracing::warn!(target = %target, error = %e, "pipeline.unreadable_report");
                None
            }
        },
    };
    Ok(TargetState { latest, result })
}

/// The outcome of `generation` of `target` on `cluster_id`.
pub(super) async fn outcome(
    store: &dyn Store,
    cluster_id: &str,
    target: &str,
    generation: i64,
) -> Result<WorkOutcome, WorkError> {
    Ok(target_state(store, cluster_id, target)
        .await?
        .outcome(generation))
}

impl Rollout {
    async fn cluster_of(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
    ) -> Result<Option<String>, WorkError> {
        match &rev.resolved_cluster {
            Some(name) => Ok(Some(self.cluster_id(store, name).await?)),
            None => Ok(None),
        }
    }

    /// The physical namespace of `ns` on `cluster_id` (see
    /// [`Self::physical_namespace`]).
    pub(super) async fn physical_namespace_name(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        cluster_id: &str,
    ) -> Result<String, WorkError> {
        Ok(self
            .physical_namespace(store, ns, Some(cluster_id))
            .await?
            .0)
    }

    /// The physical namespace of `ns` on `cluster_id`: what its spoke
    /// reported ensuring, else the `oce-` name.
    async fn physical_namespace(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        cluster_id: Option<&str>,
    ) -> Result<(String, Option<TargetState>), WorkError> {
        let Some(cid) = cluster_id else {
            return Ok((ns.data_plane_namespace.clone(), None));
        };
        let state = target_state(store, cid, &namespace_target(ns)).await?;
        let name = state
            .result
            .as_ref()
            .and_then(|(_, r)| r.ensured_namespace())
            .unwrap_or(&ns.data_plane_namespace)
            .to_owned();
        Ok((name, Some(state)))
    }

    async fn readiness(
        &self,
        store: &dyn Store,
        cluster_id: &str,
        target: &str,
        revision_id: &str,
    ) -> Result<Option<Readiness>, WorkError> {
        let Some(r) = store
            .get_report(cluster_id, target, report::READINESS)
            .await
            .map_err(store_err)?
        else {
            return Ok(None);
        };
        let r = match serde_json::from_value::<ReadinessReport>(r.body) {
            Ok(r) => r,
            Err(e) => {
                return Ok(Some(Readiness {
                    error: Some(format!("unreadable readiness report: {e}")),
                    ..Default::default()
                }));
            }
        };
        if !r.revision_id.is_empty() && r.revision_id != revision_id {
            return Ok(None);
        }
        Ok(Some(Readiness {
            ready: r.ready,
            live_candidates: r.live_candidates,
            ready_candidates: r.ready_candidates,
            reason: r.reason,
            error: r.error,
        }))
    }

    /// The deadline of the revision's current phase
    /// ([`crate::pipeline::phase_deadline`]).
    pub(super) fn deadline(&self, rev: &AgentRevision) -> Option<DateTime<Utc>> {
        crate::pipeline::phase_deadline(rev, self.config.phase_deadline)
    }

    pub(super) async fn gather(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        agent: &Agent,
        rev: &AgentRevision,
    ) -> Result<Gathered, WorkError> {
        let wanted = agent.desired_state == DesiredState::Running
            && agent.latest_revision == Some(rev.number);
        let forward = matches!(
            rev.phase,
            RevisionPhase::Pending
                | RevisionPhase::Provisioning
                | RevisionPhase::Preparing
                | RevisionPhase::WaitingReady
        );
        // The deployer's authority, before every pass that may cause an
        // effect (trigger-queued passes carry no requester of their own).
        let denied = match (&rev.requested_by, wanted && forward) {
            (Some(token), true) => recheck_token(store, token, Action::Deploy, Some(&ns.name))
                .await
                .map_err(store_err)?,
            _ => None,
        };
        let cluster_id = self.cluster_of(store, rev).await?;
        // Before Harness work goes out, the cluster it is placed on (an
        // explicit placement, or one whose spoke changed its driver since)
        // must still be able to serve the revision.
        let unservable = match (&rev.resolved_cluster, wanted && forward) {
            (Some(name), true) if !rev.progress.phases.contains_key("waiting-ready") => {
                let cluster = store.get_cluster(name).await.map_err(store_err)?;
                crate::pipeline::cannot_serve(&cluster, crate::pipeline::needs(&rev.spec))
            }
            _ => None,
        };
        let (data_plane_namespace, namespace_state) = self
            .physical_namespace(store, ns, cluster_id.as_deref())
            .await?;
        let harness = match &cluster_id {
            Some(cid) => Some(target_state(store, cid, &harness_target(ns, rev)).await?),
            None => None,
        };
        let readiness = match &cluster_id {
            Some(cid) => {
                self.readiness(store, cid, &harness_target(ns, rev), &rev.id)
                    .await?
            }
            None => None,
        };
        let mut predecessors = Vec::new();
        let mut located = Vec::new();
        for p in store
            .list_revisions(&rev.namespace, &rev.agent)
            .await
            .map_err(store_err)?
            .into_iter()
            .filter(|r| r.number < rev.number && r.phase != RevisionPhase::Retired)
        {
            // Each predecessor is looked at on the cluster it runs on.
            let p_cluster = self.cluster_of(store, &p).await?;
            // Usually the revision's own cluster: its name is known already.
            let p_namespace = if p_cluster == cluster_id {
                data_plane_namespace.clone()
            } else {
                self.physical_namespace(store, ns, p_cluster.as_deref())
                    .await?
                    .0
            };
            let state = match &p_cluster {
                Some(cid) => Some(target_state(store, cid, &harness_target(ns, &p)).await?),
                None => None,
            };
            let sent = |g| state.as_ref().is_some_and(|s| s.sent(g));
            let out = |g| {
                state
                    .as_ref()
                    .map_or(WorkOutcome::Waiting, |s| s.outcome(g))
            };
            // A failover-enabled predecessor's lease is read only when
            // its stop is still unconfirmed.
            let fenced = match (&p.spec.failover, &p.resolved_cluster) {
                (Some(f), Some(name))
                    if sent(generation::HARNESS_APPLY)
                        && !out(generation::HARNESS_STOP).is_applied()
                        && !out(generation::HARNESS_RETIRE).is_applied() =>
                {
                    let lease = store.execution_lease(name).await.map_err(store_err)?;
                    crate::failover::lapsed(
                        lease,
                        p.progress.activated_at,
                        f.after_seconds,
                        store.now(),
                    )
                }
                _ => false,
            };
            predecessors.push(Predecessor {
                number: p.number,
                phase: p.phase,
                cluster: p.resolved_cluster.clone(),
                harness_sent: sent(generation::HARNESS_APPLY),
                stop_sent: sent(generation::HARNESS_STOP),
                stop: out(generation::HARNESS_STOP),
                retire_sent: sent(generation::HARNESS_RETIRE),
                retire: out(generation::HARNESS_RETIRE),
                fenced,
            });
            located.push(Located {
                revision: p,
                cluster_id: p_cluster,
                data_plane_namespace: p_namespace,
            });
        }
        let control_gateway = rev.spec.harness_kind.has_control_gateway();
        let gateway_applied = rev.progress.gateway_applied_at.is_some();
        let gateway_ready =
            if control_gateway && gateway_applied && rev.phase == RevisionPhase::WaitingReady {
                self.gateways
                    .ready(&gateway_target(
                        ns,
                        &data_plane_namespace,
                        agent,
                        rev,
                        self.config.tunnel.as_ref(),
                        self.config.workload.harness_port,
                    ))
                    .await
                    .unwrap_or(false)
            } else {
                false
            };
        let sent = |g| harness.as_ref().is_some_and(|s| s.sent(g));
        let out = |g| {
            harness
                .as_ref()
                .map_or(WorkOutcome::Waiting, |s| s.outcome(g))
        };
        let facts = Facts {
            phase: rev.phase,
            wanted,
            denied,
            placed: cluster_id.is_some(),
            cluster: rev.resolved_cluster.clone(),
            agent_stopped: agent.desired_state == crate::model::DesiredState::Stopped,
            unservable,
            namespace_sent: namespace_state
                .as_ref()
                .is_some_and(|s| s.sent(generation::NAMESPACE_ENSURE)),
            namespace: namespace_state.as_ref().map_or(WorkOutcome::Waiting, |s| {
                s.outcome(generation::NAMESPACE_ENSURE)
            }),
            control_gateway,
            gateway_queued: rev.progress.gateway_queued_at.is_some(),
            gateway_applied,
            exclusive: rev.spec.harness_kind.replaces_exclusively(),
            predecessors,
            harness_sent: sent(generation::HARNESS_APPLY),
            harness: out(generation::HARNESS_APPLY),
            stop_sent: sent(generation::HARNESS_STOP),
            stop: out(generation::HARNESS_STOP),
            readiness,
            gateway_ready,
            activated: rev.progress.activated_at.is_some(),
            predecessors_retired: rev.progress.predecessors_retired_at.is_some(),
            now: store.now(),
            deadline: self.deadline(rev),
            gateway_recheck: self.config.gateway_recheck,
            placement_wait: crate::pipeline::placement_wait(rev),
        };
        Ok(Gathered {
            facts,
            cluster_id,
            data_plane_namespace,
            predecessors: located,
        })
    }
}
