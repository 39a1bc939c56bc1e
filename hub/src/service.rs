//! The one service layer behind REST and gRPC: authentication, permission
//! checks, validation, audit and the calls into the store. Both APIs are
//! thin adapters over [`Service`], so they cannot drift apart.

pub mod chat;
pub mod diagnose;
pub mod patterns;
pub mod validate;

use std::sync::Arc;

use chrono::Utc;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::auth::{self, Action, Decision, Principal};
use crate::model::{
    Agent, AgentRevision, AuditEvent, BootstrapTokenCreated, Cluster, Configuration, CreateAgent,
    CreateBootstrapToken, CreateConfiguration, CreateNamespace, CredentialMeta, DeployRequest,
    DesiredState, Diagnosis, FleetSummary, Namespace, UpdateAgent, UpdateConfiguration, WorkItem,
    WorkState,
};
use crate::secrets::{SecretBox, SecretValue};
use crate::store::{
    Effects, IdempotencyKey, NewAgent, NewAudit, NewBootstrapToken, NewNamespace, NewRevision,
    NewWork, Store, StoreError, WorkFilter,
};
use crate::worker::kinds;
use clawfed_proto::work::credential::CredentialKind;

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
            StoreError::Unavailable(_) => Self::Unavailable("database unavailable".into()),
            StoreError::Database(_)
            | StoreError::Migrate(_)
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
        }
    }
}

/// Limits of list calls.
const DEFAULT_LIST_LIMIT: i64 = 100;
const MAX_LIST_LIMIT: i64 = 1000;

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
        }
    }

    /// Where `watch` streams from (once; later calls are ignored).
    pub fn set_watch(&self, feed: Arc<crate::watch::Feed>) {
        let _ = self.watch.set(feed);
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

    // ---- authentication and authorization -------------------------------

    /// Resolves a bearer token to its principal.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<Principal> {
        let Some(secret) = bearer else {
            return Err(ServiceError::Unauthenticated(
                "missing bearer token (Authorization: Bearer <token>)".into(),
            ));
        };
        let token = self
            .store
            .find_token(&auth::hash_token(secret))
            .await?
            .ok_or_else(|| ServiceError::Unauthenticated("unknown token".into()))?;
        valid_token(token, "token")
    }

    /// Resolves a request's credentials: its bearer token when it sends
    /// one (a bad one is refused, never passed over), else the API token
    /// its verified client certificate names
    /// ([`auth::client_cert_token_name`]).
    pub async fn authenticate_request(
        &self,
        bearer: Option<&str>,
        client_cert: Option<&std::result::Result<String, auth::ClientCertError>>,
    ) -> Result<Principal> {
        match (bearer, client_cert) {
            (None, Some(Ok(name))) => {
                let token = self.store.find_token_by_name(name).await?.ok_or_else(|| {
                    ServiceError::Unauthenticated(format!(
                        "client certificate CN {name:?} names no API token \
                         (create it with clawfed-hub token create --name {name})"
                    ))
                })?;
                valid_token(token, "the token the client certificate names")
            }
            (None, Some(Err(e))) => Err(ServiceError::Unauthenticated(e.to_string())),
            (bearer, _) => self.authenticate(bearer).await,
        }
    }

    /// Checks a read; reads are not audited.
    fn check_read(&self, p: &Principal, action: Action, namespace: Option<&str>) -> Result<()> {
        match p.permits(action, namespace) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(ServiceError::PermissionDenied(reason)),
        }
    }

    /// Checks a mutation; a denial is audited.
    async fn check_mutation(
        &self,
        p: &Principal,
        action: Action,
        namespace: Option<&str>,
        what: &str,
        target: &str,
    ) -> Result<()> {
        match p.permits(action, namespace) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => {
                let event = audit(p, what, namespace, target, "denied", Some(reason.clone()));
                if let Err(e) = self.store.append_audit(&event).await {
                    tracing::warn!(error = %e, "audit.append_failed");
                }
                Err(ServiceError::PermissionDenied(reason))
            }
        }
    }

    /// Audits a mutation that failed after it was authorized. (Successful
    /// mutations are audited inside their own transaction.)
    async fn record<T>(
        &self,
        p: &Principal,
        what: &str,
        namespace: Option<&str>,
        target: &str,
        result: Result<T>,
    ) -> Result<T> {
        if let Err(err) = &result
            && !matches!(err, ServiceError::Unavailable(_))
        {
            let event = audit(p, what, namespace, target, "error", Some(err.to_string()));
            if let Err(e) = self.store.append_audit(&event).await {
                tracing::warn!(error = %e, "audit.append_failed");
            }
        }
        result
    }

    // ---- namespaces ------------------------------------------------------

    /// Creates a tenant and queues its provisioning.
    pub async fn create_namespace(&self, p: &Principal, req: CreateNamespace) -> Result<Namespace> {
        let target = format!("namespaces/{}", req.name);
        self.check_mutation(p, Action::Installation, None, "namespace.create", &target)
            .await?;
        let result = async {
            validate::dns_label("name", &req.name)?;
            let display_name = req.display_name.clone().unwrap_or_else(|| req.name.clone());
            validate::display_name("displayName", &display_name)?;
            if let Some(adopt) = &req.adopt_namespace {
                validate::dns_label("adoptNamespace", adopt)?;
            }
            let id = Uuid::now_v7().to_string();
            let data_plane_namespace = req
                .adopt_namespace
                .clone()
                .unwrap_or_else(|| clawfed_proto::naming::data_plane_namespace(&id));
            let new = NewNamespace {
                id: id.clone(),
                name: req.name.clone(),
                display_name,
                data_plane_namespace: data_plane_namespace.clone(),
                adopted: req.adopt_namespace.is_some(),
            };
            let fx = Effects {
                audit: audit(p, "namespace.create", Some(&req.name), &target, "ok", None),
                work: vec![NewWork {
                    kind: kinds::NAMESPACE_PROVISION.into(),
                    namespace_id: Some(id.clone()),
                    target: id,
                    payload: serde_json::json!({ "dataPlaneNamespace": data_plane_namespace }),
                    requested_by: Some(p.token_id.clone()),
                    max_attempts: self.policy.work_max_attempts,
                    run_at: Utc::now(),
                    coalesce: false,
                }],
            };
            Ok(self.store.create_namespace(&new, &fx).await?)
        }
        .await;
        self.record(p, "namespace.create", Some(&req.name), &target, result)
            .await
    }

    /// The namespaces the caller may see.
    pub async fn list_namespaces(&self, p: &Principal) -> Result<Vec<Namespace>> {
        let list = if p.is_installation_admin() {
            self.store.list_namespaces(None).await?
        } else {
            match p.namespace.as_deref() {
                Some(ns) => self.store.list_namespaces(Some(ns)).await?,
                None => Vec::new(),
            }
        };
        let mut out = Vec::with_capacity(list.len());
        for ns in list {
            out.push(self.with_cluster_status(ns).await?);
        }
        Ok(out)
    }

    /// One namespace.
    pub async fn get_namespace(&self, p: &Principal, name: &str) -> Result<Namespace> {
        self.check_read(p, Action::Read, Some(name))?;
        let ns = self.store.get_namespace(name).await?;
        self.with_cluster_status(ns).await
    }

    /// `ns` with where it stands in each cluster it was sent to, as their
    /// spokes reported it.
    async fn with_cluster_status(&self, mut ns: Namespace) -> Result<Namespace> {
        let target = clawfed_proto::work::target::namespace(&ns.id);
        ns.clusters = self
            .store
            .target_reports(&target, crate::link::report::WORK_RESULT)
            .await?
            .into_iter()
            .map(|(cluster, report)| {
                crate::link::report::namespace_status(cluster, report.as_ref())
            })
            .collect();
        Ok(ns)
    }

    /// Deletes an empty namespace. With the pipeline on, the namespace is
    /// torn down in its execution clusters first (provider cleanup first;
    /// a failure keeps it): returns false when that teardown was queued,
    /// true when the namespace is already gone.
    pub async fn delete_namespace(&self, p: &Principal, name: &str) -> Result<bool> {
        let target = format!("namespaces/{name}");
        let what = "namespace.delete";
        self.check_mutation(p, Action::DeleteNamespace, Some(name), what, &target)
            .await?;
        let result = async {
            if !self.policy.pipeline {
                let fx = Effects::audit(audit(p, what, Some(name), &target, "ok", None));
                self.store.delete_namespace(name, &fx).await?;
                return Ok(true);
            }
            let ns = self.store.get_namespace(name).await?;
            let agents = self.store.list_agents(name).await?;
            if !agents.is_empty() {
                return Err(ServiceError::FailedPrecondition(format!(
                    "namespace {name:?} still has {} agent(s); delete them first",
                    agents.len()
                )));
            }
            let fx = Effects {
                audit: audit(
                    p,
                    what,
                    Some(name),
                    &target,
                    "ok",
                    Some("teardown queued".into()),
                ),
                work: vec![crate::worker::kinds::teardown_work(
                    &ns.id,
                    Some(p.token_id.clone()),
                    self.policy.work_max_attempts,
                )],
            };
            self.store
                .set_namespace_state(&ns.id, crate::model::NamespaceState::Deleting, None, &fx)
                .await?;
            Ok(false)
        }
        .await;
        self.record(p, what, Some(name), &target, result).await
    }

    // ---- configurations --------------------------------------------------

    /// Creates a configuration document.
    pub async fn create_configuration(
        &self,
        p: &Principal,
        ns: &str,
        req: CreateConfiguration,
    ) -> Result<Configuration> {
        let target = format!("configurations/{}", req.name);
        let what = "configuration.create";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::dns_label("name", &req.name)?;
            validate::configuration_data("data", &req.data)?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .create_configuration(ns, &req.name, &req.data, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Configurations of a namespace.
    pub async fn list_configurations(&self, p: &Principal, ns: &str) -> Result<Vec<Configuration>> {
        self.check_read(p, Action::Read, Some(ns))?;
        self.store.get_namespace(ns).await?;
        Ok(self.store.list_configurations(ns).await?)
    }

    /// One configuration.
    pub async fn get_configuration(
        &self,
        p: &Principal,
        ns: &str,
        name: &str,
    ) -> Result<Configuration> {
        self.check_read(p, Action::Read, Some(ns))?;
        Ok(self.store.get_configuration(ns, name).await?)
    }

    /// Replaces a configuration document (optimistic concurrency).
    pub async fn update_configuration(
        &self,
        p: &Principal,
        ns: &str,
        name: &str,
        req: UpdateConfiguration,
    ) -> Result<Configuration> {
        let target = format!("configurations/{name}");
        let what = "configuration.update";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::configuration_data("data", &req.data)?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .update_configuration(ns, name, &req.data, req.version, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Deletes a configuration.
    pub async fn delete_configuration(&self, p: &Principal, ns: &str, name: &str) -> Result<()> {
        let target = format!("configurations/{name}");
        let what = "configuration.delete";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
        let result = self
            .store
            .delete_configuration(ns, name, &fx)
            .await
            .map_err(Into::into);
        self.record(p, what, Some(ns), &target, result).await
    }

    // ---- agents ----------------------------------------------------------

    /// Creates an Agent draft.
    pub async fn create_agent(&self, p: &Principal, ns: &str, req: CreateAgent) -> Result<Agent> {
        let target = format!("agents/{}", req.name);
        let what = "agent.create";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::agent_name("name", &req.name)?;
            validate::agent_spec(&req.spec, self.policy.default_agent_image.is_some())?;
            self.check_configuration_exists(ns, req.spec.configuration.as_deref())
                .await?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            let new = NewAgent {
                namespace: ns.to_owned(),
                name: req.name.clone(),
                spec: req.spec,
            };
            Ok(self.store.create_agent(&new, &fx).await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    async fn check_configuration_exists(&self, ns: &str, name: Option<&str>) -> Result<()> {
        let Some(name) = name else { return Ok(()) };
        match self.store.get_configuration(ns, name).await {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => Err(ServiceError::InvalidArgument {
                field: "spec.configuration".into(),
                reason: format!("configuration {name:?} does not exist in namespace {ns:?}"),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Agents of a namespace.
    pub async fn list_agents(&self, p: &Principal, ns: &str) -> Result<Vec<Agent>> {
        self.check_read(p, Action::Read, Some(ns))?;
        self.store.get_namespace(ns).await?;
        Ok(self.store.list_agents(ns).await?)
    }

    /// One Agent.
    pub async fn get_agent(&self, p: &Principal, ns: &str, name: &str) -> Result<Agent> {
        self.check_read(p, Action::Read, Some(ns))?;
        Ok(self.store.get_agent(ns, name).await?)
    }

    /// Replaces an Agent's draft spec. Running revisions are not affected.
    pub async fn update_agent(
        &self,
        p: &Principal,
        ns: &str,
        name: &str,
        req: UpdateAgent,
    ) -> Result<Agent> {
        let target = format!("agents/{name}");
        let what = "agent.update";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            validate::agent_spec(&req.spec, self.policy.default_agent_image.is_some())?;
            self.check_configuration_exists(ns, req.spec.configuration.as_deref())
                .await?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .update_agent(ns, name, &req.spec, req.version, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Deletes a stopped Agent.
    pub async fn delete_agent(&self, p: &Principal, ns: &str, name: &str) -> Result<()> {
        let target = format!("agents/{name}");
        let what = "agent.delete";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let mut fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
        if self.policy.pipeline {
            // Its history stays in the store; its runtime state in the
            // clusters follows pipeline.retainOnAgentDelete.
            let namespace = self.store.get_namespace(ns).await?;
            fx.work.push(crate::worker::kinds::delete_work(
                name,
                &namespace.id,
                Some(p.token_id.clone()),
                self.policy.work_max_attempts,
            ));
        }
        let result = self
            .store
            .delete_agent(ns, name, &fx)
            .await
            .map_err(Into::into);
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Freezes the Agent's draft (or, for a rollback, an earlier revision)
    /// into a new immutable revision.
    pub async fn deploy(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        req: DeployRequest,
        idempotency_key: Option<String>,
    ) -> Result<(AgentRevision, bool)> {
        let target = format!("agents/{agent}");
        let what = if req.from_revision.is_some() {
            "agent.rollback"
        } else {
            "agent.deploy"
        };
        self.check_mutation(p, Action::Deploy, Some(ns), what, &target)
            .await?;
        let result = self.admit(p, ns, agent, &req, idempotency_key, what).await;
        self.record(p, what, Some(ns), &target, result).await
    }

    async fn admit(
        &self,
        p: &Principal,
        ns: &str,
        agent_name: &str,
        req: &DeployRequest,
        idempotency_key: Option<String>,
        what: &str,
    ) -> Result<(AgentRevision, bool)> {
        if let Some(key) = &idempotency_key {
            validate::idempotency_key("Idempotency-Key", key)?;
        }
        let agent = self.store.get_agent(ns, agent_name).await?;
        let (spec, configuration) = match req.from_revision {
            Some(number) => {
                let earlier = match self.store.get_revision(ns, agent_name, number).await {
                    Err(StoreError::NotFound { .. }) => {
                        return Err(ServiceError::InvalidArgument {
                            field: "fromRevision".into(),
                            reason: format!("agent {agent_name:?} has no revision {number}"),
                        });
                    }
                    other => other?,
                };
                (earlier.spec, earlier.configuration)
            }
            None => {
                let configuration = match &agent.spec.configuration {
                    Some(name) => match self.store.get_configuration(ns, name).await {
                        Ok(c) => c.data,
                        Err(StoreError::NotFound { .. }) => {
                            return Err(ServiceError::FailedPrecondition(format!(
                                "spec.configuration names {name:?}, which no longer exists"
                            )));
                        }
                        Err(e) => return Err(e.into()),
                    },
                    None => serde_json::Value::Null,
                };
                (agent.spec.clone(), configuration)
            }
        };
        // An OpenClaw runtime gets the document as its config file: a key
        // clawfed owns there is refused now, not found wrong at run time.
        if spec.harness_kind.is_openclaw()
            && let Some(conflict) =
                crate::runtime_config::conflicts(&configuration, self.policy.harness_port).first()
        {
            return Err(ServiceError::InvalidArgument {
                field: format!(
                    "configuration {:?}: {}",
                    spec.configuration.as_deref().unwrap_or_default(),
                    conflict.key
                ),
                reason: conflict.to_string(),
            });
        }
        if self.policy.gateway_node_selector_required && spec.harness_kind.has_control_gateway() {
            return Err(ServiceError::FailedPrecondition(format!(
                "the installation is in production mode and sets no \
                 drivers.compute.configuration.runtime.gatewayNodeSelector \
                 (gateway.options.nodeSelector): a {} Agent's Gateway must run on the \
                 trusted nodes it selects",
                spec.harness_kind.as_str()
            )));
        }
        let gateway_image = spec
            .gateway_image
            .clone()
            .unwrap_or_else(|| self.policy.default_gateway_image.clone());
        // An empty spec image is the installation's agent image (admitted
        // only while one is configured), frozen into the revision here.
        let harness_image = match (spec.image.as_str(), &self.policy.default_agent_image) {
            ("", Some(default)) => default.clone(),
            ("", None) => {
                return Err(ServiceError::InvalidArgument {
                    field: "spec.image".into(),
                    reason: "must not be empty: the installation sets no default agent image \
                             (drivers.compute.configuration.images.agent)"
                        .into(),
                });
            }
            (image, _) => image.to_owned(),
        };
        let images = vec![
            validate::image_ref("harness", &harness_image),
            validate::image_ref("gateway", &gateway_image),
        ];
        // The spoke's and the Gateways' rule (`@sha256:` and 64 hex digits),
        // so a deploy admitted here is never refused there.
        if self.policy.require_immutable_digest
            && let Some(unpinned) = images
                .iter()
                .find(|i| clawfed_proto::work::check_image_digest(&i.reference).is_err())
        {
            let field = if unpinned.role == "harness" {
                "spec.image"
            } else {
                "spec.gatewayImage"
            };
            return Err(ServiceError::InvalidArgument {
                field: field.into(),
                reason: format!(
                    "policy.requireImmutableDigest is set: {:?} must be pinned as \
                     name@sha256:<64 hex digits>",
                    unpinned.reference
                ),
            });
        }
        let resolved_cluster = self.resolve_cluster(&spec).await?;
        let idempotency = idempotency_key.map(|key| IdempotencyKey {
            fingerprint: fingerprint(agent_name, req),
            key,
        });
        let new = NewRevision {
            id: Uuid::now_v7().to_string(),
            namespace: ns.to_owned(),
            agent: agent_name.to_owned(),
            agent_version: agent.version,
            spec,
            configuration,
            images,
            resolved_cluster,
            rolled_back_from: req.from_revision,
            idempotency,
            requested_by: Some(p.token_id.clone()),
        };
        let target = format!("agents/{agent_name}");
        let mut fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
        if self.policy.pipeline {
            let namespace = self.store.get_namespace(ns).await?;
            fx.work.push(crate::worker::kinds::rollout_work(
                &new.id,
                &namespace.id,
                Some(p.token_id.clone()),
                Utc::now(),
                self.policy.work_max_attempts,
            ));
        }
        let deployed = self.store.deploy(&new, &fx).await?;
        Ok((deployed.revision, deployed.created))
    }

    /// An explicit placement must name an enrolled cluster; otherwise the
    /// first online cluster matching the selector, or none yet (the
    /// pipeline places it when a cluster is available).
    async fn resolve_cluster(&self, spec: &crate::model::AgentSpec) -> Result<Option<String>> {
        let needs = crate::pipeline::needs(spec);
        if let Some(name) = &spec.placement.cluster {
            return match self.store.get_cluster(name).await {
                Ok(c) => match crate::pipeline::cannot_serve(&c, needs) {
                    None => Ok(Some(c.name)),
                    Some(why) => Err(ServiceError::FailedPrecondition(format!(
                        "spec.placement.cluster: {why}"
                    ))),
                },
                Err(StoreError::NotFound { .. }) => Err(ServiceError::FailedPrecondition(format!(
                    "spec.placement.cluster names {name:?}, which is not enrolled"
                ))),
                Err(e) => Err(e.into()),
            };
        }
        let clusters = self.store.list_clusters().await?;
        // A refusal is left to the pipeline, which fails the revision naming
        // why (another cluster may come online before it places).
        Ok(
            match crate::pipeline::choose_cluster(
                &clusters,
                &spec.placement.cluster_selector,
                needs,
            ) {
                crate::pipeline::Placement::Chosen(c) => Some(c.name.clone()),
                _ => None,
            },
        )
    }

    /// Stops an Agent: its desired state becomes `stopped`.
    pub async fn stop(&self, p: &Principal, ns: &str, agent: &str) -> Result<Agent> {
        let target = format!("agents/{agent}");
        let what = "agent.stop";
        self.check_mutation(p, Action::Deploy, Some(ns), what, &target)
            .await?;
        let mut fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
        if self.policy.pipeline {
            let namespace = self.store.get_namespace(ns).await?;
            fx.work.push(crate::worker::kinds::stop_work(
                agent,
                &namespace.id,
                Some(p.token_id.clone()),
                self.policy.work_max_attempts,
            ));
        }
        let result = self
            .store
            .set_desired_state(ns, agent, DesiredState::Stopped, &fx)
            .await
            .map_err(Into::into);
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Revisions of an Agent, oldest first.
    pub async fn list_revisions(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
    ) -> Result<Vec<AgentRevision>> {
        self.check_read(p, Action::Read, Some(ns))?;
        let mut revisions = self.store.list_revisions(ns, agent).await?;
        self.attach_readiness(ns, &mut revisions).await?;
        Ok(revisions)
    }

    /// The spoke's latest readiness verdict for each of `revisions` (all of
    /// namespace `ns`), from the cluster each is placed on.
    async fn attach_readiness(&self, ns: &str, revisions: &mut [AgentRevision]) -> Result<()> {
        use crate::link::report::{READINESS, ReadinessReport};
        if revisions.iter().all(|r| r.resolved_cluster.is_none()) {
            return Ok(());
        }
        let ns_id = self.store.get_namespace(ns).await?.id;
        let cluster_ids: std::collections::HashMap<String, String> = self
            .store
            .list_clusters()
            .await?
            .into_iter()
            .map(|c| (c.name, c.id))
            .collect();
        for rev in revisions {
            let Some(cluster_id) = rev
                .resolved_cluster
                .as_ref()
                .and_then(|c| cluster_ids.get(c))
            else {
                continue;
            };
            let target = clawfed_proto::work::target::harness(&ns_id, &rev.agent, rev.number);
            rev.readiness = self
                .store
                .get_report(cluster_id, &target, READINESS)
                .await?
                .and_then(|r| serde_json::from_value::<ReadinessReport>(r.body).ok())
                .filter(|r| r.revision_id.is_empty() || r.revision_id == rev.id);
            rev.drift = self
                .store
                .get_report(cluster_id, &target, crate::link::report::DRIFT)
                .await?
                .and_then(|r| serde_json::from_value(r.body).ok());
        }
        Ok(())
    }

    /// One revision.
    pub async fn get_revision(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        number: i64,
    ) -> Result<AgentRevision> {
        self.check_read(p, Action::Read, Some(ns))?;
        let mut rev = self.store.get_revision(ns, agent, number).await?;
        self.attach_readiness(ns, std::slice::from_mut(&mut rev))
            .await?;
        Ok(rev)
    }

    // ---- credentials ------------------------------------------------------

    /// Sets or replaces an Agent's managed credential of `kind`. Write-only:
    /// the value is sealed before it reaches the store, and the answer, the
    /// audit record and any error carry metadata only. The running revision
    /// keeps what it froze; the next deploy carries the new value.
    pub async fn set_credential(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        kind: &str,
        value: SecretValue,
    ) -> Result<CredentialMeta> {
        let target = format!("agents/{agent}/credentials/{kind}");
        let what = "agent.credential.set";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            let kind = credential_kind(kind)?;
            credential_value("value", &value)?;
            let a = self.store.get_agent(ns, agent).await?;
            let harness = a.spec.harness_kind.as_str();
            if !kind.allowed_for(harness) {
                return Err(ServiceError::InvalidArgument {
                    field: "kind".into(),
                    reason: format!(
                        "{kind} credentials are accepted only for dedicated-codex Agents; \
                         agent {agent:?} is {harness}"
                    ),
                });
            }
            let secrets = self.secrets.as_ref().ok_or_else(|| {
                ServiceError::FailedPrecondition(
                    "this hub has no secrets key (secrets.keyFile or secrets.keySecret)".into(),
                )
            })?;
            let sealed = secrets
                .seal_credential(&a.id, kind, &value)
                .map_err(|e| ServiceError::Internal(e.to_string()))?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self
                .store
                .set_agent_credential(&a.id, kind, &sealed, &fx)
                .await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// Deletes an Agent's managed credential of `kind` (revisions keep what
    /// they froze).
    pub async fn delete_credential(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        kind: &str,
    ) -> Result<()> {
        let target = format!("agents/{agent}/credentials/{kind}");
        let what = "agent.credential.delete";
        self.check_mutation(p, Action::EditDraft, Some(ns), what, &target)
            .await?;
        let result = async {
            let kind = credential_kind(kind)?;
            let a = self.store.get_agent(ns, agent).await?;
            let fx = Effects::audit(audit(p, what, Some(ns), &target, "ok", None));
            Ok(self.store.delete_agent_credential(&a.id, kind, &fx).await?)
        }
        .await;
        self.record(p, what, Some(ns), &target, result).await
    }

    /// An Agent's managed credentials: kind, version and when each was set,
    /// never a value.
    pub async fn list_credentials(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
    ) -> Result<Vec<CredentialMeta>> {
        self.check_read(p, Action::Read, Some(ns))?;
        let a = self.store.get_agent(ns, agent).await?;
        let stored = self.store.list_agent_credentials(&a.id).await?;
        Ok(stored.iter().map(|c| c.meta()).collect())
    }

    /// The credentials revision `number` froze at deploy (metadata only).
    pub async fn list_revision_credentials(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        number: i64,
    ) -> Result<Vec<CredentialMeta>> {
        self.check_read(p, Action::Read, Some(ns))?;
        let rev = self.store.get_revision(ns, agent, number).await?;
        let stored = self.store.revision_credentials(&rev.id).await?;
        Ok(stored.iter().map(|c| c.meta()).collect())
    }

    /// Bounded diagnostics of the Agent's active (or else latest) revision:
    /// its Harness Pod through the revision's spoke, its Gateway Pod in the
    /// control cluster. A read, authorized for the exact Agent; it never
    /// changes the deployment's status.
    pub async fn diagnose(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        revision: Option<i64>,
    ) -> Result<Diagnosis> {
        self.check_read(p, Action::Read, Some(ns))?;
        let a = self.store.get_agent(ns, agent).await?;
        // The chosen revision (authorized with its Agent: the same tenant),
        // else the active one, else the latest.
        let number = match revision {
            Some(n) if n < 1 => {
                return Err(ServiceError::InvalidArgument {
                    field: "revision".into(),
                    reason: format!("{n} is not a revision number (1 or more)"),
                });
            }
            Some(n) => n,
            None => match a.active_revision.or(a.latest_revision) {
                Some(n) => n,
                None => {
                    return Err(ServiceError::FailedPrecondition(format!(
                        "agent {agent} has no revision to diagnose (deploy it first)"
                    )));
                }
            },
        };
        let rev = match self.store.get_revision(ns, agent, number).await {
            Err(StoreError::NotFound { .. }) if revision.is_some() => {
                return Err(ServiceError::InvalidArgument {
                    field: "revision".into(),
                    reason: format!("agent {agent:?} has no revision {number}"),
                });
            }
            other => other?,
        };
        let source = self.diagnostics.get().cloned();
        let cluster_id = match &rev.resolved_cluster {
            Some(name) => self
                .store
                .list_clusters()
                .await?
                .into_iter()
                .find(|c| &c.name == name)
                .map(|c| c.id),
            None => None,
        };
        let ns_id = self.store.get_namespace(ns).await?.id;
        let harness = match (&source, &cluster_id) {
            (Some(s), Some(cid)) => {
                let target = clawfed_proto::work::target::harness(&ns_id, agent, number);
                s.harness(cid, &target, &rev.id).await
            }
            (None, _) => diagnose::unknown("harness", "this hub runs no spoke link"),
            (_, None) => diagnose::unknown("harness", "the revision is not placed on a cluster"),
        };
        let gateway = match &source {
            Some(s) => s.gateway(&ns_id, agent, number).await,
            None => diagnose::unknown("gateway", "this hub runs no control-cluster Gateways"),
        };
        Ok(Diagnosis {
            namespace: ns.to_owned(),
            agent: agent.to_owned(),
            revision: number,
            revision_id: rev.id,
            cluster: rev.resolved_cluster,
            harness,
            gateway,
        })
    }

    /// One chat message to the active revision's OpenClaw runtime, sent by
    /// the hub through the revision's spoke ([`chat`]): the model's answer.
    /// Needs deploy rights (a turn costs a model call) and is audited as
    /// `agent.chat` without the message.
    pub async fn chat(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        req: crate::model::ChatRequest,
    ) -> Result<crate::model::ChatAnswer> {
        self.check_mutation(p, Action::Deploy, Some(ns), "agent.chat", agent)
            .await?;
        let invalid = |field: &str, reason: &str| ServiceError::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        };
        if req.message.trim().is_empty() || req.message.len() > MAX_CHAT_MESSAGE {
            return Err(invalid(
                "message",
                &format!("must be 1 to {MAX_CHAT_MESSAGE} bytes of text"),
            ));
        }
        let conversation = match req.conversation {
            Some(c) if !is_conversation_id(&c) => {
                return Err(invalid(
                    "conversation",
                    "must be 1 to 128 characters of A-Z a-z 0-9 . _ : -",
                ));
            }
            Some(c) => c,
            None => default_conversation(&p.token_name),
        };
        let a = self.store.get_agent(ns, agent).await?;
        let Some(number) = a.active_revision else {
            return Err(ServiceError::FailedPrecondition(format!(
                "agent {agent} has no active revision (deploy it and wait until it is active)"
            )));
        };
        let rev = self.store.get_revision(ns, agent, number).await?;
        let source = self.chat.get().cloned().ok_or_else(|| {
            ServiceError::Unavailable("this hub runs no spoke link to reach runtimes".into())
        })?;
        let started = std::time::Instant::now();
        let outcome = source
            .turn(&*self.store, &rev, &conversation, &req.message)
            .await;
        let elapsed_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let (result, detail) = match &outcome {
            Ok(_) => ("ok", format!("revision {number}, {elapsed_ms} ms")),
            Err(e) => ("failed", format!("revision {number}: {e}")),
        };
        let event = audit(p, "agent.chat", Some(ns), agent, result, Some(detail));
        if let Err(e) = self.store.append_audit(&event).await {
            tracing::warn!(error = %e, "audit.append_failed");
        }
        let answer = outcome.map_err(|e| match e {
            chat::ChatError::Unreachable(_) | chat::ChatError::Key(_) => {
                ServiceError::Unavailable(e.to_string())
            }
            chat::ChatError::NotAnswered(_) => ServiceError::FailedPrecondition(e.to_string()),
        })?;
        Ok(crate::model::ChatAnswer {
            namespace: ns.to_owned(),
            agent: agent.to_owned(),
            revision: number,
            conversation,
            answer,
            elapsed_ms,
        })
    }

    // ---- clusters, fleet, audit, work ---------------------------------------

    /// Enrolled clusters: every one for installation admins; for a tenant
    /// token only those its namespace's revisions are placed on, without
    /// the installation-admin data (certificate serials, outbox depth).
    pub async fn list_clusters(&self, p: &Principal) -> Result<Vec<Cluster>> {
        self.check_read(p, Action::Read, None)?;
        let mut clusters = self.store.list_clusters().await?;
        match self.visible_clusters(p).await? {
            None => self.with_outbox_depth(&mut clusters).await?,
            Some(visible) => {
                clusters.retain(|c| visible.contains(&c.name));
                clusters.iter_mut().for_each(tenant_view);
            }
        }
        Ok(clusters)
    }

    /// One cluster; a cluster a tenant may not see is "not found".
    pub async fn get_cluster(&self, p: &Principal, name: &str) -> Result<Cluster> {
        self.check_read(p, Action::Read, None)?;
        let mut cluster = self.store.get_cluster(name).await?;
        match self.visible_clusters(p).await? {
            None => {
                self.with_outbox_depth(std::slice::from_mut(&mut cluster))
                    .await?
            }
            Some(visible) if visible.contains(&cluster.name) => tenant_view(&mut cluster),
            Some(_) => {
                return Err(StoreError::NotFound {
                    kind: "cluster",
                    name: name.to_owned(),
                }
                .into());
            }
        }
        Ok(cluster)
    }

    /// `None` when the caller sees every cluster (installation admins);
    /// otherwise the names of the clusters its namespace's revisions are
    /// placed on.
    async fn visible_clusters(&self, p: &Principal) -> Result<Option<Vec<String>>> {
        if p.is_installation_admin() {
            return Ok(None);
        }
        Ok(Some(match p.namespace.as_deref() {
            Some(ns) => self.store.placed_clusters(ns).await?,
            None => Vec::new(),
        }))
    }

    async fn with_outbox_depth(&self, clusters: &mut [Cluster]) -> Result<()> {
        let depths: std::collections::HashMap<String, i64> = self
            .store
            .outbox_summary()
            .await?
            .into_iter()
            .map(|s| (s.cluster_id, s.depth))
            .collect();
        for c in clusters.iter_mut() {
            c.outbox_depth = Some(depths.get(&c.id).copied().unwrap_or(0));
        }
        self.with_certificate_expiry(clusters).await
    }

    /// Fills the installation-admin view's certificate expiry.
    async fn with_certificate_expiry(&self, clusters: &mut [Cluster]) -> Result<()> {
        let expiry = self.store.certificate_expiry().await?;
        for c in clusters {
            c.certificate_expires_at = expiry.get(&c.id).copied();
        }
        Ok(())
    }

    /// Creates a single-use, expiring bootstrap token for enrolling
    /// `cluster_name` (installation admins).
    pub async fn create_bootstrap_token(
        &self,
        p: &Principal,
        cluster_name: &str,
        req: CreateBootstrapToken,
    ) -> Result<BootstrapTokenCreated> {
        const MAX_TTL: i64 = 7 * 24 * 3600;
        let target = format!("clusters/{cluster_name}");
        let what = "cluster.token.create";
        self.check_mutation(p, Action::Installation, None, what, &target)
            .await?;
        let result = async {
            validate::dns_label("clusterName", cluster_name)?;
            let ttl = req.ttl_seconds.unwrap_or(3600);
            if !(1..=MAX_TTL).contains(&ttl) {
                return Err(ServiceError::InvalidArgument {
                    field: "ttlSeconds".into(),
                    reason: format!("must be between 1 and {MAX_TTL}"),
                });
            }
            let (secret, hash) = crate::link::enroll::mint_bootstrap_token();
            let detail = req.reenroll.then(|| "re-enrollment allowed".to_owned());
            let fx = Effects::audit(audit(p, what, None, &target, "ok", detail));
            let token = self
                .store
                .create_bootstrap_token(
                    &NewBootstrapToken {
                        cluster_name: cluster_name.to_owned(),
                        hash,
                        reenroll: req.reenroll,
                        require_approval: req.require_approval,
                        created_by: p.actor(),
                        expires_at: Utc::now() + chrono::Duration::seconds(ttl),
                    },
                    &fx,
                )
                .await?;
            Ok(BootstrapTokenCreated {
                cluster_name: token.cluster_name,
                token: secret,
                expires_at: token.expires_at,
                reenroll: token.reenroll,
            })
        }
        .await;
        self.record(p, what, None, &target, result).await
    }

    /// Approves a spoke's pending enrollment (tokens created with
    /// `requireApproval`).
    pub async fn approve_cluster(&self, p: &Principal, name: &str) -> Result<()> {
        let target = format!("clusters/{name}");
        let what = "cluster.approve";
        self.check_mutation(p, Action::Installation, None, what, &target)
            .await?;
        let fx = Effects::audit(audit(p, what, None, &target, "ok", None));
        let result = match self.store.approve_enrollment(name, Utc::now(), &fx).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ServiceError::NotFound(format!(
                "no enrollment of cluster {name:?} is awaiting approval"
            ))),
            Err(e) => Err(e.into()),
        };
        self.record(p, what, None, &target, result).await
    }

    /// Revokes a cluster: its certificates are denied and its live stream
    /// closes; coming back needs re-enrollment.
    pub async fn revoke_cluster(&self, p: &Principal, name: &str) -> Result<Cluster> {
        let target = format!("clusters/{name}");
        let what = "cluster.revoke";
        self.check_mutation(p, Action::Installation, None, what, &target)
            .await?;
        let fx = Effects::audit(audit(p, what, None, &target, "ok", None));
        let result = self
            .store
            .revoke_cluster(name, Utc::now(), &fx)
            .await
            .map_err(Into::into);
        self.record(p, what, None, &target, result).await
    }

    /// Fleet counts over what the caller may read: a tenant's cover its own
    /// namespace and the clusters its revisions are placed on.
    pub async fn fleet_summary(&self, p: &Principal) -> Result<FleetSummary> {
        let scope = if p.is_installation_admin() {
            None
        } else {
            Some(p.namespace.as_deref().unwrap_or_default())
        };
        Ok(self.store.fleet_summary(scope).await?)
    }

    /// A stream of watch events after `cursor` (see
    /// [`crate::watch::start_after`]) that the caller may see: everything
    /// for installation admins; for a tenant token its own namespace's
    /// events and those of the clusters its revisions are placed on. With
    /// `follow` false the stream ends once it has caught up.
    pub async fn watch(
        &self,
        p: &Principal,
        cursor: Option<i64>,
        follow: bool,
    ) -> Result<crate::watch::Subscription> {
        use crate::watch::{CursorError, Scope};
        self.check_read(p, Action::Read, p.namespace.as_deref())?;
        let feed = self
            .watch
            .get()
            .ok_or_else(|| ServiceError::Unavailable("the watch feed is not running".into()))?;
        let scope = if p.is_installation_admin() {
            Scope::All
        } else {
            let own = self.own_namespace(p).await?;
            let placed = self.store.placed_clusters(&own.name).await?;
            Scope::tenant(own.name, own.id, placed)
        };
        let bounds = self.store.event_bounds().await?;
        let after = crate::watch::start_after(cursor, bounds).map_err(|e| match e {
            CursorError::Negative(_) => ServiceError::InvalidArgument {
                field: "cursor".into(),
                reason: e.to_string(),
            },
            CursorError::TooOld { .. } | CursorError::Ahead { .. } => {
                ServiceError::OutOfRange(e.to_string())
            }
        })?;
        let guard = token_guard(self.store.clone(), p, feed.token_recheck());
        Ok(feed.open(scope, after, follow).until_invalid(guard))
    }

    /// Audit events, newest first. Tenant admins read their own namespace.
    pub async fn list_audit(
        &self,
        p: &Principal,
        namespace: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<AuditEvent>> {
        let limit = list_limit(limit)?;
        let scope = self.scope(p, namespace)?;
        self.check_read(p, Action::ReadAudit, scope.as_deref())?;
        let events = self.store.list_audit(scope.as_deref(), limit).await?;
        if p.is_installation_admin() {
            return Ok(events);
        }
        // Audit events are kept by namespace name and outlive the namespace:
        // a tenant re-created under an old name sees only its own events.
        let current = self.own_namespace(p).await?;
        Ok(events
            .into_iter()
            .filter(|e| e.at >= current.created_at)
            .collect())
    }

    /// The caller's own namespace (tenant tokens).
    async fn own_namespace(&self, p: &Principal) -> Result<crate::model::Namespace> {
        let name = p
            .namespace
            .as_deref()
            .ok_or_else(|| ServiceError::PermissionDenied("token has no namespace scope".into()))?;
        Ok(self.store.get_namespace(name).await?)
    }

    /// Work items, newest first.
    pub async fn list_work(
        &self,
        p: &Principal,
        namespace: Option<&str>,
        state: Option<&str>,
        limit: Option<i64>,
    ) -> Result<Vec<WorkItem>> {
        let limit = list_limit(limit)?;
        let state = state
            .map(|s| {
                WorkState::parse(s).ok_or_else(|| ServiceError::InvalidArgument {
                    field: "state".into(),
                    reason: format!("{s:?} is not one of pending, claimed, done, failed"),
                })
            })
            .transpose()?;
        let scope = self.scope(p, namespace)?;
        self.check_read(p, Action::Read, scope.as_deref())?;
        let items = self
            .store
            .list_work(&WorkFilter {
                namespace: scope,
                state,
                limit,
            })
            .await?;
        if p.is_installation_admin() {
            return Ok(items);
        }
        // Work items keep the namespace name they were made under; a
        // re-created namespace of the same name does not see the old ones.
        let current = self.own_namespace(p).await?;
        Ok(items
            .into_iter()
            .filter(|w| w.namespace_id.as_deref() == Some(current.id.as_str()))
            .collect())
    }

    /// One work item; items of other tenants are "not found".
    pub async fn get_work(&self, p: &Principal, id: &str) -> Result<WorkItem> {
        let item = self.store.get_work(id).await?;
        let visible = p.is_installation_admin()
            || match (&item.namespace_id, self.own_namespace(p).await) {
                (Some(ns_id), Ok(own)) => *ns_id == own.id,
                _ => false,
            };
        if !visible {
            return Err(ServiceError::NotFound(format!(
                "work item {id:?} not found"
            )));
        }
        Ok(item)
    }

    /// The namespace a listing covers: the requested one, or for a tenant
    /// token its own.
    fn scope(&self, p: &Principal, requested: Option<&str>) -> Result<Option<String>> {
        if p.is_installation_admin() {
            return Ok(requested.map(str::to_owned));
        }
        let own = p.namespace.clone();
        match requested {
            Some(ns) if Some(ns) != own.as_deref() => Err(ServiceError::PermissionDenied(format!(
                "token is scoped to namespace {:?}",
                own.unwrap_or_default()
            ))),
            _ => Ok(own),
        }
    }
}

/// The caller a stored token stands for, unless it is revoked or expired;
/// `what` names it in the refusal.
/// Resolves, with the reason, once `p`'s token is revoked, expired or
/// deleted: looked up every `recheck`, and at its expiry. A store error is
/// not a verdict (looked up again next time); the hub's own operator
/// commands have no token to lose.
fn token_guard(
    store: Arc<dyn Store>,
    p: &Principal,
    recheck: std::time::Duration,
) -> crate::watch::TokenGuard {
    let (id, system) = (p.token_id.clone(), p.is_system());
    Box::pin(async move {
        if system {
            return std::future::pending().await;
        }
        loop {
            let wait = match store.get_token(&id).await {
                Err(StoreError::NotFound { .. }) => return "the token was deleted".to_owned(),
                Err(e) => {
                    tracing::warn!(error = %e, "watch.token_recheck_failed");
                    recheck
                }
                Ok(t) if t.revoked_at.is_some() => return "the token was revoked".to_owned(),
                Ok(t) => match t.expires_at {
                    Some(at) => match (at - Utc::now()).to_std() {
                        Ok(left) if !left.is_zero() => left.min(recheck),
                        _ => return "the token expired".to_owned(),
                    },
                    None => recheck,
                },
            };
            tokio::time::sleep(wait).await;
        }
    })
}

fn valid_token(token: crate::store::ApiToken, what: &str) -> Result<Principal> {
    if token.revoked_at.is_some() {
        return Err(ServiceError::Unauthenticated(format!("{what} is revoked")));
    }
    if token.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(ServiceError::Unauthenticated(format!("{what} has expired")));
    }
    Ok(token.into())
}

/// A cluster as a tenant sees it: certificate serials and outbox depth are
/// installation-admin data (they describe other tenants' traffic and the
/// cluster's identity).
fn tenant_view(c: &mut Cluster) {
    c.certificate_serials.clear();
    c.outbox_depth = None;
    c.certificate_expires_at = None;
}

fn list_limit(limit: Option<i64>) -> Result<i64> {
    match limit {
        None => Ok(DEFAULT_LIST_LIMIT),
        Some(n) if (1..=MAX_LIST_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(ServiceError::InvalidArgument {
            field: "limit".into(),
            reason: format!("must be between 1 and {MAX_LIST_LIMIT}"),
        }),
    }
}

/// What a deploy asked for, so a reused Idempotency-Key with a different
/// request is caught.
fn fingerprint(agent: &str, req: &DeployRequest) -> String {
    let canonical = serde_json::json!({ "agent": agent, "fromRevision": req.from_revision });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// Parses a credential kind, naming the field and the accepted kinds.
fn credential_kind(kind: &str) -> Result<CredentialKind> {
    CredentialKind::parse(kind).ok_or_else(|| ServiceError::InvalidArgument {
        field: "kind".into(),
        reason: format!(
            "{kind:?} is not a credential kind; expected one of {}",
            CredentialKind::expected()
        ),
    })
}

/// Largest credential value accepted.
const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;

/// A credential value must be non-empty, bounded and free of NUL (it
/// becomes an environment variable). The reasons never echo the value.
fn credential_value(field: &str, value: &SecretValue) -> Result<()> {
    let invalid = |reason: &str| {
        Err(ServiceError::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        })
    };
    if value.is_empty() {
        return invalid("must not be empty");
    }
    if value.len() > MAX_CREDENTIAL_BYTES {
        return invalid(&format!(
            "must be at most {MAX_CREDENTIAL_BYTES} bytes, got {}",
            value.len()
        ));
    }
    if value.expose().contains('\0') {
        return invalid("must not contain NUL characters");
    }
    Ok(())
}

/// The largest chat message, in bytes.
pub const MAX_CHAT_MESSAGE: usize = 16 * 1024;

/// A conversation id the runtime gets as its OpenAI `user`.
fn is_conversation_id(c: &str) -> bool {
    (1..=128).contains(&c.len())
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".:_-".contains(&b))
}

/// The caller's own conversation: `clawfed-chat-<token name>`, other
/// characters as `-`.
fn default_conversation(token_name: &str) -> String {
    let name: String = token_name
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".:_-".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("clawfed-chat-{name}")
}

fn audit(
    p: &Principal,
    action: &str,
    namespace: Option<&str>,
    target: &str,
    result: &str,
    detail: Option<String>,
) -> NewAudit {
    NewAudit {
        actor: p.actor(),
        action: action.to_owned(),
        namespace: namespace.map(str::to_owned),
        target: target.to_owned(),
        result: result.to_owned(),
        detail,
    }
}
