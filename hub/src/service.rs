//! The one service layer behind REST and gRPC: authentication, permission
//! checks, validation, audit and the calls into the store. Both APIs are
//! thin adapters over [`Service`], so they cannot drift apart.
//!
//! # Layout
//! - `access.rs`: authentication, permission checks and the audit trail.
//! - `namespaces.rs`, `configurations.rs`, `agents.rs`, `revisions.rs`,
//!   `credentials.rs`, `clusters.rs`: one resource each.
//! - `runtime.rs`: diagnose and chat, the calls that reach an Agent's
//!   running revision (through [`diagnose`] and [`chat`]).
//! - `fleet.rs`: fleet counts and the watch stream.
//! - `quotas.rs`: tenant quotas, their usage and the checks writes carry.
//! - `records.rs`: audit events and work items.
//! - `validate.rs`, `patterns.rs`: input rules and their JSON Schema
//!   spellings.

pub mod chat;
pub mod diagnose;
pub mod patterns;
pub mod validate;

mod access;
mod agents;
mod clusters;
mod configurations;
mod credentials;
mod drain;
mod fleet;
mod namespaces;
mod quotas;
mod records;
mod revisions;
mod runtime;

pub use runtime::MAX_CHAT_MESSAGE;

use std::sync::Arc;

use crate::secrets::SecretBox;
use crate::store::{Store, StoreError};

/// Errors of the service layer; `api::error` maps each to one HTTP status
/// and one gRPC code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// A field of the request is invalid.
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    /// No valid credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials without the permission.
    #[error("{0}")]
    PermissionDenied(String),
    /// The object does not exist (or is not visible to the caller).
    #[error("{0}")]
    NotFound(String),
    /// An object with that name already exists.
    #[error("{0}")]
    AlreadyExists(String),
    /// A stale version: the object changed since the caller read it.
    #[error("{0}")]
    Conflict(String),
    /// The request is valid but the current state does not allow it.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The store is unavailable; retrying later may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// The write would take a tenant past a quota (`quotas`).
    #[error("{0}")]
    QuotaExceeded(crate::quota::QuotaExceeded),
    /// Over a rate limit (`api.rateLimit`): retry after the time it says.
    #[error("{0}")]
    RateLimited(crate::ratelimit::Limited),
    /// A position outside what is kept (a watch cursor older than the
    /// event log): re-list, then watch from the new cursor.
    #[error("{0}")]
    OutOfRange(String),
    /// A bug or corrupt data; details are in the hub's log.
    #[error("internal error")]
    Internal(String),
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        let message = err.to_string();
        match err {
            StoreError::NotFound { .. } => Self::NotFound(message),
            StoreError::AlreadyExists { .. } => Self::AlreadyExists(message),
            StoreError::Conflict { .. } => Self::Conflict(message),
            StoreError::FailedPrecondition(_) => Self::FailedPrecondition(message),
            StoreError::QuotaExceeded(q) => Self::QuotaExceeded(q),
            StoreError::Unavailable(_) => Self::Unavailable("database unavailable".into()),
            StoreError::Database(_)
            | StoreError::Migrate(_)
            | StoreError::Schema(_)
            | StoreError::Corrupt { .. }
            | StoreError::UnsupportedUrl(_) => {
                tracing::error!(error = %message, "store.error");
                Self::Internal(message)
            }
        }
    }
}

/// Result type of the service layer.
pub type Result<T, E = ServiceError> = std::result::Result<T, E>;

/// Installation policy the service enforces.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Reject deploys whose images are not pinned by SHA-256 digest.
    pub require_immutable_digest: bool,
    /// Gateway image used when an Agent names none.
    pub default_gateway_image: String,
    /// Harness image used when an Agent's spec names none; `None`: the spec
    /// must name one.
    pub default_agent_image: Option<String>,
    /// Attempts a work item gets before it is failed.
    pub work_max_attempts: i32,
    /// Deploys and stops queue pipeline work (the link is enabled).
    pub pipeline: bool,
    /// The port Harnesses serve on: the OpenClaw config's `gateway.port`,
    /// which a Configuration may not set otherwise.
    pub harness_port: i32,
    /// A production installation without a Gateway node selector: deploys
    /// that need a dedicated Gateway are refused (the seeds' rule: a real
    /// Gateway runs on the trusted nodes, never beside tenant workloads).
    pub gateway_node_selector_required: bool,
    /// The installation's Harness settings: what a revision requests of
    /// its cluster, for placement at deploy.
    pub workload: crate::compute_driver::WorkloadSettings,
    /// Each tenant's limits (`quotas`).
    pub quotas: crate::quota::QuotaSettings,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            require_immutable_digest: false,
            default_gateway_image: "ghcr.io/openclaw/openclaw-gateway:latest".into(),
            default_agent_image: None,
            work_max_attempts: 8,
            pipeline: false,
            harness_port: clawfed_proto::work::harness::DEFAULT_PORT,
            gateway_node_selector_required: false,
            workload: Default::default(),
            quotas: Default::default(),
        }
    }
}

/// The service layer.
#[derive(Clone)]
pub struct Service {
    store: Arc<dyn Store>,
    policy: Policy,
    /// Seals managed credentials; `None` refuses setting them.
    secrets: Option<Arc<SecretBox>>,
    /// Set once the link and the Gateways run (after the APIs started, so
    /// shared by every clone); unset, diagnose answers `unknown`.
    diagnostics: Arc<std::sync::OnceLock<Arc<dyn diagnose::DiagnosticsSource>>>,
    /// Set once the link runs (like `diagnostics`); unset, chat is
    /// unavailable.
    chat: Arc<std::sync::OnceLock<Arc<dyn chat::ChatSource>>>,
    /// The watch feed, set once the hub started it; unset, watching is
    /// unavailable.
    watch: Arc<std::sync::OnceLock<Arc<crate::watch::Feed>>>,
    /// The audit stream's sequencer, set like `watch`.
    audit: Arc<std::sync::OnceLock<Arc<crate::audit_stream::AuditFeed>>>,
    /// Request rates admitted per caller and per tenant.
    rate_limits: Arc<crate::ratelimit::RateLimits>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("backend", &self.store.backend())
            .field("policy", &self.policy)
            .finish()
    }
}

impl Service {
    /// The installation policy this service enforces.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// A service over `store` enforcing `policy`.
    pub fn new(store: Arc<dyn Store>, policy: Policy) -> Self {
        Self {
            store,
            policy,
            secrets: None,
            diagnostics: Arc::default(),
            chat: Arc::default(),
            watch: Arc::default(),
            audit: Arc::default(),
            rate_limits: Arc::default(),
        }
    }

    /// Admits requests at the rates `limits` allow.
    pub fn with_rate_limits(mut self, limits: Arc<crate::ratelimit::RateLimits>) -> Self {
        self.rate_limits = limits;
        self
    }

    /// Where `watch` streams from (once; later calls are ignored).
    pub fn set_watch(&self, feed: Arc<crate::watch::Feed>) {
        let _ = self.watch.set(feed);
    }

    /// Where the audit stream reads from (once; later calls are ignored).
    pub fn set_audit_feed(&self, feed: Arc<crate::audit_stream::AuditFeed>) {
        let _ = self.audit.set(feed);
    }

    /// Where `diagnose` reads from (once; later calls are ignored).
    pub fn set_diagnostics(&self, source: Arc<dyn diagnose::DiagnosticsSource>) {
        let _ = self.diagnostics.set(source);
    }

    /// Where `chat` sends its turns (once; later calls are ignored).
    pub fn set_chat(&self, source: Arc<dyn chat::ChatSource>) {
        let _ = self.chat.set(source);
    }

    /// Seals managed Agent credentials with `secrets`.
    pub fn with_secrets(mut self, secrets: Arc<SecretBox>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// The store (health checks, metrics).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}
