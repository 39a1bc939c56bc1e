//! Where `agents chat` sends its message: the active revision's OpenClaw
//! runtime, by the path its activation turn took, with the revision's
//! gateway token: for embedded OpenClaw hub -> the revision's spoke over
//! the link's tunnel -> the runtime; for a dedicated Agent its Gateway in
//! the control cluster, which runs the turn on its Harness. The seed asks operators to prove a deployment with a real
//! model call through an Agent; this is that call, without a route to the
//! runtime from the operator's machine.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::link::LinkState;
use crate::model::AgentRevision;
use crate::store::Store;
use crate::tunnel::probe::{self, ProbeError, Turn};

/// How long a chat turn may take (a model turn on a busy runtime may take
/// a minute).
pub const CHAT_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a chat turn has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The runtime could not be reached (its cluster offline, the tunnel
    /// refused or timed out): retrying later may work.
    #[error("the runtime is not reachable: {0}")]
    Unreachable(String),
    /// The runtime answered, but not with a model's answer (its status and
    /// body).
    #[error("{0}")]
    NotAnswered(String),
    /// The gateway token's key could not be read.
    #[error("the gateway token's key: {0}")]
    Key(String),
}

/// Sends one chat turn to a revision's runtime.
#[async_trait]
pub trait ChatSource: Send + Sync + 'static {
    /// `message` in `conversation` to the runtime of `rev`: the answer.
    async fn turn(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
        conversation: &str,
        message: &str,
    ) -> Result<String, ChatError>;
}

/// Through the link's tunnels, or the Agent's Gateway.
pub struct LinkChat {
    pub link: Arc<LinkState>,
    /// The control-cluster Gateways (dedicated Agents).
    pub gateways: Arc<dyn crate::gateway::GatewayRuntime>,
    /// The Harness port the runtime serves on.
    pub harness_port: i32,
}

fn chat_error(e: ProbeError) -> ChatError {
    match e {
        e @ ProbeError::NotAnAnswer { .. } => ChatError::NotAnswered(e.to_string()),
        e => ChatError::Unreachable(e.to_string()),
    }
}

#[async_trait]
impl ChatSource for LinkChat {
    async fn turn(
        &self,
        store: &dyn Store,
        rev: &AgentRevision,
        conversation: &str,
        message: &str,
    ) -> Result<String, ChatError> {
        let turn = Turn {
            user: conversation,
            message,
            agent: "clawfed-hub-chat",
        };
        if rev.spec.harness_kind.has_control_gateway() {
            let namespace_id = store
                .get_namespace(&rev.namespace)
                .await
                .map_err(|e| ChatError::Unreachable(format!("the agent's namespace: {e}")))?
                .id;
            let token = self
                .link
                .runtime_token(store, &rev.id)
                .await
                .map_err(|e| ChatError::Key(e.to_string()))?;
            return self
                .gateways
                .chat_turn(
                    &namespace_id,
                    &rev.agent,
                    rev.number,
                    &token,
                    &turn,
                    CHAT_TIMEOUT,
                )
                .await
                .map_err(chat_error);
        }
        let route = crate::tunnel::route::route_of(store, rev, self.harness_port)
            .await
            .map_err(|r| ChatError::Unreachable(format!("{}: {}", r.reason, r.message)))?;
        let (runtime, transport) = self
            .link
            .revision_tokens(store, &rev.id)
            .await
            .map_err(|e| ChatError::Key(e.to_string()))?;
        let tokens = probe::Tokens {
            runtime: &runtime,
            transport: &transport,
        };
        probe::chat_turn(&self.link.tunnels, &route, &tokens, &turn, CHAT_TIMEOUT)
            .await
            .map_err(chat_error)
    }
}
