//! One pass over a revision (`revision.rollout`): under the Agent's lease,
//! read the facts, ask [`crate::pipeline::decide`] for the next step,
//! perform it, and repeat until the pipeline waits or finishes.

use std::time::{Duration, Instant};

use chrono::Utc;
use clawfed_proto::work::{self as wire, generation};

use super::facts::Gathered;
use super::spec::{
    gateway_target, harness_credential, harness_demand, harness_target, harness_work,
    namespace_target, namespace_work, revision_work,
};
use super::{BUSY_FALLBACK, Flow, PassError, PassResult, Rollout, revision_and_agent, store_err};
use crate::auth::Action;
use crate::model::{Agent, AgentRevision, Namespace, RevisionPhase, WorkItem};
use crate::pipeline::{
    FailReason, Placement, PlacementRequest, Step, choose_cluster, decide, needs, unplaced_reason,
};
use crate::store::Store;
use crate::worker::WorkError;
use crate::worker::kinds::gateway_work;

/// How soon placement is tried again while no online cluster matches.
const PLACE_RETRY: Duration = Duration::from_secs(2);

impl Rollout {
    /// `revision.rollout`: a pass over the item's revision.
    async fn advance_item(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        self.advance(store, &item.target).await
    }

    /// One pass over a revision.
    async fn advance(&self, store: &dyn Store, revision_id: &str) -> Result<(), WorkError> {
        let Some((rev, agent)) = revision_and_agent(store, revision_id).await? else {
            return Ok(());
        };
        // Holding the lease, the revision waits for it no more (and its own
        // release does not wake it).
        let held = || async {
            self.waiters.remove(&agent.id, &rev.id);
            self.advance_held(store, revision_id).await
        };
        if self
            .with_agent_lease(store, &agent.id, held())
            .await?
            .is_some()
        {
            return Ok(());
        }
        // Busy: wait to be woken by the holder's release. Registered before
        // a second try, so a release between the two tries still finds it.
        let ns = store
            .get_namespace(&rev.namespace)
            .await
            .map_err(store_err)?;
        self.waiters.add(&agent.id, &rev.id, &ns.id);
        if self
            .with_agent_lease(store, &agent.id, held())
            .await?
            .is_some()
        {
            return Ok(());
        }
        // Queued each time (it joins the revision's queued pass, if any):
        // one queued earlier may have been run early by a trigger.
        let at = Utc::now() + chrono::Duration::from_std(BUSY_FALLBACK).unwrap_or_default();
        self.requeue(store, &rev, &ns, at).await
    }

    /// A revision, its Agent and namespace as stored now, and its facts.
    pub(super) async fn read_facts(
        &self,
        store: &dyn Store,
        revision_id: &str,
    ) -> Result<(AgentRevision, Agent, Namespace, Gathered), WorkError> {
        let rev = store
            .get_revision_by_id(revision_id)
            .await
            .map_err(store_err)?;
        let agent = store
            .get_agent(&rev.namespace, &rev.agent)
            .await
            .map_err(store_err)?;
        let ns = store
            .get_namespace(&rev.namespace)
            .await
            .map_err(store_err)?;
        let gathered = self.gather(store, &ns, &agent, &rev).await?;
        Ok((rev, agent, ns, gathered))
    }

    async fn advance_held(&self, store: &dyn Store, revision_id: &str) -> Result<(), WorkError> {
        let started = Instant::now();
        for _ in 0..32 {
            let (rev, agent, ns, gathered) = self.read_facts(store, revision_id).await?;
            let step = decide(&gathered.facts);
            tracing::debug!(revision = %rev.id, phase = rev.phase.as_str(), ?step, "pipeline.step");
            match self.perform(store, &ns, &agent, rev, &gathered, step).await {
                Ok(Flow::Continue) | Err(PassError::Stale) => {}
                Ok(Flow::Settled) => {
                    tracing::debug!(revision = %revision_id, elapsedMs = started.elapsed().as_millis() as u64, "pipeline.settled");
                    return Ok(());
                }
                Err(PassError::Work(e)) => return Err(e),
            }
        }
        Err(WorkError::retryable("pipeline did not settle in 32 steps"))
    }

    /// Performs one step.
    pub(super) async fn perform(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        agent: &Agent,
        mut rev: AgentRevision,
        g: &Gathered,
        step: Step,
    ) -> PassResult {
        let now = Utc::now();
        let cid = || {
            g.cluster_id
                .clone()
                .ok_or_else(|| WorkError::retryable("revision not placed yet"))
        };
        let dp = g.data_plane_namespace.as_str();
        match step {
            Step::Finished => return Ok(Flow::Settled),
            Step::Wait { until } => {
                // Each waiting pass queues its own wake-up (at the phase's
                // deadline, or the Gateway's recheck), not just the pass
                // that entered the phase: a trigger due now joins the
                // revision's waiting pass (passes coalesce), so the
                // deadline pass queued on entering is usually run early,
                // and without this no pass would come at the deadline to
                // fail a revision that no report moves.
                if let Some(at) = until {
                    self.requeue(store, &rev, ns, at).await?;
                }
                return Ok(Flow::Settled);
            }
            Step::Place => {
                let clusters = store.list_clusters().await.map_err(store_err)?;
                let request = PlacementRequest {
                    placement: &rev.spec.placement,
                    needs: needs(&rev.spec),
                    demand: harness_demand(&rev.spec, &self.config.workload),
                };
                let c = match choose_cluster(&clusters, &request) {
                    Placement::Chosen(c) => c,
                    Placement::Refused(why) => {
                        let reason = FailReason::PlacementRefused(why).to_string();
                        return self.fail(store, ns, g, rev, reason).await;
                    }
                    Placement::Unavailable => {
                        // Say why in the revision, not just `pending`.
                        let why = unplaced_reason(&clusters, &request);
                        if rev.reason.as_deref() != Some(why.as_str()) {
                            rev.reason = Some(why);
                            self.save(store, &mut rev).await?;
                        }
                        // The placement deadline ends this if none comes.
                        let at = now + chrono::Duration::from_std(PLACE_RETRY).unwrap_or_default();
                        self.requeue(store, &rev, ns, at).await?;
                        return Ok(Flow::Settled);
                    }
                };
                store
                    .place_revision(&rev.id, &c.name)
                    .await
                    .map_err(store_err)?;
                tracing::info!(revision = %rev.id, cluster = %c.name, "pipeline.placed");
            }
            Step::SendNamespace => {
                self.send(
                    &cid()?,
                    &namespace_target(ns),
                    generation::NAMESPACE_ENSURE,
                    &namespace_work(ns, &self.config.workload),
                )
                .await?;
            }
            Step::Enter { phase, reason } => {
                let reason = reason.map(|r| r.to_string());
                self.enter(store, &mut rev, phase, reason).await?;
                // Wake up at the phase's deadline even if no report comes.
                if let Some(deadline) = self.deadline(&rev) {
                    self.requeue(store, &rev, ns, deadline).await?;
                }
                if phase == RevisionPhase::Active {
                    self.log_completed(&rev);
                    self.observe("deploy", "ok", rev.created_at);
                    self.wake_drain(store, &rev).await?;
                }
            }
            Step::QueueGateway => {
                // Queued before it is recorded: a lost save queues it again,
                // and the ensure applies once (it checks under the lease).
                store
                    .enqueue_work(&[gateway_work(&rev.id, &ns.id, self.config.max_attempts)])
                    .await
                    .map_err(store_err)?;
                rev.progress.gateway_queued_at = Some(now);
                self.save(store, &mut rev).await?;
            }
            Step::StopPredecessors(numbers) => {
                for p in g
                    .predecessors
                    .iter()
                    .filter(|p| numbers.contains(&p.revision.number))
                {
                    self.send_to_predecessor(
                        ns,
                        p,
                        generation::HARNESS_STOP,
                        wire::WorkSpec::HarnessStop,
                    )
                    .await?;
                }
            }
            Step::SendHarness => {
                let cid = cid()?;
                let same_cluster: Vec<AgentRevision> = g
                    .predecessors
                    .iter()
                    .filter(|p| p.cluster_id.as_deref() == Some(cid.as_str()))
                    .map(|p| p.revision.clone())
                    .collect();
                let credential = match self.open_credentials(store, agent, &rev).await? {
                    Ok(opened) => harness_credential(&rev, opened),
                    // Not retryable: the key or the stored value is wrong.
                    Err(reason) => return self.fail(store, ns, g, rev, reason).await,
                };
                let mut work = harness_work(
                    ns,
                    dp,
                    &rev,
                    &same_cluster,
                    self.config.require_immutable_digest,
                    &self.config.workload,
                    self.config.startup_status,
                );
                if let wire::WorkSpec::HarnessApply(h) = &mut work {
                    h.credential = credential;
                    if h.runtime_config.is_some() || h.app_server.is_some() {
                        // Derived, so every pass and replica sends the same
                        // Secret.
                        let key = self.link.state.transport_key(store).await.map_err(|e| {
                            match e {
                                crate::gateway::transport::TransportKeyError::Store(e) => {
                                    store_err(e)
                                }
                                // Another secrets key: no pass fixes it.
                                e => WorkError::permanent_because("the gateway token's key", e),
                            }
                        })?;
                        if h.runtime_config.is_some() {
                            h.credential.0.insert(
                                wire::runtime::GATEWAY_TOKEN_ENV.to_owned(),
                                key.runtime_token(&rev.id),
                            );
                        }
                        if h.app_server.is_some() {
                            h.credential.0.insert(
                                wire::codex::TOKEN_FILE.to_owned(),
                                key.app_server_token(&agent.id),
                            );
                        }
                    }
                }
                self.send(
                    &cid,
                    &harness_target(ns, &rev),
                    generation::HARNESS_APPLY,
                    &work,
                )
                .await?;
            }
            Step::StopHarness => {
                let work = wire::WorkSpec::HarnessStop(revision_work(ns, dp, &rev));
                self.send(
                    &cid()?,
                    &harness_target(ns, &rev),
                    generation::HARNESS_STOP,
                    &work,
                )
                .await?;
            }
            Step::Activate if !rev.spec.harness_kind.has_control_gateway() => {
                if self.config.path_probe
                    && let Err(failure) = self.probe_harness(store, &rev).await
                {
                    return self.path_probe_failed(store, ns, g, rev, failure).await;
                }
                // No control-cluster Gateway serves an embedded revision: a
                // route a dedicated predecessor left goes (its Gateway
                // revision is retired after activation).
                if g.predecessors
                    .iter()
                    .any(|p| p.revision.spec.harness_kind.has_control_gateway())
                {
                    self.gateways
                        .stop(&ns.id, &ns.name, &rev.agent)
                        .await
                        .map_err(|e| WorkError::retryable_because("activation", e))?;
                }
                if !store
                    .activate_revision(&rev.namespace, &rev.agent, rev.number)
                    .await
                    .map_err(store_err)?
                {
                    return Ok(Flow::Continue);
                }
                rev.progress.activated_at = Some(now);
                self.save(store, &mut rev).await?;
            }
            Step::Activate => {
                let target = gateway_target(
                    ns,
                    dp,
                    agent,
                    &rev,
                    self.config.tunnel.as_ref(),
                    self.config.workload.harness_port,
                );
                if self.config.path_probe
                    && let Err(failure) = self.probe_gateway(store, &rev, &target).await
                {
                    return self.path_probe_failed(store, ns, g, rev, failure).await;
                }
                if let Err(failure) = self.gateways.activate(&target).await {
                    if failure.transient {
                        return Err(WorkError::retryable(format!("activation: {failure}")).into());
                    }
                    // The Gateway refuses before routing changes.
                    return self
                        .fail(store, ns, g, rev, format!("activation: {failure}"))
                        .await;
                }
                if !store
                    .activate_revision(&rev.namespace, &rev.agent, rev.number)
                    .await
                    .map_err(store_err)?
                {
                    // A stop or a newer deploy landed since the facts were
                    // read: decide again (this revision is no longer wanted).
                    return Ok(Flow::Continue);
                }
                rev.progress.activated_at = Some(now);
                self.save(store, &mut rev).await?;
            }
            Step::RetirePredecessors(numbers) => {
                for p in g
                    .predecessors
                    .iter()
                    .filter(|p| numbers.contains(&p.revision.number))
                {
                    self.send_to_predecessor(
                        ns,
                        p,
                        generation::HARNESS_RETIRE,
                        wire::WorkSpec::HarnessRetire,
                    )
                    .await?;
                    self.retire_gateway(ns, &rev.agent, p.revision.number)
                        .await?;
                }
            }
            Step::MarkRetired(numbers) => {
                for p in g
                    .predecessors
                    .iter()
                    .filter(|p| numbers.contains(&p.revision.number))
                {
                    // A predecessor that never got Harness work may still
                    // have its Gateway revision (applied while its own
                    // predecessors stopped): remove it too (idempotent).
                    self.retire_gateway(ns, &rev.agent, p.revision.number)
                        .await?;
                    let mut p = p.revision.clone();
                    self.enter(store, &mut p, RevisionPhase::Retired, None)
                        .await?;
                }
            }
            Step::PredecessorsRetired => {
                rev.progress.predecessors_retired_at = Some(now);
                self.save(store, &mut rev).await?;
                self.wake_drain(store, &rev).await?;
            }
            Step::Fail(reason) => return self.fail(store, ns, g, rev, reason.to_string()).await,
        }
        Ok(Flow::Continue)
    }
}

rollout_handler!(
    /// `revision.rollout` handler.
    RolloutHandler,
    Action::Deploy,
    advance_item
);
