//! The revision pipeline's driver: a work handler that gathers a revision's
//! facts from the store (outbox, typed spoke reports, recorded progress,
//! the deployer's authority), asks [`crate::pipeline::decide`] for the next
//! step, performs it, records it, and repeats until the pipeline waits or
//! finishes. Every decision is the state machine's; this file only gathers
//! and performs.
//!
//! One pass per Agent runs at a time, across hub processes: a pass holds the
//! Agent's lease in the store, and every save is a compare-and-swap on the
//! revision's version, so a pass that outlived its lease cannot overwrite
//! newer progress.
//!
//! It runs again when a report about the revision arrives ([`RolloutTrigger`]),
//! when its Gateway turns Ready (the Gateway watch, through the same
//! trigger) and at each phase's deadline, so waiting is event driven, not
//! polled.
//!
//! # Layout
//! - [`facts`]: reads the facts (no effects).
//! - [`spec`]: builds the work specs and Gateway targets (no I/O).
//! - [`teardown`]: tenant teardown across clusters.
//! - [`trigger`]: spoke reports → passes.
//! - [`metrics`]: operation durations.

/// A work handler that runs one [`Rollout`] method on its item, for
/// tokens that still hold `$action`.
macro_rules! rollout_handler {
    ($(#[$doc:meta])* $name:ident, $action:expr, $method:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name(pub Rollout);

        #[async_trait::async_trait]
        impl $crate::worker::WorkHandler for $name {
            fn required_action(&self) -> $crate::auth::Action {
                $action
            }

            async fn handle(
                &self,
                store: &dyn $crate::store::Store,
                item: &$crate::model::WorkItem,
                _cancel: &tokio_util::sync::CancellationToken,
            ) -> Result<(), $crate::worker::WorkError> {
                self.0.$method(store, item).await
            }
        }
    };
}

mod deletion;
mod facts;
pub mod metrics;
pub mod spec;
mod teardown;
mod trigger;
mod waiters;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use clawfed_proto::work::{self as wire, generation};

use super::WorkError;
use super::kinds::{gateway_work, rollout_work};
use crate::auth::Action;
use crate::link::server::LinkHandle;
use crate::model::{Agent, AgentRevision, DesiredState, Namespace, RevisionPhase, WorkItem};
use crate::pipeline::{
    Placement, Recheck, Step, choose_cluster, decide, decide_stop, gateway_ensure_allowed, needs,
    unplaced_reason,
};
use crate::secrets::SecretBox;
use crate::store::{Store, StoreError};
use facts::Gathered;
use spec::{
    gateway_target, harness_credential, harness_target, harness_work, namespace_target,
    namespace_work, revision_work,
};

pub use super::kinds::{
    AGENT_DELETE, AGENT_STOP, GATEWAY_ENSURE, NAMESPACE_TEARDOWN, REVISION_ROLLOUT,
};
pub use crate::gateway::runtime::{
    GatewayFailure, GatewayRuntime, GatewayTarget, GatewaysDisabled, TunnelEndpoint,
};
pub use deletion::DeleteHandler;
pub use metrics::{OperationLabels, PipelineMetrics};
pub use teardown::TeardownHandler;
pub use trigger::RolloutTrigger;

/// How soon a pass that found the Agent busy (another pass holds its lease)
/// comes back by itself; a holder in this process wakes it as it releases
/// the lease ([`waiters`]), so this only bounds the wait for a holder in
/// another replica.
pub const BUSY_FALLBACK: Duration = Duration::from_secs(2);
/// A Gateway ensure that finds its Agent's lease held tries again this
/// often, this many times, before the worker defers it: the pass that
/// queued it ends within milliseconds.
const LEASE_PATIENCE_STEP: Duration = Duration::from_millis(10);
const LEASE_PATIENCE_TRIES: usize = 20;
/// How soon placement is tried again while no online cluster matches.
const PLACE_RETRY: Duration = Duration::from_secs(2);
/// How long the hub's own probe of a Harness may take.
const HARNESS_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// A first model turn takes about 10 s on an idle runtime (the model's own
/// latency on top); a busy node doubles it.
const MODEL_TURN_TIMEOUT: Duration = Duration::from_secs(90);

/// A data path probe's failure: the runtime answered the turn, wrongly,
/// is final (a model turn costs; asking again is no readiness check); no
/// answer at all is retried until the readiness deadline.
fn probe_failure(e: crate::tunnel::probe::ProbeError) -> GatewayFailure {
    GatewayFailure {
        transient: !e.is_answer(),
        reason: e.to_string(),
    }
}

/// How soon a failed data path probe is tried again (until the readiness
/// deadline).
const PROBE_RETRY: Duration = Duration::from_millis(500);

/// How an embedded OpenClaw revision proves its data path before it turns
/// Active (`pipeline.activation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Activation {
    /// One real model turn through hub -> spoke -> runtime, judged by its
    /// JSON answer. A turn the runtime answered wrongly fails the revision
    /// with that answer; it is never repeated by a readiness retry.
    #[default]
    ModelTurn,
    /// `GET /healthz` answered 2xx: the weaker proof, for runtimes with no
    /// model to ask.
    Health,
}

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct RolloutConfig {
    /// How long a revision may wait for readiness.
    pub ready_deadline: Duration,
    /// How long a revision may wait for placement, its namespace, or its
    /// Harness result before it fails with what is missing.
    pub phase_deadline: Duration,
    /// Attempts given to follow-up work items.
    pub max_attempts: i32,
    /// `policy.requireImmutableDigest`: the spoke refuses images not pinned
    /// by SHA-256 digest, independently of the hub's check at deploy.
    pub require_immutable_digest: bool,
    /// How long an Agent's lease lasts unless renewed: the work holding it
    /// renews it every third of this, so only a hub that stopped (or lost
    /// the store) lets it run out. The revision's version fences the saves
    /// of work that lost it.
    pub pass_lease: Duration,
    /// The hub's tunnel ingress Gateways are given; `None` is direct mode.
    pub tunnel: Option<TunnelEndpoint>,
    /// Probe the data path through the Gateway before activating.
    pub path_probe: bool,
    /// What that probe sends to an OpenClaw runtime without a Gateway.
    pub activation: Activation,
    /// The installation's Harness and namespace settings (the Compute
    /// Driver section) every work item carries.
    pub workload: crate::compute_driver::WorkloadSettings,
    /// The spoke requires a valid plugin startup status before ready.
    pub startup_status: bool,
    /// A deleted Agent's PVCs, credential Secrets and Gateway storage are
    /// kept (`pipeline.retainOnAgentDelete`) instead of destroyed.
    pub retain_on_agent_delete: bool,
    /// How soon a pass waiting only for its Gateway looks again by itself
    /// (`pipeline.gatewayRecheckMs`); the Gateway watch wakes it sooner.
    pub gateway_recheck: Duration,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            ready_deadline: Duration::from_secs(300),
            phase_deadline: Duration::from_secs(300),
            max_attempts: 8,
            require_immutable_digest: false,
            pass_lease: Duration::from_secs(15),
            tunnel: None,
            path_probe: false,
            activation: Activation::ModelTurn,
            workload: crate::compute_driver::WorkloadSettings::default(),
            startup_status: false,
            retain_on_agent_delete: false,
            gateway_recheck: crate::pipeline::DEFAULT_GATEWAY_RECHECK,
        }
    }
}

/// The rollout and stop handlers share this.
#[derive(Clone)]
pub struct Rollout {
    link: LinkHandle,
    gateways: Arc<dyn GatewayRuntime>,
    config: RolloutConfig,
    metrics: Option<PipelineMetrics>,
    /// Opens the credentials revisions froze; `None` fails a revision that
    /// has any.
    secrets: Option<Arc<SecretBox>>,
    /// This process's name; each pass holds Agent leases under its own
    /// name made from it ([`pass_holder`]).
    holder: String,
    /// Passes turned away by a lease held in this process (shared by every
    /// handler's copy).
    waiters: Arc<waiters::LeaseWaiters>,
}

impl std::fmt::Debug for Rollout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollout")
            .field("config", &self.config)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

/// The holder name of one pass. The store's lease is re-entrant for its
/// holder, so a name shared by a process's passes let two passes of one
/// Agent in one worker batch run together, and the first to end released
/// the lease under the other (letting a third in from another replica).
fn pass_holder(process: &str) -> String {
    format!("{process}-{}", uuid::Uuid::new_v4().simple())
}

pub(crate) fn store_err(e: StoreError) -> WorkError {
    WorkError::from_store(e)
}

/// A revision and its Agent; `None` once the Agent was deleted (its
/// history stays, nothing of it is driven any more: `agent.delete` cleans
/// up).
async fn revision_and_agent(
    store: &dyn Store,
    revision_id: &str,
) -> Result<Option<(AgentRevision, Agent)>, WorkError> {
    let rev = match store.get_revision_by_id(revision_id).await {
        Ok(rev) => rev,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(store_err(e)),
    };
    match store.get_agent(&rev.namespace, &rev.agent).await {
        Ok(agent) => Ok(Some((rev, agent))),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(store_err(e)),
    }
}

/// How a step went.
enum Flow {
    /// Decide again.
    Continue,
    /// Nothing more this pass.
    Settled,
}

/// Why a pass stopped early.
enum PassError {
    /// Another pass saved the revision first: read the facts again.
    Stale,
    Work(WorkError),
}

impl From<WorkError> for PassError {
    fn from(e: WorkError) -> Self {
        PassError::Work(e)
    }
}

fn save_err(e: StoreError) -> PassError {
    match e {
        StoreError::Conflict { .. } => PassError::Stale,
        e => PassError::Work(store_err(e)),
    }
}

type PassResult = Result<Flow, PassError>;

impl Rollout {
    /// A pipeline driver sending Harness work over `link` and managing
    /// Gateways with `gateways`.
    pub fn new(link: LinkHandle, gateways: Arc<dyn GatewayRuntime>, config: RolloutConfig) -> Self {
        Self {
            link,
            gateways,
            config,
            metrics: None,
            secrets: None,
            holder: format!("hub-{}", uuid::Uuid::new_v4().simple()),
            waiters: Arc::default(),
        }
    }

    /// Names this process's Agent-pass holders `<owner_prefix>hub-…`: a
    /// restarted hub of the same instance takes their leases back at once
    /// (`Store::reclaim_incarnation`).
    pub fn with_owner_prefix(mut self, owner_prefix: &str) -> Self {
        self.holder = format!("{owner_prefix}{}", self.holder);
        self
    }

    /// Opens revisions' credentials with `secrets` for their Harness work.
    pub fn with_secrets(mut self, secrets: Arc<SecretBox>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Records operation durations in `metrics`.
    pub fn with_metrics(mut self, metrics: PipelineMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn observe(&self, operation: &str, result: &str, since: chrono::DateTime<Utc>) {
        if let Some(m) = &self.metrics {
            let seconds = (Utc::now() - since).num_milliseconds().max(0) as f64 / 1000.0;
            m.observe(operation, result, seconds);
        }
    }

    async fn cluster_id(&self, store: &dyn Store, name: &str) -> Result<String, WorkError> {
        store
            .get_cluster(name)
            .await
            .map(|c| c.id)
            .map_err(store_err)
    }

    async fn send(
        &self,
        cluster_id: &str,
        target: &str,
        generation: i64,
        work: &wire::WorkSpec,
    ) -> Result<(), WorkError> {
        let kind = work.kind();
        let body: serde_json::Value = serde_json::from_slice(&work.encode())
            .map_err(|e| WorkError::Permanent(format!("encoding {kind}: {e}")))?;
        self.link
            .send(cluster_id, target, kind.as_str(), generation, &body)
            .await
            .map_err(store_err)?;
        Ok(())
    }

    async fn requeue(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
        ns: &Namespace,
        at: chrono::DateTime<Utc>,
    ) -> Result<(), WorkError> {
        store
            .enqueue_work(&[rollout_work(
                &rev.id,
                &ns.id,
                None,
                at,
                self.config.max_attempts,
            )])
            .await
            .map_err(store_err)?;
        Ok(())
    }

    /// Runs `f` holding the Agent's lease; `None` when another pass holds it.
    async fn with_agent_lease<T>(
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

    /// `revision.rollout`: a pass over the item's revision.
    async fn advance_item(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        self.advance(store, &item.target).await
    }

    /// Runs work `f` holding the Agent's lease; busy (tried again shortly,
    /// the attempt not counted) while another pass holds it.
    async fn holding_agent_lease(
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
    async fn read_facts(
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
        Err(WorkError::Retryable(
            "pipeline did not settle in 32 steps".into(),
        ))
    }

    /// Performs one step.
    async fn perform(
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
                .ok_or_else(|| WorkError::Retryable("revision not placed yet".into()))
        };
        let dp = g.data_plane_namespace.as_str();
        match step {
            Step::Finished => return Ok(Flow::Settled),
            Step::Wait { recheck_in } => {
                let recheck = recheck_in.map(|what| {
                    let d = match what {
                        Recheck::Gateway => self.config.gateway_recheck,
                    };
                    now + chrono::Duration::from_std(d).unwrap_or_default()
                });
                // Each waiting pass queues its own wake-up at the phase's
                // deadline, not just the pass that entered the phase: a
                // trigger due now joins the revision's waiting pass (passes
                // coalesce), so the deadline pass queued on entering is
                // usually run early, and without this no pass would come
                // at the deadline to fail a revision that no report moves.
                let deadline = self.deadline(&rev).filter(|d| *d > now);
                if let Some(at) = recheck.into_iter().chain(deadline).min() {
                    self.requeue(store, &rev, ns, at).await?;
                }
                return Ok(Flow::Settled);
            }
            Step::Place => {
                let clusters = store.list_clusters().await.map_err(store_err)?;
                let c = match choose_cluster(
                    &clusters,
                    &rev.spec.placement.cluster_selector,
                    needs(&rev.spec),
                ) {
                    Placement::Chosen(c) => c,
                    Placement::Refused(why) => {
                        return self
                            .fail(store, ns, g, rev, format!("placement refused: {why}"))
                            .await;
                    }
                    Placement::Unavailable => {
                        // Say why in the revision, not just `pending`.
                        let why = unplaced_reason(&clusters, &rev.spec.placement.cluster_selector);
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
            Step::Enter(phase) => {
                let reason = match phase {
                    RevisionPhase::Stopping => Some(format!(
                        "waiting for cluster {} to confirm the Harness stop",
                        rev.resolved_cluster.as_deref().unwrap_or("?")
                    )),
                    RevisionPhase::Stopped if agent.desired_state == DesiredState::Stopped => {
                        Some("agent stopped".into())
                    }
                    RevisionPhase::Stopped => Some("superseded by a newer revision".into()),
                    _ => None,
                };
                self.enter(store, &mut rev, phase, reason).await?;
                // Wake up at the phase's deadline even if no report comes.
                if let Some(deadline) = self.deadline(&rev) {
                    self.requeue(store, &rev, ns, deadline).await?;
                }
                if phase == RevisionPhase::Active {
                    self.log_completed(&rev);
                    self.observe("deploy", "ok", rev.created_at);
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
                                e => WorkError::Permanent(format!("the gateway token's key: {e}")),
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
                        .map_err(|e| WorkError::Retryable(format!("activation: {e}")))?;
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
                        return Err(WorkError::Retryable(format!("activation: {failure}")).into());
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
            }
            Step::Fail(reason) => {
                // A placement deadline keeps the why the Place steps found.
                let reason = match (&rev.resolved_cluster, &rev.reason) {
                    (None, Some(why)) if why.starts_with("waiting for placement") => {
                        format!("{reason} ({why})")
                    }
                    _ => reason,
                };
                return self.fail(store, ns, g, rev, reason).await;
            }
        }
        Ok(Flow::Continue)
    }

    /// Opens the credentials `rev` froze at deploy (sealed for `agent`).
    /// The inner error is why the revision cannot get them (a changed key,
    /// a value altered or moved), without any value.
    async fn open_credentials(
        &self,
        store: &dyn Store,
        agent: &Agent,
        rev: &AgentRevision,
    ) -> Result<
        Result<
            Vec<(
                clawfed_proto::work::credential::CredentialKind,
                crate::secrets::SecretValue,
            )>,
            String,
        >,
        WorkError,
    > {
        let stored = store
            .revision_credentials(&rev.id)
            .await
            .map_err(store_err)?;
        if stored.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        let Some(secrets) = &self.secrets else {
            return Ok(Err(
                "credentials: this hub has no secrets key to open them".into()
            ));
        };
        let mut opened = Vec::with_capacity(stored.len());
        for c in stored {
            match secrets.open_credential(&agent.id, c.kind, &c.sealed) {
                Ok(v) => opened.push((c.kind, v)),
                Err(e) => return Ok(Err(format!("credentials: {e}"))),
            }
        }
        Ok(Ok(opened))
    }

    /// Sends a stop or retirement of predecessor `p` to the cluster it runs
    /// on (not the successor's).
    async fn send_to_predecessor(
        &self,
        ns: &Namespace,
        p: &facts::Located,
        generation: i64,
        work: fn(wire::RevisionWork) -> wire::WorkSpec,
    ) -> Result<(), WorkError> {
        let Some(cluster_id) = &p.cluster_id else {
            return Ok(()); // never placed: nothing runs
        };
        let body = work(revision_work(ns, &p.data_plane_namespace, &p.revision));
        self.send(
            cluster_id,
            &harness_target(ns, &p.revision),
            generation,
            &body,
        )
        .await
    }

    /// Removes what only revision `number` used of the Agent's Gateway.
    async fn retire_gateway(
        &self,
        ns: &Namespace,
        agent: &str,
        number: i64,
    ) -> Result<(), WorkError> {
        self.gateways
            .retire(&ns.id, &ns.name, agent, number)
            .await
            .map_err(|e| WorkError::Retryable(format!("retiring revision {number}: {e}")))
    }

    /// Saves progress, phase and reason (compare-and-swap).
    async fn save(&self, store: &dyn Store, rev: &mut AgentRevision) -> Result<(), PassError> {
        let saved = store
            .update_revision(
                &rev.id,
                rev.version,
                rev.phase,
                rev.reason.as_deref(),
                &rev.progress,
            )
            .await
            .map_err(save_err)?;
        rev.version = saved.version;
        Ok(())
    }

    async fn enter(
        &self,
        store: &dyn Store,
        rev: &mut AgentRevision,
        phase: RevisionPhase,
        reason: Option<String>,
    ) -> Result<(), PassError> {
        // Phase times and deadlines are judged by any replica: the
        // database's clock.
        let now = store.now();
        rev.progress.phases.insert(phase.as_str().to_owned(), now);
        if phase == RevisionPhase::WaitingReady {
            rev.progress.ready_deadline = Some(
                now + chrono::Duration::from_std(self.config.ready_deadline).unwrap_or_default(),
            );
        }
        if phase == RevisionPhase::Active {
            record_durations(rev, now);
        }
        rev.phase = phase;
        rev.reason = reason;
        self.save(store, rev).await
    }

    /// Fails the revision; preparation errors run the workload cleanup
    /// hooks (the Harness is stopped, its storage kept) when its Harness
    /// work was ever sent.
    async fn fail(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        g: &Gathered,
        mut rev: AgentRevision,
        reason: String,
    ) -> PassResult {
        tracing::error!(revision = %rev.id, agent = %rev.agent, number = rev.number, reason = %reason, "pipeline.failed");
        if let Some(cid) = &g.cluster_id
            && g.facts.harness_sent
        {
            let work =
                wire::WorkSpec::HarnessStop(revision_work(ns, &g.data_plane_namespace, &rev));
            self.send(
                cid,
                &harness_target(ns, &rev),
                generation::HARNESS_STOP,
                &work,
            )
            .await?;
        }
        let created = rev.created_at;
        self.enter(store, &mut rev, RevisionPhase::Failed, Some(reason))
            .await?;
        self.observe("deploy", "failed", created);
        Ok(Flow::Settled)
    }

    /// The data path probe failed: retried until the readiness deadline,
    /// with the reason on the revision meanwhile; then the revision fails
    /// with it.
    /// The data path of a revision without a control-cluster Gateway: the
    /// hub's own request through the spoke's link to the Harness.
    async fn probe_harness(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
    ) -> Result<(), GatewayFailure> {
        let route = crate::tunnel::route::route_of(store, rev, self.config.workload.harness_port)
            .await
            .map_err(|r| GatewayFailure {
                reason: format!("{}: {}", r.reason, r.message),
                transient: true,
            })?;
        let (runtime, transport) = self
            .link
            .state
            .revision_tokens(store, &rev.id)
            .await
            .map_err(|e| GatewayFailure {
                reason: format!("the gateway token's key: {e}"),
                transient: true,
            })?;
        if self.config.activation == Activation::ModelTurn && rev.spec.harness_kind.is_openclaw() {
            let tokens = crate::tunnel::probe::Tokens {
                runtime: &runtime,
                transport: &transport,
            };
            return crate::tunnel::probe::model_turn(
                &self.link.state.tunnels,
                &route,
                &tokens,
                &rev.id,
                MODEL_TURN_TIMEOUT,
            )
            .await
            .map(|_| ())
            .map_err(probe_failure);
        }
        crate::tunnel::probe::http_get(
            &self.link.state.tunnels,
            &route,
            &transport,
            clawfed_proto::tunnel::PROBE_PATH,
            HARNESS_PROBE_TIMEOUT,
        )
        .await
        .map_err(probe_failure)
    }

    /// The data path of a revision with a control-cluster Gateway: a model
    /// turn through the Gateway (OpenClaw), its Harness answering it
    /// through the hub's tunnel and the spoke; or, where the installation
    /// chose the weaker proof, a health request through the same path.
    async fn probe_gateway(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
        target: &crate::gateway::GatewayTarget,
    ) -> Result<(), GatewayFailure> {
        if self.config.activation != Activation::ModelTurn {
            return self.gateways.probe(target).await;
        }
        let token = self
            .link
            .state
            .runtime_token(store, &rev.id)
            .await
            .map_err(|e| GatewayFailure {
                reason: format!("the gateway token's key: {e}"),
                transient: true,
            })?;
        let user = crate::tunnel::probe::activation_conversation(&rev.id);
        let turn = crate::tunnel::probe::activation_turn(&user);
        self.gateways
            .chat_turn(
                &target.namespace_id,
                &target.agent,
                target.revision,
                &token,
                &turn,
                MODEL_TURN_TIMEOUT,
            )
            .await
            .map(|_| ())
            .map_err(probe_failure)
    }

    async fn path_probe_failed(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        g: &Gathered,
        mut rev: AgentRevision,
        failure: GatewayFailure,
    ) -> PassResult {
        let reason = format!(
            "data path probe ({}) failed: {}",
            if rev.spec.harness_kind.has_control_gateway() {
                "Gateway -> hub tunnel -> spoke -> Harness"
            } else {
                "hub -> spoke -> Harness"
            },
            failure.reason
        );
        let now = store.now();
        let expired = rev.progress.ready_deadline.is_some_and(|d| now >= d);
        if expired || !failure.transient {
            return self.fail(store, ns, g, rev, reason).await;
        }
        tracing::info!(revision = %rev.id, agent = %rev.agent, number = rev.number, reason = %reason, "pipeline.path_probe_failed");
        if rev.reason.as_deref() != Some(reason.as_str()) {
            rev.reason = Some(reason);
            self.save(store, &mut rev).await?;
        }
        let at = now + chrono::Duration::from_std(PROBE_RETRY).unwrap_or_default();
        self.requeue(store, &rev, ns, at).await?;
        Ok(Flow::Settled)
    }

    fn log_completed(&self, rev: &AgentRevision) {
        let d = &rev.progress.durations_ms;
        let get = |k: &str| d.get(k).copied().unwrap_or(0);
        tracing::info!(
            revision = %rev.id,
            agent = %rev.agent,
            number = rev.number,
            prepareMs = get("prepareMs"),
            readinessWaitMs = get("readinessWaitMs"),
            activationMs = get("activationMs"),
            elapsedMs = get("elapsedMs"),
            "pipeline.active"
        );
    }

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
                return Err(WorkError::Retryable(format!("gateway: {failure}")));
            }
            let reason = if failure.transient {
                format!("gateway: {failure} (after {} attempts)", item.attempts)
            } else {
                format!("gateway: {failure}")
            };
            return match self.fail(store, &ns, &g, rev, reason).await {
                Ok(_) => Ok(None),
                Err(PassError::Stale) => Err(WorkError::Retryable(
                    "the revision changed while its Gateway failed; deciding again".into(),
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
                return Err(WorkError::Retryable(
                    "the revision changed while its Gateway was applied; ensuring again".into(),
                ));
            }
            Err(PassError::Work(e)) => return Err(e),
        }
        // The pass goes on (the Gateway watch wakes it again when the
        // Gateway turns Ready).
        Ok(Some((rev, ns)))
    }

    /// Stops an Agent: route and Gateway runtime first (hub), then the
    /// Harness of every revision that may still run one (spoke). A revision
    /// is `stopping` until its cluster confirms the stop. Converges when
    /// things are already gone.
    async fn stop_agent(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        let ns_name = item
            .namespace
            .clone()
            .ok_or_else(|| WorkError::Permanent("stop work without a namespace".into()))?;
        let agent = match store.get_agent(&ns_name, &item.target).await {
            Ok(a) => a,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(store_err(e)),
        };
        self.holding_agent_lease(
            store,
            &agent.id,
            self.stop_agent_held(store, item, &ns_name),
        )
        .await
    }

    async fn stop_agent_held(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        ns_name: &str,
    ) -> Result<(), WorkError> {
        let ns = store.get_namespace(ns_name).await.map_err(store_err)?;
        let agent = store
            .get_agent(ns_name, &item.target)
            .await
            .map_err(store_err)?;
        if agent.desired_state != DesiredState::Stopped {
            return Ok(()); // redeployed since: nothing to stop
        }
        self.gateways
            .stop(&ns.id, &ns.name, &agent.name)
            .await
            .map_err(|e| WorkError::Retryable(format!("gateway stop: {e}")))?;
        store
            .clear_active_revision(&ns.name, &agent.name)
            .await
            .map_err(store_err)?;
        for rev in store
            .list_revisions(&ns.name, &agent.name)
            .await
            .map_err(store_err)?
        {
            if matches!(
                rev.phase,
                RevisionPhase::Retired | RevisionPhase::Stopped | RevisionPhase::Failed
            ) {
                continue;
            }
            for _ in 0..3 {
                let fresh = store.get_revision_by_id(&rev.id).await.map_err(store_err)?;
                match self.stop_revision(store, &ns, &agent, fresh).await {
                    Err(PassError::Stale) => continue,
                    Err(PassError::Work(e)) => return Err(e),
                    Ok(_) => break,
                }
            }
        }
        tracing::info!(agent = %agent.name, namespace = %ns.name, elapsedMs = (Utc::now() - item.created_at).num_milliseconds(), "pipeline.stopped");
        self.observe("stop", "ok", item.created_at);
        Ok(())
    }

    /// Drives one revision of a stopped Agent as far as it goes now (the
    /// stop is sent; its report brings the rest through a pass).
    async fn stop_revision(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        agent: &Agent,
        mut rev: AgentRevision,
    ) -> PassResult {
        for _ in 0..4 {
            let g = self.gather(store, ns, agent, &rev).await?;
            let step = decide_stop(&g.facts);
            if matches!(step, Step::Wait { .. } | Step::Finished) {
                break;
            }
            self.perform(store, ns, agent, rev.clone(), &g, step)
                .await?;
            rev = store.get_revision_by_id(&rev.id).await.map_err(store_err)?;
        }
        Ok(Flow::Settled)
    }
}

/// Phase durations of a revision becoming Active.
fn record_durations(rev: &mut AgentRevision, now: chrono::DateTime<Utc>) {
    let at = |p: RevisionPhase| rev.progress.phases.get(p.as_str()).copied();
    let span = |a: Option<chrono::DateTime<Utc>>, b: Option<chrono::DateTime<Utc>>| {
        a.zip(b).map(|(a, b)| (b - a).num_milliseconds())
    };
    let spans = [
        (
            "prepareMs",
            span(
                at(RevisionPhase::Preparing),
                at(RevisionPhase::WaitingReady),
            ),
        ),
        (
            "readinessWaitMs",
            span(at(RevisionPhase::WaitingReady), rev.progress.activated_at),
        ),
        ("activationMs", span(rev.progress.activated_at, Some(now))),
        ("elapsedMs", span(Some(rev.created_at), Some(now))),
    ];
    for (key, v) in spans {
        if let Some(v) = v {
            rev.progress.durations_ms.insert(key.to_owned(), v);
        }
    }
}

rollout_handler!(
    /// `revision.rollout` handler.
    RolloutHandler,
    Action::Deploy,
    advance_item
);

rollout_handler!(
    /// `gateway.ensure` handler.
    GatewayEnsureHandler,
    Action::Deploy,
    ensure_gateway
);

rollout_handler!(
    /// `agent.stop` handler.
    StopHandler,
    Action::Deploy,
    stop_agent
);

#[cfg(test)]
mod tests {
    use super::pass_holder;

    #[test]
    fn each_pass_holds_leases_under_its_own_name() {
        let (a, b) = (pass_holder("hub-1"), pass_holder("hub-1"));
        assert_ne!(a, b, "two passes of one process must exclude each other");
        assert!(a.starts_with("hub-1-"), "{a}: the process stays readable");
    }
}
