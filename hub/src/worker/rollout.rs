//! The revision pipeline's driver: a work handler that reads a revision's
//! facts from the store (outbox, spoke reports, recorded progress), asks
//! [`crate::pipeline::decide`] for the next step, performs it, records it,
//! and repeats until the pipeline waits for a spoke report or finishes.
//!
//! It runs again when a report about the revision arrives (the link calls
//! [`RolloutTrigger`]) and at the readiness deadline, so readiness is event
//! driven, not polled.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use clawfed_proto::work::{self as spec, target};
use tokio_util::sync::CancellationToken;

use super::{WorkError, WorkHandler};
use crate::auth::Action;
use crate::link::server::LinkHandle;
use crate::model::{
    Agent, AgentRevision, ConnectionState, DesiredState, ExecutionMode, Namespace, RevisionPhase,
    WorkItem,
};
use crate::pipeline::{Facts, Readiness, Step, WorkOutcome, decide};
use crate::store::{NewWork, Store, StoreError};

/// Drives one revision through the pipeline.
pub const REVISION_ROLLOUT: &str = "revision.rollout";
/// Stops an Agent: route and Gateway first, then the Harness via the spoke.
pub const AGENT_STOP: &str = "agent.stop";
/// Tears a tenant down in every cluster it was provisioned in (the spoke
/// runs the provider's namespace cleanup first), then deletes it.
pub const NAMESPACE_TEARDOWN: &str = "namespace.teardown";

/// The Agent a Gateway belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayTarget {
    pub tenant: String,
    pub namespace_id: String,
    pub agent: String,
    pub agent_id: String,
    pub revision: i64,
    pub revision_id: String,
    pub image: String,
    /// Where the revision's Harness is reached (cluster / namespace / port).
    pub harness_cluster: String,
    pub harness_namespace: String,
    pub harness_port: i32,
}

/// Why a Gateway operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct GatewayFailure {
    pub reason: String,
    /// Retrying may help (apiserver unavailable, conflict…); otherwise the
    /// revision fails with the reason.
    pub transient: bool,
}

/// The control-cluster Gateway of each Agent, as the pipeline needs it.
#[async_trait]
pub trait GatewayRuntime: Send + Sync + 'static {
    /// Applies the Agent's Gateway for `target.revision` (idempotent).
    async fn ensure(&self, target: &GatewayTarget) -> Result<(), GatewayFailure>;
    /// Whether the Gateway serves `revision`.
    async fn ready(&self, target: &GatewayTarget) -> Result<bool, GatewayFailure>;
    /// Routes to `revision`; fails before changing anything when routing
    /// cannot be done.
    async fn activate(&self, target: &GatewayTarget) -> Result<(), GatewayFailure>;
    /// Deletes the route, then the Gateway runtime (keeps its storage).
    async fn stop(&self, tenant: &str, agent: &str) -> Result<(), GatewayFailure>;
    /// Removes what only `revision` used.
    async fn retire(&self, tenant: &str, agent: &str, revision: i64) -> Result<(), GatewayFailure>;
}

/// The hub's Gateway room ([`crate::gateway::Gateways`]) as the runtime.
#[async_trait]
impl GatewayRuntime for crate::gateway::Gateways {
    async fn ensure(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        let transport = self
            .transport_for(&t.revision_id)
            .await
            .map_err(gateway_failure)?;
        let spec = crate::gateway::GatewaySpec {
            tenant: t.tenant.clone(),
            agent: t.agent.clone(),
            revision: t.revision,
            revision_id: t.revision_id.clone(),
            image: (!t.image.is_empty()).then(|| t.image.clone()),
            // The spoke's Harness Service is `<agent>-r<N>-harness`.
            harness_endpoint: format!(
                "http://{}-r{}-harness.{}.svc:{}",
                t.agent, t.revision, t.harness_namespace, t.harness_port
            ),
            transport,
        };
        crate::gateway::Gateways::ensure(self, &spec)
            .await
            .map(|_| ())
            .map_err(gateway_failure)
    }

    async fn ready(&self, t: &GatewayTarget) -> Result<bool, GatewayFailure> {
        crate::gateway::Gateways::is_ready(self, &t.agent, t.revision)
            .await
            .map(|r| matches!(r, crate::gateway::Readiness::Ready))
            .map_err(gateway_failure)
    }

    async fn activate(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        match crate::gateway::Gateways::activate(self, &t.tenant, &t.agent, t.revision).await {
            Ok(crate::gateway::Activation::RoutingDisabled) => {
                tracing::warn!(agent = %t.agent, revision = t.revision, "pipeline.routing_not_configured: gateway.options.privateRouting is unset; the Gateway serves without an HTTPRoute");
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(gateway_failure(e)),
        }
    }

    async fn stop(&self, tenant: &str, agent: &str) -> Result<(), GatewayFailure> {
        crate::gateway::Gateways::stop(self, tenant, agent)
            .await
            .map(|_| ())
            .map_err(gateway_failure)
    }

    async fn retire(&self, tenant: &str, agent: &str, revision: i64) -> Result<(), GatewayFailure> {
        crate::gateway::Gateways::retire_revision(self, tenant, agent, revision)
            .await
            .map(|_| ())
            .map_err(gateway_failure)
    }
}

fn gateway_failure(e: crate::gateway::Error) -> GatewayFailure {
    GatewayFailure {
        reason: format!("{}: {e}", e.reason()),
        transient: e.is_transient(),
    }
}

/// Labels of `occ_agent_operation_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct OperationLabels {
    /// `deploy` (deploy request to Active) or `stop`.
    pub operation: String,
    /// `ok` or `failed`.
    pub result: String,
}

type OperationHistogram = prometheus_client::metrics::family::Family<
    OperationLabels,
    prometheus_client::metrics::histogram::Histogram,
    fn() -> prometheus_client::metrics::histogram::Histogram,
>;

/// Pipeline metrics.
#[derive(Debug, Clone)]
pub struct PipelineMetrics {
    pub operation_duration: OperationHistogram,
}

impl PipelineMetrics {
    /// Registers `occ_agent_operation_duration_seconds`.
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Self {
        let operation_duration: OperationHistogram =
            prometheus_client::metrics::family::Family::new_with_constructor(|| {
                prometheus_client::metrics::histogram::Histogram::new(
                    prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 16),
                )
            });
        registry.register(
            "occ_agent_operation_duration_seconds",
            "Agent operations: deploy (request to Active or Failed) and stop",
            operation_duration.clone(),
        );
        Self { operation_duration }
    }

    fn observe(&self, operation: &str, result: &str, seconds: f64) {
        self.operation_duration
            .get_or_create(&OperationLabels {
                operation: operation.to_owned(),
                result: result.to_owned(),
            })
            .observe(seconds);
    }
}

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct RolloutConfig {
    /// How long a revision may wait for readiness.
    pub ready_deadline: Duration,
    /// Attempts given to follow-up work items.
    pub max_attempts: i32,
    /// `policy.requireImmutableDigest`: the spoke refuses images not pinned
    /// by SHA-256 digest, independently of the hub's check at deploy.
    pub require_immutable_digest: bool,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            ready_deadline: Duration::from_secs(300),
            max_attempts: 8,
            require_immutable_digest: false,
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
    /// One pass per revision at a time (reports can queue several).
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl std::fmt::Debug for Rollout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rollout")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn store_err(e: StoreError) -> WorkError {
    WorkError::from_store(e)
}

fn phase_key(p: RevisionPhase) -> String {
    p.as_str().to_owned()
}

/// The Harness work target of a revision.
pub fn harness_target(ns: &Namespace, rev: &AgentRevision) -> String {
    target::harness(&ns.id, &rev.agent, rev.number)
}

fn execution(rev: &AgentRevision) -> spec::ExecutionMode {
    match rev.spec.execution_mode {
        ExecutionMode::Ordinary => spec::ExecutionMode::Ordinary,
        ExecutionMode::Provider => spec::ExecutionMode::Provider,
    }
}

impl Rollout {
    /// A pipeline driver sending Harness work over `link` and managing
    /// Gateways with `gateways`.
    pub fn new(link: LinkHandle, gateways: Arc<dyn GatewayRuntime>, config: RolloutConfig) -> Self {
        Self {
            link,
            gateways,
            config,
            metrics: None,
            locks: Arc::default(),
        }
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

    fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_owned())
            .or_default()
            .clone()
    }

    /// The work item that drives `revision`.
    pub fn work(
        revision_id: &str,
        namespace_id: &str,
        requested_by: Option<String>,
        run_at: chrono::DateTime<Utc>,
        max_attempts: i32,
    ) -> NewWork {
        NewWork {
            kind: REVISION_ROLLOUT.into(),
            namespace_id: Some(namespace_id.to_owned()),
            target: revision_id.to_owned(),
            payload: serde_json::json!({}),
            requested_by,
            max_attempts,
            run_at,
        }
    }

    async fn cluster_id(&self, store: &dyn Store, name: &str) -> Result<String, WorkError> {
        store
            .get_cluster(name)
            .await
            .map(|c| c.id)
            .map_err(store_err)
    }

    async fn outcome(
        &self,
        store: &dyn Store,
        cluster_id: &str,
        target: &str,
        generation: i64,
    ) -> Result<WorkOutcome, WorkError> {
        let reports = store.list_reports(cluster_id).await.map_err(store_err)?;
        let result = reports
            .iter()
            .find(|r| r.target == target && r.kind == "work-result" && r.generation >= generation);
        Ok(match result {
            None => WorkOutcome::Waiting,
            Some(r) if r.body["applied"] == serde_json::Value::Bool(true) => WorkOutcome::Applied,
            // The spoke is still retrying a transient failure: not final.
            Some(r) if r.body["retrying"] == serde_json::Value::Bool(true) => WorkOutcome::Waiting,
            Some(r) => WorkOutcome::Failed(
                r.body["reason"]
                    .as_str()
                    .unwrap_or("refused by the spoke")
                    .to_owned(),
            ),
        })
    }

    /// The reason of a transient failure the spoke is still retrying.
    async fn retrying_reason(
        &self,
        store: &dyn Store,
        cluster_id: &str,
        target: &str,
    ) -> Result<Option<String>, WorkError> {
        let reports = store.list_reports(cluster_id).await.map_err(store_err)?;
        Ok(reports
            .iter()
            .find(|r| r.target == target && r.kind == "work-result")
            .filter(|r| r.body["retrying"] == serde_json::Value::Bool(true))
            .and_then(|r| r.body["reason"].as_str().map(str::to_owned)))
    }

    async fn readiness(
        &self,
        store: &dyn Store,
        cluster_id: &str,
        target: &str,
        revision_id: &str,
    ) -> Result<Option<Readiness>, WorkError> {
        let reports = store.list_reports(cluster_id).await.map_err(store_err)?;
        Ok(reports
            .iter()
            .find(|r| r.target == target && r.kind == "readiness")
            .filter(|r| {
                r.body["revisionId"]
                    .as_str()
                    .is_none_or(|id| id == revision_id)
            })
            .map(|r| Readiness {
                ready: r.body["ready"].as_bool().unwrap_or(false),
                live_candidates: r.body["liveCandidates"].as_u64().unwrap_or(0) as u32,
            }))
    }

    /// Earlier revisions of the Agent that still hold a Harness.
    async fn predecessors(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
    ) -> Result<Vec<AgentRevision>, WorkError> {
        Ok(store
            .list_revisions(&rev.namespace, &rev.agent)
            .await
            .map_err(store_err)?
            .into_iter()
            .filter(|r| r.number < rev.number && r.phase != RevisionPhase::Retired)
            .collect())
    }

    fn gateway_target(&self, ns: &Namespace, agent: &Agent, rev: &AgentRevision) -> GatewayTarget {
        GatewayTarget {
            tenant: ns.name.clone(),
            namespace_id: ns.id.clone(),
            agent: agent.name.clone(),
            agent_id: agent.id.clone(),
            revision: rev.number,
            revision_id: rev.id.clone(),
            image: rev
                .images
                .iter()
                .find(|i| i.role == "gateway")
                .map_or_else(String::new, |i| i.reference.clone()),
            harness_cluster: rev.resolved_cluster.clone().unwrap_or_default(),
            harness_namespace: ns.data_plane_namespace.clone(),
            harness_port: 8080,
        }
    }

    fn harness_work(
        config: &RolloutConfig,
        ns: &Namespace,
        rev: &AgentRevision,
        preds: &[AgentRevision],
    ) -> spec::HarnessWork {
        let r = &rev.spec.resources;
        let mut requests = std::collections::BTreeMap::new();
        let mut limits = std::collections::BTreeMap::new();
        if let Some(v) = &r.cpu_request {
            requests.insert("cpu".to_owned(), v.clone());
        }
        if let Some(v) = &r.memory_request {
            requests.insert("memory".to_owned(), v.clone());
        }
        if let Some(v) = &r.cpu_limit {
            limits.insert("cpu".to_owned(), v.clone());
        }
        if let Some(v) = &r.memory_limit {
            limits.insert("memory".to_owned(), v.clone());
        }
        spec::HarnessWork {
            tenant: ns.name.clone(),
            namespace_id: ns.id.clone(),
            data_plane_namespace: ns.data_plane_namespace.clone(),
            agent: rev.agent.clone(),
            revision: rev.number,
            revision_id: rev.id.clone(),
            harness_kind: rev.spec.harness_kind.as_str().to_owned(),
            image: rev.spec.image.clone(),
            require_digest: config.require_immutable_digest,
            requirement_labels: rev.spec.requirement_labels.clone(),
            resources: spec::Resources { requests, limits },
            port: 8080,
            env: std::collections::BTreeMap::new(),
            workspace: rev
                .spec
                .harness_kind
                .is_dedicated()
                .then(|| spec::Workspace {
                    size: "1Gi".into(),
                    storage_class: None,
                }),
            credential: spec::SecretData::default(),
            dedicated: rev.spec.harness_kind.is_dedicated(),
            predecessors: preds
                .iter()
                .map(|p| spec::Predecessor {
                    revision: p.number,
                    revision_id: p.id.clone(),
                    execution: execution(p),
                })
                .collect(),
            execution: execution(rev),
            node_selector: std::collections::BTreeMap::new(),
            headless_service: false,
        }
    }

    fn revision_work(&self, ns: &Namespace, rev: &AgentRevision) -> spec::RevisionWork {
        spec::RevisionWork {
            tenant: ns.name.clone(),
            namespace_id: ns.id.clone(),
            data_plane_namespace: ns.data_plane_namespace.clone(),
            agent: rev.agent.clone(),
            revision: rev.number,
            revision_id: rev.id.clone(),
            execution: execution(rev),
        }
    }

    async fn send(
        &self,
        cluster_id: &str,
        target: &str,
        kind: spec::WorkKind,
        generation: i64,
        work: &spec::WorkSpec,
    ) -> Result<(), WorkError> {
        let body: serde_json::Value = serde_json::from_slice(&work.encode())
            .map_err(|e| WorkError::Permanent(format!("encoding {kind}: {e}")))?;
        self.link
            .send(cluster_id, target, kind.as_str(), generation, &body)
            .await
            .map_err(store_err)?;
        Ok(())
    }

    /// One pass over a revision.
    async fn advance(&self, store: &dyn Store, revision_id: &str) -> Result<(), WorkError> {
        let lock = self.lock(revision_id);
        let _held = lock.lock().await;
        let started = Instant::now();
        for _ in 0..32 {
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
            let facts = self.facts(store, &ns, &agent, &rev).await?;
            let step = decide(&facts);
            // The Gateway's readiness is control-cluster state no spoke
            // reports: while only it is missing, look again shortly.
            if step == Step::Wait
                && facts.phase == RevisionPhase::WaitingReady
                && facts.readiness.is_some_and(|r| r.ready)
                && !facts.gateway_ready
            {
                let again = Utc::now() + chrono::Duration::seconds(1);
                store
                    .enqueue_work(&[Self::work(
                        &rev.id,
                        &ns.id,
                        None,
                        again,
                        self.config.max_attempts,
                    )])
                    .await
                    .map_err(store_err)?;
            }
            tracing::debug!(revision = %rev.id, phase = rev.phase.as_str(), ?step, "pipeline.step");
            if !self.perform(store, &ns, &agent, rev, step).await? {
                tracing::debug!(revision = %revision_id, elapsedMs = started.elapsed().as_millis() as u64, "pipeline.settled");
                return Ok(());
            }
        }
        Err(WorkError::Retryable(
            "pipeline did not settle in 32 steps".into(),
        ))
    }

    async fn facts(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        agent: &Agent,
        rev: &AgentRevision,
    ) -> Result<Facts, WorkError> {
        let wanted = agent.desired_state == DesiredState::Running
            && agent.latest_revision == Some(rev.number);
        let cluster = match &rev.resolved_cluster {
            Some(name) => Some(self.cluster_id(store, name).await?),
            None => None,
        };
        let preds = self.predecessors(store, rev).await?;
        let harness = harness_target(ns, rev);
        let namespace = target::namespace(&ns.id);
        let (
            namespace_sent,
            namespace_outcome,
            harness_sent,
            harness_outcome,
            readiness,
            preds_stopped,
        ) = match &cluster {
            None => (
                false,
                WorkOutcome::Waiting,
                false,
                WorkOutcome::Waiting,
                None,
                false,
            ),
            Some(cid) => {
                let ns_sent = store
                    .outbox_latest_generation(cid, &namespace)
                    .await
                    .map_err(store_err)?
                    .is_some();
                let h_sent = store
                    .outbox_latest_generation(cid, &harness)
                    .await
                    .map_err(store_err)?
                    .is_some();
                let mut stopped = rev.progress.predecessors_stopped_at.is_some();
                if !stopped && !preds.is_empty() {
                    let mut all = true;
                    for p in &preds {
                        let t = harness_target(ns, p);
                        if self.outcome(store, cid, &t, 2).await? != WorkOutcome::Applied {
                            all = false;
                        }
                    }
                    stopped = all;
                }
                (
                    ns_sent,
                    self.outcome(store, cid, &namespace, 1).await?,
                    h_sent,
                    self.outcome(store, cid, &harness, 1).await?,
                    self.readiness(store, cid, &harness, &rev.id).await?,
                    stopped || preds.is_empty(),
                )
            }
        };
        let gateway_ready = if rev.progress.gateway_applied_at.is_some()
            && matches!(rev.phase, RevisionPhase::WaitingReady)
        {
            self.gateways
                .ready(&self.gateway_target(ns, agent, rev))
                .await
                .unwrap_or(false)
        } else {
            false
        };
        Ok(Facts {
            phase: rev.phase,
            wanted,
            placed: cluster.is_some(),
            namespace_sent,
            namespace: namespace_outcome,
            gateway_applied: rev.progress.gateway_applied_at.is_some(),
            dedicated: rev.spec.harness_kind.is_dedicated(),
            predecessors_stopped: preds_stopped,
            harness_sent,
            harness: harness_outcome,
            readiness,
            gateway_ready,
            activated: rev.progress.activated_at.is_some(),
            predecessors_retired: rev.progress.predecessors_retired_at.is_some(),
            deadline_passed: rev.progress.ready_deadline.is_some_and(|d| d <= Utc::now()),
        })
    }

    /// Performs one step; returns whether to decide again.
    async fn perform(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        agent: &Agent,
        mut rev: AgentRevision,
        step: Step,
    ) -> Result<bool, WorkError> {
        let now = Utc::now();
        let cluster_id = match &rev.resolved_cluster {
            Some(name) => Some(self.cluster_id(store, name).await?),
            None => None,
        };
        let cid = || {
            cluster_id
                .clone()
                .ok_or_else(|| WorkError::Retryable("revision not placed yet".into()))
        };
        match step {
            Step::Wait | Step::Finished => return Ok(false),
            Step::Place => {
                let online = store.list_clusters().await.map_err(store_err)?;
                let chosen = online.into_iter().find(|c| {
                    c.connection_state == ConnectionState::Online
                        && rev
                            .spec
                            .placement
                            .cluster_selector
                            .iter()
                            .all(|(k, v)| c.labels.get(k) == Some(v))
                });
                match chosen {
                    Some(c) => {
                        store
                            .place_revision(&rev.id, &c.name)
                            .await
                            .map_err(store_err)?;
                        tracing::info!(revision = %rev.id, cluster = %c.name, "pipeline.placed");
                        return Ok(true);
                    }
                    None => {
                        return Err(WorkError::Retryable(
                            "no online cluster matches the placement yet".into(),
                        ));
                    }
                }
            }
            Step::SendNamespace => {
                let work = spec::WorkSpec::NamespaceEnsure(spec::NamespaceWork {
                    tenant: ns.name.clone(),
                    namespace_id: ns.id.clone(),
                    adopt: ns.adopted.then(|| ns.data_plane_namespace.clone()),
                    ..Default::default()
                });
                self.send(
                    &cid()?,
                    &target::namespace(&ns.id),
                    spec::WorkKind::NamespaceEnsure,
                    1,
                    &work,
                )
                .await?;
                self.enter(store, &mut rev, RevisionPhase::Provisioning, None)
                    .await?;
            }
            Step::Enter(phase) => {
                self.enter(store, &mut rev, phase, None).await?;
                if phase == RevisionPhase::WaitingReady {
                    // Wake up at the deadline even if no report comes.
                    let deadline = rev.progress.ready_deadline.unwrap_or(now);
                    store
                        .enqueue_work(&[Self::work(
                            &rev.id,
                            &ns.id,
                            None,
                            deadline,
                            self.config.max_attempts,
                        )])
                        .await
                        .map_err(store_err)?;
                }
                if phase == RevisionPhase::Active {
                    self.log_completed(&rev);
                    self.observe("deploy", "ok", rev.created_at);
                }
            }
            Step::ApplyGateway => {
                let target = self.gateway_target(ns, agent, &rev);
                if let Err(reason) = self.gateways.ensure(&target).await {
                    return self
                        .fail(store, ns, rev, format!("gateway: {reason}"))
                        .await;
                }
                rev.progress.gateway_applied_at = Some(now);
                self.save(store, &rev).await?;
            }
            Step::StopPredecessors => {
                let cid = cid()?;
                for p in self.predecessors(store, &rev).await? {
                    let work = spec::WorkSpec::HarnessStop(self.revision_work(ns, &p));
                    self.send(
                        &cid,
                        &harness_target(ns, &p),
                        spec::WorkKind::HarnessStop,
                        2,
                        &work,
                    )
                    .await?;
                }
                // Decide again only when the spoke reports the stops.
                let facts_stopped = self
                    .facts(store, ns, agent, &rev)
                    .await?
                    .predecessors_stopped;
                if !facts_stopped {
                    return Ok(false);
                }
                rev.progress.predecessors_stopped_at = Some(now);
                self.save(store, &rev).await?;
            }
            Step::SendHarness => {
                let preds = self.predecessors(store, &rev).await?;
                let work = spec::WorkSpec::HarnessApply(Box::new(Self::harness_work(
                    &self.config,
                    ns,
                    &rev,
                    &preds,
                )));
                self.send(
                    &cid()?,
                    &harness_target(ns, &rev),
                    spec::WorkKind::HarnessApply,
                    1,
                    &work,
                )
                .await?;
            }
            Step::Activate => {
                let target = self.gateway_target(ns, agent, &rev);
                if let Err(reason) = self.gateways.activate(&target).await {
                    // The Gateway refuses before routing changes.
                    return self
                        .fail(store, ns, rev, format!("activation: {reason}"))
                        .await;
                }
                store
                    .set_active_revision(&rev.namespace, &rev.agent, Some(rev.number))
                    .await
                    .map_err(store_err)?;
                rev.progress.activated_at = Some(now);
                self.save(store, &rev).await?;
            }
            Step::RetirePredecessors => {
                let mut waiting = false;
                for mut p in self.predecessors(store, &rev).await? {
                    // A predecessor runs where it was placed, which need not
                    // be where this revision runs.
                    let Some(cluster) = p.resolved_cluster.clone() else {
                        self.enter(store, &mut p, RevisionPhase::Retired, None)
                            .await?;
                        continue;
                    };
                    let cid = self.cluster_id(store, &cluster).await?;
                    let target = harness_target(ns, &p);
                    let work = spec::WorkSpec::HarnessRetire(self.revision_work(ns, &p));
                    self.send(&cid, &target, spec::WorkKind::HarnessRetire, 3, &work)
                        .await?;
                    if let Err(reason) = self.gateways.retire(&ns.name, &rev.agent, p.number).await
                    {
                        return Err(WorkError::Retryable(format!(
                            "retiring revision {}: {reason}",
                            p.number
                        )));
                    }
                    // Retired once the spoke says the destructive cleanup
                    // is done; its report brings the next pass.
                    match self.outcome(store, &cid, &target, 3).await? {
                        WorkOutcome::Applied => {
                            self.enter(store, &mut p, RevisionPhase::Retired, None)
                                .await?;
                        }
                        WorkOutcome::Waiting => waiting = true,
                        WorkOutcome::Failed(reason) => {
                            return Err(WorkError::Retryable(format!(
                                "the spoke could not retire revision {}: {reason}",
                                p.number
                            )));
                        }
                    }
                }
                if waiting {
                    return Ok(false);
                }
                rev.progress.predecessors_retired_at = Some(now);
                self.save(store, &rev).await?;
            }
            Step::Fail(reason) => return self.fail(store, ns, rev, reason).await,
        }
        Ok(true)
    }

    async fn save(&self, store: &dyn Store, rev: &AgentRevision) -> Result<(), WorkError> {
        store
            .update_revision(&rev.id, rev.phase, rev.reason.as_deref(), &rev.progress)
            .await
            .map_err(store_err)?;
        Ok(())
    }

    async fn enter(
        &self,
        store: &dyn Store,
        rev: &mut AgentRevision,
        phase: RevisionPhase,
        reason: Option<String>,
    ) -> Result<(), WorkError> {
        let now = Utc::now();
        rev.progress.phases.insert(phase_key(phase), now);
        if phase == RevisionPhase::WaitingReady {
            rev.progress.ready_deadline = Some(
                now + chrono::Duration::from_std(self.config.ready_deadline).unwrap_or_default(),
            );
        }
        let at = |p: RevisionPhase| rev.progress.phases.get(&phase_key(p)).copied();
        let span = |a: Option<chrono::DateTime<Utc>>, b: Option<chrono::DateTime<Utc>>| {
            a.zip(b).map(|(a, b)| (b - a).num_milliseconds())
        };
        if phase == RevisionPhase::Active {
            let created = Some(rev.created_at);
            let d = &mut rev.progress.durations_ms;
            for (key, v) in [
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
                ("elapsedMs", span(created, Some(now))),
            ] {
                if let Some(v) = v {
                    d.insert(key.to_owned(), v);
                }
            }
        }
        rev.phase = phase;
        rev.reason = reason;
        self.save(store, rev).await
    }

    async fn fail(
        &self,
        store: &dyn Store,
        ns: &Namespace,
        mut rev: AgentRevision,
        reason: String,
    ) -> Result<bool, WorkError> {
        tracing::error!(revision = %rev.id, agent = %rev.agent, number = rev.number, reason = %reason, "pipeline.failed");
        // Preparation errors run the workload cleanup hooks: the Harness is
        // stopped (its storage kept) if it was ever sent.
        if let Some(name) = &rev.resolved_cluster {
            let cid = self.cluster_id(store, name).await?;
            let harness = harness_target(ns, &rev);
            if store
                .outbox_latest_generation(&cid, &harness)
                .await
                .map_err(store_err)?
                .is_some()
            {
                let work = spec::WorkSpec::HarnessStop(self.revision_work(ns, &rev));
                self.send(&cid, &harness, spec::WorkKind::HarnessStop, 2, &work)
                    .await?;
            }
        }
        let created = rev.created_at;
        self.enter(store, &mut rev, RevisionPhase::Failed, Some(reason))
            .await?;
        self.observe("deploy", "failed", created);
        Ok(false)
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

    /// Stops an Agent: route and Gateway runtime first (hub), then the
    /// Harness of every revision that still has one (spoke). Converges when
    /// things are already gone.
    async fn stop_agent(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        let ns_name = item
            .namespace
            .clone()
            .ok_or_else(|| WorkError::Permanent("stop work without a namespace".into()))?;
        let agent_name = item.target.clone();
        let ns = store.get_namespace(&ns_name).await.map_err(store_err)?;
        let agent = match store.get_agent(&ns_name, &agent_name).await {
            Ok(a) => a,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(store_err(e)),
        };
        if agent.desired_state != DesiredState::Stopped {
            return Ok(()); // redeployed since: nothing to stop
        }
        self.gateways
            .stop(&ns.name, &agent.name)
            .await
            .map_err(|e| WorkError::Retryable(format!("gateway stop: {e}")))?;
        store
            .set_active_revision(&ns.name, &agent.name, None)
            .await
            .map_err(store_err)?;
        for mut rev in store
            .list_revisions(&ns.name, &agent.name)
            .await
            .map_err(store_err)?
        {
            if matches!(rev.phase, RevisionPhase::Retired | RevisionPhase::Stopped) {
                continue;
            }
            if let Some(name) = &rev.resolved_cluster {
                let cid = self.cluster_id(store, name).await?;
                let work = spec::WorkSpec::HarnessStop(self.revision_work(&ns, &rev));
                self.send(
                    &cid,
                    &harness_target(&ns, &rev),
                    spec::WorkKind::HarnessStop,
                    2,
                    &work,
                )
                .await?;
            }
            if rev.phase != RevisionPhase::Failed {
                self.enter(
                    store,
                    &mut rev,
                    RevisionPhase::Stopped,
                    Some("agent stopped".into()),
                )
                .await?;
            }
        }
        tracing::info!(agent = %agent.name, namespace = %ns.name, elapsedMs = (Utc::now() - item.created_at).num_milliseconds(), "pipeline.stopped");
        self.observe("stop", "ok", item.created_at);
        Ok(())
    }
}

impl Rollout {
    /// The work item that tears `namespace_id` down.
    pub fn teardown_work(
        namespace_id: &str,
        requested_by: Option<String>,
        max_attempts: i32,
    ) -> NewWork {
        NewWork {
            kind: NAMESPACE_TEARDOWN.into(),
            namespace_id: Some(namespace_id.to_owned()),
            target: namespace_id.to_owned(),
            payload: serde_json::json!({}),
            requested_by,
            max_attempts,
            run_at: Utc::now(),
        }
    }

    /// One pass of a namespace teardown: ask every cluster that has the
    /// namespace to delete it, then delete the tenant once all say it is
    /// gone; a failure keeps the tenant (and the spoke keeps the
    /// infrastructure) with the reason.
    async fn teardown(&self, store: &dyn Store, item: &WorkItem) -> Result<(), WorkError> {
        use crate::model::NamespaceState;
        let ns = match store.get_namespace_by_id(&item.target).await {
            Ok(ns) => ns,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(store_err(e)),
        };
        if ns.state != NamespaceState::Deleting {
            return Ok(());
        }
        // Each deletion request gets its own generation, so a retried
        // delete after a failure is new work for the spoke.
        let generation = ns.updated_at.timestamp_millis();
        let target = target::namespace(&ns.id);
        let work = spec::WorkSpec::NamespaceDelete(spec::NamespaceDeleteWork {
            tenant: ns.name.clone(),
            namespace_id: ns.id.clone(),
            data_plane_namespace: ns.data_plane_namespace.clone(),
        });
        let mut waiting = 0;
        let mut failures = Vec::new();
        let mut retrying = Vec::new();
        for cluster in store.list_clusters().await.map_err(store_err)? {
            let Some(sent) = store
                .outbox_latest_generation(&cluster.id, &target)
                .await
                .map_err(store_err)?
            else {
                continue; // never provisioned there
            };
            if sent < generation {
                self.send(
                    &cluster.id,
                    &target,
                    spec::WorkKind::NamespaceDelete,
                    generation,
                    &work,
                )
                .await?;
                waiting += 1;
                continue;
            }
            match self
                .outcome(store, &cluster.id, &target, generation)
                .await?
            {
                WorkOutcome::Applied => {}
                WorkOutcome::Waiting => {
                    waiting += 1;
                    if let Some(reason) = self.retrying_reason(store, &cluster.id, &target).await? {
                        retrying.push(format!("{}: {reason}", cluster.name));
                    }
                }
                WorkOutcome::Failed(reason) => failures.push(format!("{}: {reason}", cluster.name)),
            }
        }
        let system = |action: &str, result: &str, detail: Option<String>| crate::store::NewAudit {
            actor: "system:pipeline".into(),
            action: action.into(),
            namespace: Some(ns.name.clone()),
            target: format!("namespaces/{}", ns.name),
            result: result.into(),
            detail,
        };
        if !failures.is_empty() {
            let reason = format!(
                "teardown failed, infrastructure kept: {}",
                failures.join("; ")
            );
            tracing::error!(namespace = %ns.name, reason = %reason, "pipeline.teardown_failed");
            store
                .set_namespace_state(
                    &ns.id,
                    NamespaceState::TeardownFailed,
                    Some(&reason),
                    &crate::store::Effects::audit(system(
                        "namespace.teardown",
                        "error",
                        Some(reason.clone()),
                    )),
                )
                .await
                .map_err(store_err)?;
            return Ok(());
        }
        if waiting > 0 {
            // A spoke retrying its cleanup keeps the infrastructure. (The
            // namespace row is not touched: its updated_at is the teardown's
            // generation.) Their reports bring the next pass.
            if !retrying.is_empty() {
                tracing::warn!(namespace = %ns.name, reason = %retrying.join("; "), "pipeline.teardown_retrying");
            }
            return Ok(());
        }
        match store
            .delete_namespace(
                &ns.name,
                &crate::store::Effects::audit(system("namespace.deleted", "ok", None)),
            )
            .await
        {
            Ok(()) | Err(StoreError::NotFound { .. }) => {
                tracing::info!(namespace = %ns.name, "pipeline.namespace_deleted");
                Ok(())
            }
            Err(e) => Err(store_err(e)),
        }
    }
}

/// `namespace.teardown` handler.
#[derive(Debug, Clone)]
pub struct TeardownHandler(pub Rollout);

#[async_trait]
impl WorkHandler for TeardownHandler {
    fn required_action(&self) -> Action {
        Action::DeleteNamespace
    }

    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        self.0.teardown(store, item).await
    }
}

/// `revision.rollout` handler.
#[derive(Debug, Clone)]
pub struct RolloutHandler(pub Rollout);

#[async_trait]
impl WorkHandler for RolloutHandler {
    fn required_action(&self) -> Action {
        Action::Deploy
    }

    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        self.0.advance(store, &item.target).await
    }
}

/// `agent.stop` handler.
#[derive(Debug, Clone)]
pub struct StopHandler(pub Rollout);

#[async_trait]
impl WorkHandler for StopHandler {
    fn required_action(&self) -> Action {
        Action::Deploy
    }

    async fn handle(
        &self,
        store: &dyn Store,
        item: &WorkItem,
        _cancel: &CancellationToken,
    ) -> Result<(), WorkError> {
        self.0.stop_agent(store, item).await
    }
}

/// Turns spoke reports into pipeline runs: a report on a revision's Harness
/// (or its namespace) queues a pass over that revision.
#[derive(Clone)]
pub struct RolloutTrigger {
    pub store: Arc<dyn Store>,
    pub max_attempts: i32,
}

impl std::fmt::Debug for RolloutTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RolloutTrigger").finish_non_exhaustive()
    }
}

#[async_trait]
impl crate::link::ReportListener for RolloutTrigger {
    async fn on_report(&self, _cluster_id: &str, target: &str, _kind: &str) {
        if let Err(e) = self.queue_for(target).await {
            tracing::warn!(target = %target, error = %e, "pipeline.trigger_failed");
        }
    }
}

/// The Gateway runtime when the hub is configured without control-cluster
/// Gateways (`gateway.enabled: false`): the pipeline still provisions,
/// prepares and waits for the Harness, and logs at every activation that
/// no route was programmed.
#[derive(Debug, Clone, Default)]
pub struct GatewaysDisabled;

#[async_trait]
impl GatewayRuntime for GatewaysDisabled {
    async fn ensure(&self, _target: &GatewayTarget) -> Result<(), GatewayFailure> {
        Ok(())
    }
    async fn ready(&self, _target: &GatewayTarget) -> Result<bool, GatewayFailure> {
        Ok(true)
    }
    async fn activate(&self, target: &GatewayTarget) -> Result<(), GatewayFailure> {
        tracing::warn!(agent = %target.agent, revision = target.revision, "pipeline.activated_without_gateway: gateway.enabled is false in the hub config, no route programmed");
        Ok(())
    }
    async fn stop(&self, _tenant: &str, _agent: &str) -> Result<(), GatewayFailure> {
        Ok(())
    }
    async fn retire(
        &self,
        _tenant: &str,
        _agent: &str,
        _revision: i64,
    ) -> Result<(), GatewayFailure> {
        Ok(())
    }
}

impl RolloutTrigger {
    /// Queues passes for the revisions a report on `target` concerns.
    pub async fn queue_for(&self, target: &str) -> Result<(), StoreError> {
        let store = self.store.as_ref();
        let mut parts = target.split('/');
        let (Some(kind), Some(ns_id)) = (parts.next(), parts.next()) else {
            return Ok(());
        };
        let ns = match store.get_namespace_by_id(ns_id).await {
            Ok(ns) => ns,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut revisions = Vec::new();
        match (
            kind,
            parts.next(),
            parts.next().and_then(|n| n.parse::<i64>().ok()),
        ) {
            ("harness", Some(agent), Some(number)) => {
                if let Ok(rev) = store.get_revision(&ns.name, agent, number).await {
                    revisions.push(rev);
                }
                // A predecessor's stop result may unblock the successor.
                if let Ok(agent) = store.get_agent(&ns.name, agent).await
                    && let Some(latest) = agent.latest_revision
                    && latest != number
                    && let Ok(rev) = store.get_revision(&ns.name, &agent.name, latest).await
                {
                    revisions.push(rev);
                }
            }
            ("namespace", _, _) => {
                if ns.state == crate::model::NamespaceState::Deleting {
                    store
                        .enqueue_work(&[Rollout::teardown_work(&ns.id, None, self.max_attempts)])
                        .await?;
                    return Ok(());
                }
                for agent in store.list_agents(&ns.name).await? {
                    if let Some(latest) = agent.latest_revision
                        && let Ok(rev) = store.get_revision(&ns.name, &agent.name, latest).await
                    {
                        revisions.push(rev);
                    }
                }
            }
            _ => {}
        }
        let work: Vec<NewWork> = revisions
            .iter()
            .filter(|r| {
                !matches!(
                    r.phase,
                    RevisionPhase::Retired | RevisionPhase::Stopped | RevisionPhase::Failed
                )
            })
            .map(|r| Rollout::work(&r.id, &ns.id, None, Utc::now(), self.max_attempts))
            .collect();
        tracing::debug!(target = %target, queued = work.len(), "pipeline.triggered");
        if !work.is_empty() {
            store.enqueue_work(&work).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn namespace() -> Namespace {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000001",
            "name": "team",
            "displayName": "team",
            "dataPlaneNamespace": "oce-0123456789abcde",
            "adopted": false,
            "state": "active",
            "provisionedAt": null,
            "version": 1,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("namespace")
    }

    fn revision(image: &str) -> AgentRevision {
        serde_json::from_value(serde_json::json!({
            "id": "0190a0b0-0000-7000-8000-000000000002",
            "namespace": "team",
            "agent": "bot",
            "number": 1,
            "spec": { "harnessKind": "embedded-openclaw", "image": image },
            "configuration": null,
            "images": [{ "role": "harness", "reference": image,
                         "digest": image.split_once('@').map(|(_, d)| d) }],
            "resolvedCluster": "exec-a",
            "phase": "pending",
            "reason": null,
            "rolledBackFrom": null,
            "createdAt": "2025-01-01T00:00:00Z",
            "updatedAt": "2025-01-01T00:00:00Z",
        }))
        .expect("revision")
    }

    /// Issue 9, defect 7: the spoke's digest gate is the installation
    /// policy, not a consequence of whether the images happen to be pinned.
    #[test]
    fn harness_work_carries_the_digest_policy() {
        let pinned = format!("reg.example/harness@sha256:{}", "a".repeat(64));
        for image in ["reg.example/harness:1.0", pinned.as_str()] {
            for policy in [true, false] {
                let config = RolloutConfig {
                    require_immutable_digest: policy,
                    ..RolloutConfig::default()
                };
                let work = Rollout::harness_work(&config, &namespace(), &revision(image), &[]);
                assert_eq!(work.require_digest, policy, "{image}");
                assert_eq!(work.image, image);
            }
        }
    }
}
