//! The data path probe before activation (`pipeline.pathProbe`): the hub's
//! own request through the spoke to a Harness, or a turn through the
//! control-cluster Gateway; a failure is retried until the readiness
//! deadline.

use std::time::Duration;

use super::facts::Gathered;
use super::{Activation, Flow, GatewayFailure, PassResult, Rollout};
use crate::model::{AgentRevision, Namespace};
use crate::store::Store;

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

impl Rollout {
    /// The data path of a revision without a control-cluster Gateway: the
    /// hub's own request through the spoke's link to the Harness.
    pub(super) async fn probe_harness(
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
    pub(super) async fn probe_gateway(
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

    /// The data path probe failed: retried until the readiness deadline,
    /// with the reason on the revision meanwhile; then the revision fails
    /// with it.
    pub(super) async fn path_probe_failed(
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
}
