//! The revision pipeline's driver: a work handler that gathers a revision's
//! facts from the store (outbox, typed spoke reports, recorded progress,
//! the deployer's authority), asks [`crate::pipeline::decide`] for the next
//! step, performs it, records it, and repeats until the pipeline waits or
//! finishes. Every decision is the state machine's; this module only gathers
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
//! - this file: [`Rollout`], its settings and what its parts share.
//! - `pass.rs`: one pass over a revision, each step performed.
//! - `lease.rs`: the Agent's lease a pass holds, and the passes it woke.
//! - `send.rs`: work sent to clusters, the next pass queued.
//! - `record.rs`: progress saved, phases entered, failure.
//! - `probe.rs`: the data path probe before activation.
//! - `gateway_ensure.rs`: `gateway.ensure`.
//! - `stop.rs`: `agent.stop`.
//! - `deletion.rs`: `agent.delete`.
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
mod gateway_ensure;
mod lease;
pub mod metrics;
mod pass;
mod probe;
mod record;
mod send;
pub mod spec;
mod stop;
mod teardown;
mod trigger;
mod waiters;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::WorkError;
use crate::link::server::LinkHandle;
use crate::model::{Agent, AgentRevision};
use crate::secrets::SecretBox;
use crate::store::{Store, StoreError};

pub use super::kinds::{
    AGENT_DELETE, AGENT_STOP, GATEWAY_ENSURE, NAMESPACE_TEARDOWN, REVISION_ROLLOUT,
};
pub use crate::gateway::runtime::{
    GatewayFailure, GatewayRuntime, GatewayTarget, GatewaysDisabled, TunnelEndpoint,
};
pub use deletion::DeleteHandler;
pub use gateway_ensure::GatewayEnsureHandler;
pub use metrics::{OperationLabels, PipelineMetrics};
pub use pass::RolloutHandler;
pub use stop::StopHandler;
pub use teardown::TeardownHandler;
pub use trigger::RolloutTrigger;

/// How soon a pass that found the Agent busy (another pass holds its lease)
/// comes back by itself; a holder in this process wakes it as it releases
/// the lease ([`waiters`]), so this only bounds the wait for a holder in
/// another replica.
pub const BUSY_FALLBACK: Duration = Duration::from_secs(2);

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
}

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
