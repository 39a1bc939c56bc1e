//! The pipeline's view of the control-cluster Gateways: the
//! [`GatewayRuntime`] trait the driver calls, its adapter over
//! [`Gateways`](super::Gateways), and [`GatewaysDisabled`] for hubs run
//! without control-cluster Gateways.

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::watch::ReadyListener;

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
    /// The hub's tunnel ingress the Gateway dials (tunnel mode), or `None`
    /// for direct mode.
    pub tunnel: Option<TunnelEndpoint>,
    /// The revision's frozen Configuration (OpenClaw's config document):
    /// rendered into the Gateway's config file when the image is the
    /// OpenClaw runtime.
    pub configuration: serde_json::Value,
    /// The Harness is a Codex app-server (dedicated Codex): the Gateway's
    /// Codex plugin talks to it.
    pub app_server: bool,
}

/// Where Gateways reach the hub's tunnel ingress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelEndpoint {
    /// `http(s)://host:port`.
    pub url: String,
    /// The CA that signed the ingress' certificate (TLS only).
    pub ca_pem: Option<String>,
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
    /// Sends a request through the revision's Gateway to its Harness (the
    /// whole data path); Ok once it is answered with success.
    async fn probe(&self, target: &GatewayTarget) -> Result<(), GatewayFailure>;
    /// One chat turn through the Gateway of `agent`'s `revision` (its
    /// OpenAI chat endpoint, with the runtime's gateway `token`), which its
    /// Harness answers: the model's answer, or why there is none. The
    /// activation's model turn and `agents chat` of a dedicated Agent.
    async fn chat_turn(
        &self,
        namespace_id: &str,
        agent: &str,
        revision: i64,
        token: &str,
        turn: &crate::tunnel::probe::Turn<'_>,
        timeout: std::time::Duration,
    ) -> Result<String, crate::tunnel::probe::ProbeError> {
        let _ = (namespace_id, agent, revision, token, turn, timeout);
        Err(crate::tunnel::probe::ProbeError::Refused {
            reason: clawfed_proto::tunnel::reason::NOT_MANAGED,
            message: "this hub runs no control-cluster Gateways".into(),
        })
    }
    /// Routes to `revision`; fails before changing anything when routing
    /// cannot be done.
    async fn activate(&self, target: &GatewayTarget) -> Result<(), GatewayFailure>;
    /// Deletes the route, then the Gateway runtime (keeps its storage).
    /// `namespace_id` is the tenant's (it names the Gateway namespace).
    async fn stop(
        &self,
        namespace_id: &str,
        tenant: &str,
        agent: &str,
    ) -> Result<(), GatewayFailure>;
    /// Destructive: stops the Gateway, then deletes its storage, transport
    /// Secret, ServiceAccount and NetworkPolicy (a deleted Agent).
    async fn delete(
        &self,
        namespace_id: &str,
        tenant: &str,
        agent: &str,
    ) -> Result<(), GatewayFailure>;
    /// Removes what only `revision` used.
    async fn retire(
        &self,
        namespace_id: &str,
        tenant: &str,
        agent: &str,
        revision: i64,
    ) -> Result<(), GatewayFailure>;
    /// Deletes the tenant's Gateway namespace (its teardown), waiting until
    /// it is gone. A runtime without one has nothing to delete.
    async fn delete_namespace(&self, namespace_id: &str) -> Result<(), GatewayFailure> {
        let _ = namespace_id;
        Ok(())
    }
    /// Starts watching the Gateways, when this runtime can: [`Self::ready`]
    /// then answers from the watch, and `listener` hears of each Gateway
    /// turning Ready (so the pipeline needs no poll). Returns the task to
    /// run until `shutdown`; `None`: nothing to watch.
    fn start_watch(
        &self,
        listener: Arc<dyn ReadyListener>,
        shutdown: CancellationToken,
    ) -> Option<BoxFuture<'static, ()>> {
        let _ = (listener, shutdown);
        None
    }
    /// The Gateway Pod's diagnostics for `revision`: the Pod read and its
    /// bounded checks (`unknown` when there is nothing to read). A runtime
    /// without Pods knows nothing.
    async fn diagnose(
        &self,
        namespace_id: &str,
        agent: &str,
        revision: i64,
    ) -> (Option<String>, Vec<clawfed_proto::diagnostics::Check>) {
        let _ = (namespace_id, agent, revision);
        (
            None,
            vec![clawfed_proto::diagnostics::unknown(
                "gateway",
                "this hub runs no control-cluster Gateways",
            )],
        )
    }
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
            namespace_id: t.namespace_id.clone(),
            agent: t.agent.clone(),
            revision: t.revision,
            revision_id: t.revision_id.clone(),
            image: (!t.image.is_empty()).then(|| t.image.clone()),
            harness_endpoint: clawfed_proto::work::harness::service_url(
                &t.agent,
                t.revision,
                &t.harness_namespace,
                t.harness_port,
            ),
            tunnel_proxy: t.tunnel.as_ref().map(|e| e.url.clone()),
            tunnel_ca_pem: t.tunnel.as_ref().and_then(|e| e.ca_pem.clone()),
            transport,
            runtime: Some(self.runtime_files(t).map_err(gateway_failure)?),
        };
        applied(self.tenant(&t.namespace_id).ensure(&spec).await)
    }

    fn start_watch(
        &self,
        listener: Arc<dyn ReadyListener>,
        shutdown: CancellationToken,
    ) -> Option<BoxFuture<'static, ()>> {
        crate::gateway::Gateways::watch(self, listener, shutdown)
            .map(|run| Box::pin(run) as BoxFuture<'static, ()>)
    }

    async fn ready(&self, t: &GatewayTarget) -> Result<bool, GatewayFailure> {
        self.tenant(&t.namespace_id)
            .is_ready(&t.agent, t.revision)
            .await
            .map(|r| matches!(r, crate::gateway::Readiness::Ready))
            .map_err(gateway_failure)
    }

    async fn probe(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        self.tenant(&t.namespace_id)
            .probe_path(&t.agent, t.revision, clawfed_proto::tunnel::PROBE_PATH)
            .await
            .map_err(gateway_failure)
    }

    async fn chat_turn(
        &self,
        namespace_id: &str,
        agent: &str,
        revision: i64,
        token: &str,
        turn: &crate::tunnel::probe::Turn<'_>,
        timeout: std::time::Duration,
    ) -> Result<String, crate::tunnel::probe::ProbeError> {
        self.tenant(namespace_id)
            .model_turn(agent, revision, token, turn, timeout)
            .await
    }

    async fn activate(&self, t: &GatewayTarget) -> Result<(), GatewayFailure> {
        match self
            .tenant(&t.namespace_id)
            .activate(&t.tenant, &t.agent, t.revision)
            .await
        {
            Ok(crate::gateway::Activation::RoutingDisabled) => {
                tracing::warn!(agent = %t.agent, revision = t.revision, "pipeline.routing_not_configured: gateway.options.privateRouting is unset; the Gateway serves without an HTTPRoute");
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => Err(gateway_failure(e)),
        }
    }

    async fn stop(
        &self,
        namespace_id: &str,
        tenant: &str,
        agent: &str,
    ) -> Result<(), GatewayFailure> {
        applied(self.tenant(namespace_id).stop(tenant, agent).await)
    }

    async fn delete(
        &self,
        namespace_id: &str,
        tenant: &str,
        agent: &str,
    ) -> Result<(), GatewayFailure> {
        applied(self.tenant(namespace_id).delete(tenant, agent).await)
    }

    async fn retire(
        &self,
        namespace_id: &str,
        tenant: &str,
        agent: &str,
        revision: i64,
    ) -> Result<(), GatewayFailure> {
        applied(
            self.tenant(namespace_id)
                .retire_revision(tenant, agent, revision)
                .await,
        )
    }

    async fn delete_namespace(&self, namespace_id: &str) -> Result<(), GatewayFailure> {
        applied(crate::gateway::Gateways::delete_namespace(self, namespace_id).await)
    }

    async fn diagnose(
        &self,
        namespace_id: &str,
        agent: &str,
        revision: i64,
    ) -> (Option<String>, Vec<clawfed_proto::diagnostics::Check>) {
        self.tenant(namespace_id).diagnose(agent, revision).await
    }
}

/// A Gateway call whose answer the pipeline does not need: done, or why not.
fn applied<T>(r: Result<T, crate::gateway::Error>) -> Result<(), GatewayFailure> {
    r.map(|_| ()).map_err(gateway_failure)
}

fn gateway_failure(e: crate::gateway::Error) -> GatewayFailure {
    GatewayFailure {
        reason: format!("{}: {e}", e.reason()),
        transient: e.is_transient(),
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
    async fn probe(&self, _target: &GatewayTarget) -> Result<(), GatewayFailure> {
        Ok(())
    }
    async fn activate(&self, target: &GatewayTarget) -> Result<(), GatewayFailure> {
        tracing::warn!(agent = %target.agent, revision = target.revision, "pipeline.activated_without_gateway: gateway.enabled is false in the hub config, no route programmed");
        Ok(())
    }
    async fn stop(&self, _ns: &str, _tenant: &str, _agent: &str) -> Result<(), GatewayFailure> {
        Ok(())
    }
    async fn delete(&self, _ns: &str, _tenant: &str, _agent: &str) -> Result<(), GatewayFailure> {
        Ok(())
    }
    async fn retire(
        &self,
        _ns: &str,
        _tenant: &str,
        _agent: &str,
        _revision: i64,
    ) -> Result<(), GatewayFailure> {
        Ok(())
    }
}
