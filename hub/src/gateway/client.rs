//! [`Gateways`]: applies the Gateway objects to the control cluster with the
//! hub's own client, reads readiness, switches routes and stops Gateways.
//!
//! Order matters in two places, and both are decided here:
//! - activation checks that the route API is served (discovery) and that the
//!   hub may write routes (SelfSubjectAccessReview) BEFORE the route is
//!   touched, so a missing CRD or permission leaves the route as it was and
//!   fails with a reason; routing is never silently skipped;
//! - stop deletes the route first, then the runtime (Deployment, its Pods,
//!   the revision Services); the PVC, ServiceAccount, Secret and
//!   NetworkPolicy stay. Absent objects count as done, so stop converges.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clawfed_kube::{is_forbidden, is_not_found, is_status};
use clawfed_proto::labels;
use futures::future::try_join_all;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::objects::{self, ROUTE_KIND, ROUTE_PLURAL};
use super::ready::{self, Readiness};
use super::transport::TransportCredentials;
use super::watch::{GatewayWatch, ReadyListener};
use super::{FIELD_MANAGER, GatewayConfig, GatewaySpec, PrivateRouting};

/// Errors of the Gateway client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec or config is not acceptable (nothing was applied).
    #[error("invalid gateway: {0}")]
    Invalid(#[from] objects::Error),
    /// The managed gateway namespace cannot be used.
    #[error("gateway namespace {namespace}: {reason}")]
    NamespaceUnavailable {
        /// The namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
    /// Private routing is configured but the control cluster does not serve
    /// HTTPRoute at the configured API version.
    #[error(
        "private routing is enabled but the control cluster does not serve {kind} {api_version}: {reason}; install the Gateway API CRDs or fix gateways.privateRouting.apiVersion (the route was not changed)"
    )]
    RouteApiMissing {
        /// Kind looked for.
        kind: &'static str,
        /// `group/version` looked for.
        api_version: String,
        /// What discovery said.
        reason: String,
    },
    /// Private routing is configured but the hub may not manage routes.
    #[error(
        "private routing is enabled but clawfed-hub may not {verbs} httproutes in namespace {namespace}{reason}; grant it in deploy/hub/rbac.yaml (the route was not changed)"
    )]
    RouteForbidden {
        /// The gateway namespace.
        namespace: String,
        /// The verbs denied, comma separated.
        verbs: String,
        /// The authorizer's reason, if any (with a leading separator).
        reason: String,
    },
    /// The apiserver refused the hub's identity.
    #[error("clawfed-hub may not {action} {kind} {namespace}/{name}: {source}")]
    Forbidden {
        /// What was attempted.
        action: &'static str,
        /// Object kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Object name ("" for lists).
        name: String,
        /// The cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// Any other apiserver failure.
    #[error("{action} {kind} {namespace}/{name}: {source}")]
    Kube {
        /// What was attempted (`apply`, `get`, `list`, `delete`).
        action: &'static str,
        /// Object kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Object name ("" for lists).
        name: String,
        /// The cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// A request through the revision's Gateway to its Harness (the data
    /// path probe) was not answered with success.
    #[error(
        "request {path} through gateway pod {pod} of agent {agent} revision {revision}: {detail}"
    )]
    PathProbe {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
        /// The Gateway Pod probed ("" when there was none).
        pod: String,
        /// The path requested.
        path: &'static str,
        /// What came back (status and the first bytes of the body) or why
        /// nothing did.
        detail: String,
    },
    /// A Gateway object of that name belongs to another tenant.
    #[error("{kind} {name} belongs to tenant {owner:?}, not {tenant:?}")]
    OwnedByOtherTenant {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// The tenant label found.
        owner: String,
        /// The tenant asked for.
        tenant: String,
    },
    /// The Gateway already runs a newer revision than the one asked for.
    #[error("gateway of agent {agent} runs revision {deployed}, newer than {requested}")]
    Superseded {
        /// Agent.
        agent: String,
        /// Revision in the Deployment.
        deployed: i64,
        /// Revision asked for.
        requested: i64,
    },
    /// Activation asked for a revision whose Gateway is not prepared.
    #[error("gateway revision {revision} of agent {agent} is not prepared (no Service {service})")]
    NotPrepared {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
        /// The missing Service.
        service: String,
    },
    /// Activation asked for a revision whose Gateway is not ready.
    #[error("gateway revision {revision} of agent {agent} is not ready: {reason}")]
    NotReady {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
        /// The readiness reason code.
        reason: &'static str,
    },
    /// Retirement asked for the revision the route points at.
    #[error("gateway revision {revision} of agent {agent} is the routed revision")]
    RevisionActive {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
    },
    /// The hub's RoleBinding in the Gateway namespace is not honoured yet.
    #[error(
        "gateway namespace {namespace}: the hub's role binding is not in force after {waited:?} ({reason})"
    )]
    BindingPending {
        /// The namespace.
        namespace: String,
        /// How long it waited.
        waited: Duration,
        /// The authorizer's last answer.
        reason: String,
    },
    /// These Gateways have no transport key ([`Gateways::with_transport`]).
    #[error("no transport key: the hub derives each revision's transport token from it")]
    NoTransportKey,
    /// The revision's transport token hash could not be recorded.
    #[error("recording the transport credential of revision {revision_id}: {source}")]
    Transport {
        /// The revision.
        revision_id: String,
        /// The cause.
        #[source]
        source: Box<crate::store::StoreError>,
    },
    /// A deleted object did not go away in time.
    #[error("{kind} {namespace}/{name} still present after {waited:?}")]
    DeleteTimeout {
        /// Object kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// How long it waited.
        waited: Duration,
    },
}

/// Result alias of the Gateway client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A stable reason code for status conditions and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "InvalidGateway",
            Error::NamespaceUnavailable { .. } => "GatewayNamespaceUnavailable",
            Error::RouteApiMissing { .. } => "RouteApiMissing",
            Error::RouteForbidden { .. } => "RouteForbidden",
            Error::Forbidden { .. } => "Forbidden",
            Error::Kube { .. } => "KubernetesError",
            Error::OwnedByOtherTenant { .. } => "OwnedByOtherTenant",
            Error::Superseded { .. } => "Superseded",
            Error::NotPrepared { .. } => "GatewayNotPrepared",
            Error::NotReady { .. } => "GatewayNotReady",
            Error::PathProbe { .. } => "DataPathProbeFailed",
            Error::RevisionActive { .. } => "RevisionActive",
            Error::DeleteTimeout { .. } => "DeleteTimeout",
            Error::NoTransportKey => "NoTransportKey",
            Error::BindingPending { .. } => "GatewayNamespaceBindingPending",
            Error::Transport { .. } => "TransportCredential",
        }
    }

    /// True when retrying later may succeed without anyone changing the spec,
    /// the config or the cluster's RBAC/CRDs.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube { source, .. } => clawfed_kube::is_transient(source),
            // The path may come up (a spoke reconnecting, endpoints being
            // published); the pipeline's deadline bounds the retries.
            Error::NotReady { .. }
            | Error::DeleteTimeout { .. }
            | Error::PathProbe { .. }
            | Error::BindingPending { .. } => true,
            Error::Transport { source, .. } => {
                matches!(source.as_ref(), crate::store::StoreError::Unavailable(_))
            }
            _ => false,
        }
    }
}

/// What one step of `ensure`, `stop`, `retire_revision` or `delete` did, in
/// the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What happened.
    pub action: StepAction,
    /// Object kind.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
}

/// What a [`Step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAction {
    /// Server-side applied.
    Applied,
    /// Deleted, and seen gone.
    Deleted,
    /// Already absent.
    Absent,
}

/// The outcome of [`Gateways::activate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activation {
    /// Private routing is not configured: no route exists to switch.
    RoutingDisabled,
    /// The route now points at `revision`.
    Routed {
        /// The HTTPRoute name.
        route: String,
        /// The revision routed to.
        revision: i64,
        /// The revision routed to before, if any.
        previous: Option<i64>,
    },
}

const WRITE_VERBS: [&str; 4] = ["get", "create", "patch", "delete"];

/// The Gateways of every Agent, managed with one kube client (the hub's own
/// identity in the control cluster).
#[derive(Clone)]
pub struct Gateways {
    client: Client,
    config: GatewayConfig,
    /// Derives each revision's transport token (see [`super::transport`]).
    transport: Option<TransportCredentials>,
    /// The watch [`Gateways::watch`] started (shared by clones): readiness
    /// from its stores once they are in sync.
    watch: Arc<OnceLock<GatewayWatch>>,
    /// Namespace and routing checks that passed recently (see [`CHECK_TTL`]).
    passed: Arc<PassedChecks>,
}

impl std::fmt::Debug for Gateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateways")
            .field("namespace_prefix", &self.config.namespace_prefix)
            .finish()
    }
}

/// How long the data path probe waits for an answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long `ensure` waits for the authorizer to honour the RoleBinding it
/// applied in a new Gateway namespace.
const AUTHORIZE_WAIT: Duration = Duration::from_secs(15);

/// How long a passed namespace or routing check is trusted before it is
/// made again. Every Gateway ensure and activation needs both, and each
/// costs round trips to the control apiserver (a GET; discovery and four
/// access reviews). A failed check is never kept, so a fix is seen at the
/// next attempt. A route right revoked within the window is found by the
/// activation's route write (403, the route unchanged) instead of before
/// the Gateway's objects are applied; any failed write forgets the checks.
const CHECK_TTL: Duration = Duration::from_secs(60);

/// When each check last passed, per Gateway namespace (shared by clones).
#[derive(Debug, Default)]
struct PassedChecks {
    namespace: PassedIn,
    routing: PassedIn,
}

/// When one check last passed in each namespace.
#[derive(Debug, Default)]
struct PassedIn(std::sync::Mutex<HashMap<String, std::time::Instant>>);

impl PassedIn {
    fn fresh(&self, namespace: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .is_some_and(|at| at.elapsed() < CHECK_TTL)
    }

    fn set(&self, namespace: &str, passed: bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if passed {
            map.insert(namespace.to_owned(), std::time::Instant::now());
        } else {
            map.remove(namespace);
        }
    }
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

fn kube_error(
    action: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
    source: kube::Error,
) -> Error {
    let (namespace, name, source) = (namespace.to_string(), name.to_string(), Box::new(source));
    if is_forbidden(&source) {
        Error::Forbidden {
            action,
            kind,
            namespace,
            name,
            source,
        }
    } else {
        Error::Kube {
            action,
            kind,
            namespace,
            name,
            source,
        }
    }
}

impl From<clawfed_kube::object::Error> for Error {
    fn from(e: clawfed_kube::object::Error) -> Self {
        use clawfed_kube::object::Error as E;
        match e {
            E::Kube {
                action,
                kind,
                namespace,
                name,
                source,
            } => kube_error(action, kind, &namespace, &name, *source),
            E::DeleteTimeout {
                kind,
                namespace,
                name,
                waited,
            } => Error::DeleteTimeout {
                kind,
                namespace,
                name,
                waited,
            },
        }
    }
}

fn deleted(kind: &'static str, name: &str, existed: bool) -> Step {
    Step {
        action: if existed {
            StepAction::Deleted
        } else {
            StepAction::Absent
        },
        kind,
        name: name.to_string(),
    }
}

/// `http(s)://rest` as `ws(s)://rest`.
fn websocket_url(http: &str) -> String {
    if let Some(rest) = http.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = http.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        http.to_owned()
    }
}

fn label_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

impl Gateways {
    /// Gateways managed through `client` with `config` (checked here).
    pub fn new(client: Client, config: GatewayConfig) -> Result<Self> {
        objects::validate_config(&config)?;
        Ok(Self {
            client,
            config,
            transport: None,
            watch: Arc::default(),
            passed: Arc::default(),
        })
    }

    /// Derives transport tokens with `credentials` (the hub always sets it;
    /// without it [`Self::transport_for`] fails closed).
    pub fn with_transport(mut self, credentials: TransportCredentials) -> Self {
        self.transport = Some(credentials);
        self
    }

    /// The transport material of `revision_id`: the same on every call, its
    /// hash recorded in the store before it is returned.
    pub async fn transport_for(&self, revision_id: &str) -> Result<super::Transport> {
        let credentials = self.transport.as_ref().ok_or(Error::NoTransportKey)?;
        credentials
            .for_revision(revision_id)
            .await
            .map_err(|source| Error::Transport {
                revision_id: revision_id.to_owned(),
                source: Box::new(source),
            })
    }

    /// The OpenClaw runtime's files for `t`'s Gateway: its config file,
    /// rendered from the revision's Configuration, and its tokens.
    pub fn runtime_files(&self, t: &super::GatewayTarget) -> Result<super::GatewayRuntimeFiles> {
        let credentials = self.transport.as_ref().ok_or(Error::NoTransportKey)?;
        let harness = clawfed_proto::work::harness::service_url(
            &t.agent,
            t.revision,
            &t.harness_namespace,
            t.harness_port,
        );
        // Per Agent, not per revision (see `render_gateway`): through the
        // ingress, the Agent's path; direct, its Harness Service (a new one
        // each revision: direct mode restarts conversations on redeploy).
        let url = match &t.tunnel {
            Some(tunnel) => format!(
                "{}{}",
                websocket_url(&tunnel.url),
                clawfed_proto::tunnel::harness_upgrade_path(&t.tenant, &t.agent)
            ),
            None => websocket_url(&harness),
        };
        let link = t
            .app_server
            .then_some(crate::runtime_config::AppServerLink { url: &url });
        let config = crate::runtime_config::render_gateway(
            &t.configuration,
            self.config.port,
            &self.config.trusted_proxy_cidrs,
            link,
        )
        .to_string();
        let (token, app_server_token) =
            credentials.runtime_tokens(&t.revision_id, t.app_server.then_some(t.agent_id.as_str()));
        Ok(super::GatewayRuntimeFiles {
            config,
            token,
            app_server_token,
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The Gateways of the tenant whose clawfed namespace id is
    /// `namespace_id`, in its own managed runtime namespace
    /// ([`clawfed_proto::naming::gateway_namespace`]).
    pub fn tenant(&self, namespace_id: &str) -> TenantGateways {
        TenantGateways {
            namespace: clawfed_proto::naming::gateway_namespace(
                &self.config.namespace_prefix,
                namespace_id,
            ),
            namespace_id: namespace_id.to_owned(),
            gateways: self.clone(),
        }
    }

    /// Starts watching the Gateway Deployments and Pods of every tenant
    /// (once; `None` when this room, or a clone of it, watches already):
    /// from then on [`TenantGateways::is_ready`] answers from the watch's
    /// stores once they are in sync, and `listener` hears of every Gateway
    /// turning Ready. The returned future runs the watch until `shutdown`.
    pub fn watch(
        &self,
        listener: Arc<dyn ReadyListener>,
        shutdown: CancellationToken,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let (watch, run) = GatewayWatch::start(self.client.clone(), listener, shutdown);
        self.watch.set(watch).ok()?;
        Some(run)
    }

    /// Deletes the managed Gateway namespace of the tenant `namespace_id`
    /// (its teardown: every Agent's Gateway and storage with it) and waits
    /// until it is gone. Only a namespace carrying the tenant's
    /// [`labels::GATEWAY_NAMESPACE`] mark is deleted; an absent one is done.
    pub async fn delete_namespace(&self, namespace_id: &str) -> Result<Step> {
        let tenant = self.tenant(namespace_id);
        let name = tenant.namespace.clone();
        let api = Api::<Namespace>::all(self.client.clone());
        let found = api
            .get_opt(&name)
            .await
            .map_err(|e| kube_error("get", "Namespace", "", &name, e))?;
        let Some(found) = found else {
            return Ok(deleted("Namespace", &name, false));
        };
        if label_of(&found.metadata, labels::GATEWAY_NAMESPACE) != Some(namespace_id) {
            return Err(Error::NamespaceUnavailable {
                namespace: name,
                reason: format!(
                    "not marked {}={namespace_id}: not clawfed's to delete",
                    labels::GATEWAY_NAMESPACE
                ),
            });
        }
        let existed = clawfed_kube::object::delete_if_present(
            &api,
            "Namespace",
            &name,
            &DeleteParams::background(),
        )
        .await?;
        if existed {
            tenant.wait_gone(&api, "Namespace", &name).await?;
        }
        self.passed.namespace.set(&name, false);
        self.passed.routing.set(&name, false);
        tracing::info!(namespace = %name, namespace_id, "gateway.namespace_deleted");
        Ok(deleted("Namespace", &name, existed))
    }
}

/// One tenant's Gateways: the operations on its Agents' Gateway objects,
/// all in its managed runtime namespace ([`Gateways::tenant`]).
#[derive(Clone)]
pub struct TenantGateways {
    gateways: Gateways,
    /// The managed Gateway runtime namespace.
    namespace: String,
    /// The clawfed namespace id it belongs to.
    namespace_id: String,
}

impl std::fmt::Debug for TenantGateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantGateways")
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl std::ops::Deref for TenantGateways {
    type Target = Gateways;
    fn deref(&self) -> &Gateways {
        &self.gateways
    }
}

impl TenantGateways {
    /// The managed Gateway runtime namespace of this tenant.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn ns(&self) -> &str {
        &self.namespace
    }

    /// Whether the tenant's Gateway namespace exists. The hub may read and
    /// write in it only once it made it (its binding is made there); before
    /// that none of the tenant's Gateway objects exist, so stop, retire and
    /// delete are done and readiness is "no Deployment", without asking
    /// the apiserver for objects in a namespace it has no rights in.
    async fn namespace_exists(&self) -> Result<bool> {
        if self.passed.namespace.fresh(self.ns()) {
            return Ok(true);
        }
        Api::<Namespace>::all(self.client.clone())
            .get_opt(self.ns())
            .await
            .map(|found| found.is_some())
            .map_err(|e| kube_error("get", "Namespace", "", self.ns(), e))
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), self.ns())
    }

    fn delete_timeout(&self) -> Duration {
        Duration::from_secs(self.config.delete_timeout_seconds)
    }

    /// The route API and its settings, when private routing is configured.
    fn routes(&self) -> Result<Option<(Api<DynamicObject>, &PrivateRouting)>> {
        let Some(routing) = &self.config.private_routing else {
            return Ok(None);
        };
        let ar: ApiResource = objects::route_api_resource(&routing.api_version)?;
        Ok(Some((
            Api::namespaced_with(self.client.clone(), self.ns(), &ar),
            routing,
        )))
    }

    /// Applies every Gateway object of `spec`'s revision: ServiceAccount,
    /// transport Secret, PVC, NetworkPolicy (before any Pod exists) and the
    /// revision's Service together, then the Deployment (last: a new
    /// revision replaces the Pod of the previous one, `Recreate`). The
    /// route is not touched; see [`Gateways::activate`]. With private
    /// routing configured, a route API the hub cannot use fails here
    /// already, before anything is applied (unless the check passed within
    /// `CHECK_TTL`).
    pub async fn ensure(&self, spec: &GatewaySpec) -> Result<Vec<Step>> {
        let image = objects::validate(spec, &self.config)?;
        if spec.namespace_id != self.namespace_id {
            return Err(Error::Invalid(objects::Error::Invalid {
                field: "namespaceId",
                reason: format!(
                    "{:?} is not the tenant of these Gateways ({:?})",
                    spec.namespace_id, self.namespace_id
                ),
            }));
        }
        self.ensure_namespace(&spec.tenant).await?;
        self.check_routing().await?;
        self.check_owner(spec).await?;
        let c = &self.config;
        // Independent of each other, so applied together; the Deployment
        // waits for all of them (its Pod needs them, and the NetworkPolicy
        // must exist before any Pod does).
        let (sa, secret, claim, policy, service) = (
            objects::service_account(spec, c),
            objects::transport_secret(spec, c),
            objects::data_claim(spec, c),
            objects::network_policy(spec, c),
            objects::service(spec, c),
        );
        let deployment = objects::deployment(spec, c, &image);
        let applied = async {
            let (sa, secret, claim, policy, service) = futures::try_join!(
                self.apply(&sa),
                self.apply(&secret),
                self.apply(&claim),
                self.apply(&policy),
                self.apply(&service),
            )?;
            let deployment = self.apply(&deployment).await?;
            Ok::<_, Error>(vec![sa, secret, claim, policy, service, deployment])
        };
        let steps = applied.await.inspect_err(|_| self.forget_checks())?;
        tracing::info!(
            agent = %spec.agent,
            revision = spec.revision,
            namespace = %self.ns(),
            "gateway.ensured"
        );
        Ok(steps)
    }

    /// Whether `revision`'s Gateway is ready (see [`ready::evaluate`]): from
    /// the watch when it runs and is in sync, else read from the API.
    pub async fn is_ready(&self, agent: &str, revision: i64) -> Result<Readiness> {
        objects::validate_names(agent, revision)?;
        if let Some(verdict) = self
            .watch
            .get()
            .and_then(|w| w.readiness(self.ns(), agent, revision))
        {
            return Ok(verdict);
        }
        if !self.namespace_exists().await? {
            return Ok(Readiness::NotReady(ready::NotReady::NoDeployment));
        }
        let name = objects::names(agent).gateway;
        let d = self
            .api::<Deployment>()
            .get_opt(&name)
            .await
            .map_err(|e| kube_error("get", "Deployment", self.ns(), &name, e))?;
        let lp = ListParams::default().labels(&objects::agent_selector_string(agent));
        let pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map_err(|e| kube_error("list", "Pod", self.ns(), "", e))?;
        Ok(ready::evaluate(revision, d.as_ref(), &pods.items))
    }

    /// Sends `GET <path>` through the Gateway Pod of `revision` (via the
    /// control cluster's Pod proxy): the Gateway forwards it through the
    /// hub's tunnel and the spoke to the Harness. Ok only for a 2xx answer.
    pub async fn probe_path(&self, agent: &str, revision: i64, path: &'static str) -> Result<()> {
        objects::validate_names(agent, revision)?;
        let failed = |pod: &str, detail: String| Error::PathProbe {
            agent: agent.to_owned(),
            revision,
            pod: pod.to_owned(),
            path,
            detail,
        };
        let lp = ListParams::default().labels(&objects::revision_selector_string(agent, revision));
        let pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map_err(|e| kube_error("list", "Pod", self.ns(), "", e))?;
        let Some(pod) = pods
            .items
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
        else {
            return Err(failed("", "no live Gateway Pod".into()));
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let url = format!(
            "/api/v1/namespaces/{}/pods/{}:{}/proxy{path}",
            self.ns(),
            name,
            self.config.port
        );
        let request = http::Request::get(&url)
            .body(Vec::new())
            .map_err(|e| failed(&name, e.to_string()))?;
        let response =
            tokio::time::timeout(PROBE_TIMEOUT, self.client.send(request.map(Into::into)))
                .await
                .map_err(|_| failed(&name, format!("no answer within {PROBE_TIMEOUT:?}")))?
                .map_err(|e| failed(&name, e.to_string()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body[..body.len().min(300)])
            .trim()
            .to_owned();
        Err(failed(&name, format!("HTTP {status}: {text}")))
    }

    /// One model turn through the live Gateway Pod of `revision`, sent to
    /// the Pod's address: the hub runs in the control cluster, and the
    /// apiserver's Pod proxy would take the `Authorization` header (the
    /// runtime's token) as a credential of its own.
    pub async fn model_turn(
        &self,
        agent: &str,
        revision: i64,
        token: &str,
        turn: &crate::tunnel::probe::Turn<'_>,
        timeout: Duration,
    ) -> std::result::Result<String, crate::tunnel::probe::ProbeError> {
        use crate::tunnel::probe::ProbeError;
        let no_answer = |why: String| ProbeError::NoAnswer(why);
        let lp = ListParams::default().labels(&objects::revision_selector_string(agent, revision));
        let pods = self
            .api::<Pod>()
            .list(&lp)
            .await
            .map_err(|e| no_answer(format!("listing the Gateway Pods: {e}")))?;
        let ip = pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .find_map(|p| p.status.as_ref()?.pod_ip.clone())
            .ok_or_else(|| no_answer("no live Gateway Pod with an address".into()))?;
        let authority = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{}", self.config.port),
            _ => format!("{ip}:{}", self.config.port),
        };
        tokio::time::timeout(timeout, async {
            let tcp = tokio::net::TcpStream::connect(&authority)
                .await
                .map_err(|e| {
                    no_answer(format!("connecting to the Gateway Pod {authority}: {e}"))
                })?;
            crate::tunnel::probe::turn_over(tcp, &authority, token, turn).await
        })
        .await
        .map_err(|_| ProbeError::Timeout(timeout))?
    }

    /// The diagnostics of the live Gateway Pod of `revision`, read from its
    /// private path (`clawfed_proto::diagnostics::PATH`, answered by the
    /// Gateway itself, not forwarded) through the control cluster's Pod
    /// proxy: the Pod read and its bounded checks. A missing Pod or an
    /// endpoint that does not answer is one `unknown` check.
    pub async fn diagnose(
        &self,
        agent: &str,
        revision: i64,
    ) -> (Option<String>, Vec<clawfed_proto::diagnostics::Check>) {
        use clawfed_proto::diagnostics;
        let unknown = |pod: Option<String>, detail: &str| {
            (pod, vec![diagnostics::unknown("gateway", detail)])
        };
        if objects::validate_names(agent, revision).is_err() {
            return unknown(None, "invalid Agent name or revision");
        }
        if !matches!(self.namespace_exists().await, Ok(true)) {
            return unknown(
                None,
                "the tenant has no Gateway namespace (no Gateway was ever made)",
            );
        }
        let lp = ListParams::default().labels(&objects::revision_selector_string(agent, revision));
        let pods = match self.api::<Pod>().list(&lp).await {
            Ok(p) => p.items,
            Err(e) => {
                tracing::debug!(error = %e, "gateway.diagnose.pods_unreadable");
                return unknown(None, "the Gateway Pods cannot be listed");
            }
        };
        let Some(name) = pods
            .iter()
            .find(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(|p| p.metadata.name.clone())
        else {
            return unknown(None, "no live Gateway Pod");
        };
        let url = format!(
            "/api/v1/namespaces/{}/pods/{}:{}/proxy{}",
            self.ns(),
            name,
            self.config.port,
            diagnostics::PATH
        );
        let Ok(request) = http::Request::get(&url).body(Vec::new()) else {
            return unknown(Some(name), "invalid diagnostics request");
        };
        let wait = std::time::Duration::from_millis(diagnostics::READ_TIMEOUT_MS);
        let read = async {
            let response = self
                .client
                .send(request.map(Into::into))
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("HTTP {status}"));
            }
            let limited =
                http_body_util::Limited::new(response.into_body(), diagnostics::MAX_BODY_BYTES);
            http_body_util::BodyExt::collect(limited)
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(wait, read).await {
            Ok(Ok(body)) => (Some(name), diagnostics::bound(&body)),
            Ok(Err(e)) => {
                let detail = format!("diagnostics endpoint unreachable: {e}");
                unknown(Some(name), &detail)
            }
            Err(_) => unknown(
                Some(name),
                &format!("diagnostics endpoint unreachable: no answer within {wait:?}"),
            ),
        }
    }

    /// Checks that private routing can work: the route API is served
    /// (discovery) and the hub may get, create, patch and delete routes in
    /// the gateway namespace (SelfSubjectAccessReview). Returns false when
    /// private routing is not configured.
    pub async fn check_routing(&self) -> Result<bool> {
        if self.config.private_routing.is_none() {
            return Ok(false);
        }
        if self.passed.routing.fresh(self.ns()) {
            return Ok(true);
        }
        let verdict = self.check_routing_now().await;
        self.passed
            .routing
            .set(self.ns(), matches!(verdict, Ok(true)));
        verdict
    }

    async fn check_routing_now(&self) -> Result<bool> {
        let Some(routing) = &self.config.private_routing else {
            return Ok(false);
        };
        let ar = objects::route_api_resource(&routing.api_version)?;
        let missing = |reason: String| Error::RouteApiMissing {
            kind: ROUTE_KIND,
            api_version: routing.api_version.clone(),
            reason,
        };
        match self
            .client
            .list_api_group_resources(&routing.api_version)
            .await
        {
            Ok(list) => {
                if !list
                    .resources
                    .iter()
                    .any(|r| r.name == ROUTE_PLURAL && r.kind == ROUTE_KIND)
                {
                    return Err(missing(format!(
                        "{} is served but has no {ROUTE_PLURAL} resource",
                        routing.api_version
                    )));
                }
            }
            Err(e) if is_not_found(&e) => {
                return Err(missing("discovery has no such API group/version".into()));
            }
            Err(e) => {
                return Err(kube_error(
                    "discover",
                    ROUTE_KIND,
                    "",
                    &routing.api_version,
                    e,
                ));
            }
        }
        let reviews = WRITE_VERBS.map(|verb| self.access_review(&ar.group, ROUTE_PLURAL, verb));
        let denied: Vec<(&str, String)> = try_join_all(reviews)
            .await?
            .into_iter()
            .zip(WRITE_VERBS)
            .filter_map(|(answer, verb)| answer.map(|reason| (verb, reason)))
            .collect();
        if denied.is_empty() {
            return Ok(true);
        }
        let reason = denied
            .iter()
            .map(|(_, r)| r.as_str())
            .find(|r| !r.is_empty())
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        Err(Error::RouteForbidden {
            namespace: self.ns().to_string(),
            verbs: denied
                .iter()
                .map(|(v, _)| *v)
                .collect::<Vec<_>>()
                .join(", "),
            reason,
        })
    }

    /// `None` when `verb` on `group`/`resource` in the Gateway namespace is
    /// allowed, else the authorizer's reason.
    async fn access_review(
        &self,
        group: &str,
        resource: &str,
        verb: &str,
    ) -> Result<Option<String>> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.to_string()),
                    resource: Some(resource.into()),
                    namespace: Some(self.ns().to_string()),
                    verb: Some(verb.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| kube_error("create", "SelfSubjectAccessReview", "", "", e))?;
        let status = answer.status.unwrap_or_default();
        Ok((!status.allowed).then(|| status.reason.unwrap_or_default()))
    }

    /// The revision the Agent's route points at (`None`: no route, or
    /// private routing not configured).
    pub async fn active_revision(&self, agent: &str) -> Result<Option<i64>> {
        objects::validate_names(agent, 0)?;
        let Some((routes, _)) = self.routes()? else {
            return Ok(None);
        };
        if !self.namespace_exists().await? {
            return Ok(None);
        }
        let name = objects::names(agent).route;
        let route = match routes.get_opt(&name).await {
            Ok(r) => r,
            // The route API is not served: no route can exist.
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(kube_error("get", ROUTE_KIND, self.ns(), &name, e)),
        };
        match route {
            Some(r) => Ok(objects::routed_revision(agent, &objects::route_spec(&r)?)),
            None => Ok(None),
        }
    }

    /// Switches the Agent's route to `revision`. Before anything changes it
    /// checks the route API and the hub's route permissions
    /// ([`Gateways::check_routing`]), that the revision is prepared and ready
    /// and owned by `tenant`; any failure leaves the route unchanged.
    pub async fn activate(&self, tenant: &str, agent: &str, revision: i64) -> Result<Activation> {
        objects::validate_names(agent, revision)?;
        let Some((routes, routing)) = self.routes()? else {
            return Ok(Activation::RoutingDisabled);
        };
        self.check_routing().await?;
        let svc_name = objects::service_name(agent, revision);
        let svc = self
            .api::<Service>()
            .get_opt(&svc_name)
            .await
            .map_err(|e| kube_error("get", "Service", self.ns(), &svc_name, e))?
            .ok_or_else(|| Error::NotPrepared {
                agent: agent.to_string(),
                revision,
                service: svc_name.clone(),
            })?;
        let tenant = tenant.to_string();
        let owner = label_of(&svc.metadata, labels::TENANT).unwrap_or_default();
        if owner != tenant {
            return Err(Error::OwnedByOtherTenant {
                kind: "Service",
                name: svc_name,
                owner: owner.to_string(),
                tenant,
            });
        }
        if let Readiness::NotReady(why) = self.is_ready(agent, revision).await? {
            return Err(Error::NotReady {
                agent: agent.to_string(),
                revision,
                reason: why.as_str(),
            });
        }
        let name = objects::names(agent).route;
        let current = routes
            .get_opt(&name)
            .await
            .map_err(|e| kube_error("get", ROUTE_KIND, self.ns(), &name, e))?;
        let previous = match &current {
            Some(r) => {
                let owner = label_of(&r.metadata, labels::TENANT).unwrap_or_default();
                if owner != tenant {
                    return Err(Error::OwnedByOtherTenant {
                        kind: ROUTE_KIND,
                        name,
                        owner: owner.to_string(),
                        tenant,
                    });
                }
                objects::routed_revision(agent, &objects::route_spec(r)?)
            }
            None => None,
        };
        let obj = objects::route(self.ns(), &tenant, agent, revision, &self.config, routing)?;
        routes
            .patch(&name, &apply_params(), &Patch::Apply(&obj))
            .await
            .map_err(|e| {
                self.forget_checks();
                kube_error("apply", ROUTE_KIND, self.ns(), &name, e)
            })?;
        tracing::info!(
            agent,
            revision,
            previous = ?previous,
            route = %name,
            "gateway.activated"
        );
        Ok(Activation::Routed {
            route: name,
            revision,
            previous,
        })
    }

    /// Stops the Agent's Gateway: the route first (and waits until it is
    /// gone), then the Deployment (foreground; waits until it and its Pods
    /// are gone), then every revision Service. Keeps the PVC, ServiceAccount,
    /// transport Secret and NetworkPolicy. Converges when already stopped.
    /// Refuses (before deleting anything) a Gateway of another tenant.
    pub async fn stop(&self, tenant: &str, agent: &str) -> Result<Vec<Step>> {
        objects::validate_names(agent, 0)?;
        if !self.namespace_exists().await? {
            return Ok(Vec::new());
        }
        self.check_tenant(tenant, agent).await?;
        let n = objects::names(agent);
        let mut steps = Vec::new();
        if let Some((routes, _)) = self.routes()? {
            // Absent, or the route API is not served (404 too): no route exists.
            let existed = clawfed_kube::object::delete_if_present(
                &routes,
                ROUTE_KIND,
                &n.route,
                &DeleteParams::default(),
            )
            .await?;
            if existed {
                self.wait_gone(&routes, ROUTE_KIND, &n.route).await?;
            }
            steps.push(deleted(ROUTE_KIND, &n.route, existed));
        }
        let deployments = self.api::<Deployment>();
        let existed = self
            .delete_if_present(&deployments, &n.gateway, &DeleteParams::foreground())
            .await?;
        if existed {
            self.wait_gone(&deployments, "Deployment", &n.gateway)
                .await?;
        }
        steps.push(deleted("Deployment", &n.gateway, existed));
        self.wait_pods_gone(agent).await?;
        steps.extend(self.delete_services(agent, None).await?);
        tracing::info!(agent, namespace = %self.ns(), "gateway.stopped");
        Ok(steps)
    }

    /// Deletes `revision`'s Service (after activation moved the route away
    /// from it). Refuses the revision the route points at.
    pub async fn retire_revision(
        &self,
        tenant: &str,
        agent: &str,
        revision: i64,
    ) -> Result<Vec<Step>> {
        objects::validate_names(agent, revision)?;
        if !self.namespace_exists().await? {
            return Ok(Vec::new());
        }
        self.check_tenant(tenant, agent).await?;
        if self.active_revision(agent).await? == Some(revision) {
            return Err(Error::RevisionActive {
                agent: agent.to_string(),
                revision,
            });
        }
        self.delete_services(agent, Some(revision)).await
    }

    /// Destructive: [`Gateways::stop`], then the NetworkPolicy, transport
    /// Secret, ServiceAccount and PVC (the Gateway's state is lost; waits
    /// until the PVC is gone).
    pub async fn delete(&self, tenant: &str, agent: &str) -> Result<Vec<Step>> {
        objects::validate_names(agent, 0)?;
        if !self.namespace_exists().await? {
            return Ok(Vec::new());
        }
        let mut steps = self.stop(tenant, agent).await?;
        let n = objects::names(agent);
        let dp = DeleteParams::background();
        let np = self.api::<NetworkPolicy>();
        let existed = self.delete_if_present(&np, &n.gateway, &dp).await?;
        steps.push(deleted("NetworkPolicy", &n.gateway, existed));
        let secrets = self.api::<Secret>();
        let transport = objects::transport_secret_name(agent, &self.config);
        let existed = self.delete_if_present(&secrets, &transport, &dp).await?;
        steps.push(deleted("Secret", &transport, existed));
        let sas = self.api::<ServiceAccount>();
        let existed = self.delete_if_present(&sas, &n.gateway, &dp).await?;
        steps.push(deleted("ServiceAccount", &n.gateway, existed));
        let pvcs = self.api::<PersistentVolumeClaim>();
        let existed = self.delete_if_present(&pvcs, &n.data, &dp).await?;
        if existed {
            // pvc-protection holds it until no Pod uses it; report it gone
            // only when it is.
            self.wait_gone(&pvcs, "PersistentVolumeClaim", &n.data)
                .await?;
        }
        steps.push(deleted("PersistentVolumeClaim", &n.data, existed));
        tracing::info!(agent, namespace = %self.ns(), "gateway.deleted");
        Ok(steps)
    }

    /// Makes the next ensure or activation check the namespace and the
    /// routing rights again (a write failed: one may have changed).
    fn forget_checks(&self) {
        self.passed.namespace.set(self.ns(), false);
        self.passed.routing.set(self.ns(), false);
    }

    /// The tenant's Gateway namespace, ready for its Gateways (made and
    /// bound at most once per `CHECK_TTL` while it passes).
    async fn ensure_namespace(&self, tenant: &str) -> Result<()> {
        if self.passed.namespace.fresh(self.ns()) {
            return Ok(());
        }
        let verdict = self.ensure_namespace_now(tenant).await;
        self.passed.namespace.set(self.ns(), verdict.is_ok());
        verdict
    }

    /// Creates the tenant's Gateway namespace (marked with its namespace
    /// id), binds the hub's Gateway runtime role there, and applies the
    /// tenant's quota and container defaults. A namespace of that name
    /// carrying another id, or none, is refused: it is not this tenant's.
    async fn ensure_namespace_now(&self, tenant: &str) -> Result<()> {
        let api = Api::<Namespace>::all(self.client.clone());
        let unavailable = |reason: String| Error::NamespaceUnavailable {
            namespace: self.ns().to_string(),
            reason,
        };
        let found = match api.get_opt(self.ns()).await {
            Ok(found) => found,
            Err(e) if is_forbidden(&e) => {
                return Err(unavailable(
                    "clawfed-hub may not read namespaces (apply deploy/hub/rbac.yaml)".into(),
                ));
            }
            Err(e) => return Err(kube_error("get", "Namespace", "", self.ns(), e)),
        };
        if let Some(found) = &found {
            let mark = label_of(&found.metadata, labels::GATEWAY_NAMESPACE);
            if mark != Some(self.namespace_id.as_str()) {
                return Err(unavailable(format!(
                    "it exists without the mark {}={} (not this tenant's)",
                    labels::GATEWAY_NAMESPACE,
                    self.namespace_id
                )));
            }
        } else {
            let ns = objects::gateway_namespace(self.ns(), &self.namespace_id, tenant);
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) => {}
                Err(e) if is_forbidden(&e) => {
                    return Err(unavailable(format!(
                        "clawfed-hub may not create it: {e} (apply deploy/hub/rbac.yaml and admission.yaml)"
                    )));
                }
                Err(e) => return Err(kube_error("create", "Namespace", "", self.ns(), e)),
            }
        }
        let c = &self.config;
        self.apply(&objects::runtime_binding(self.ns(), c)).await?;
        self.wait_authorized().await?;
        let (quota, limits) = (
            objects::namespace_quota(self.ns(), c),
            objects::namespace_limits(self.ns(), c),
        );
        futures::try_join!(self.apply(&quota), self.apply(&limits))?;
        tracing::info!(namespace = %self.ns(), namespace_id = %self.namespace_id, "gateway.namespace_ready");
        Ok(())
    }

    /// Waits until the RoleBinding just applied is in force (the
    /// authorizer learns of it from a watch, a moment later): the hub may
    /// create ServiceAccounts there. Bounded; a binding still not honoured
    /// is a transient failure.
    async fn wait_authorized(&self) -> Result<()> {
        let mut interval = clawfed_kube::object::FIRST_POLL;
        let start = tokio::time::Instant::now();
        loop {
            let denied = self.access_review("", "serviceaccounts", "create").await?;
            let Some(reason) = denied else {
                return Ok(());
            };
            if start.elapsed() >= AUTHORIZE_WAIT {
                return Err(Error::BindingPending {
                    namespace: self.ns().to_string(),
                    waited: AUTHORIZE_WAIT,
                    reason,
                });
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(clawfed_kube::object::MAX_POLL);
        }
    }

    /// Agent names are unique per tenant only, and all Gateways share one
    /// namespace: the Gateway ServiceAccount (made first by `ensure`, kept
    /// until `delete`) records which tenant owns the name.
    async fn check_tenant(&self, tenant: &str, agent: &str) -> Result<()> {
        let name = objects::names(agent).gateway;
        let sa = self
            .api::<ServiceAccount>()
            .get_opt(&name)
            .await
            .map_err(|e| kube_error("get", "ServiceAccount", self.ns(), &name, e))?;
        let Some(sa) = sa else {
            return Ok(());
        };
        let owner = label_of(&sa.metadata, labels::TENANT).unwrap_or_default();
        if owner == tenant {
            return Ok(());
        }
        Err(Error::OwnedByOtherTenant {
            kind: "ServiceAccount",
            name,
            owner: owner.to_string(),
            tenant: tenant.to_string(),
        })
    }

    /// Refuses objects of another tenant and a revision older than the one
    /// deployed (a stale retry must not roll the Gateway back).
    async fn check_owner(&self, spec: &GatewaySpec) -> Result<()> {
        self.check_tenant(&spec.tenant, &spec.agent).await?;
        let name = objects::names(&spec.agent).gateway;
        let d = self
            .api::<Deployment>()
            .get_opt(&name)
            .await
            .map_err(|e| kube_error("get", "Deployment", self.ns(), &name, e))?;
        let deployed = d
            .as_ref()
            .and_then(|d| d.spec.template.metadata.as_ref())
            .and_then(|m| label_of(m, labels::REVISION))
            .and_then(|r| r.parse::<i64>().ok());
        match deployed {
            Some(deployed) if deployed > spec.revision => Err(Error::Superseded {
                agent: spec.agent.clone(),
                deployed,
                requested: spec.revision,
            }),
            _ => Ok(()),
        }
    }

    async fn apply<K>(&self, obj: &K) -> Result<Step>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + k8s_openapi::Resource
            + Serialize
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let name = obj.meta().name.clone().unwrap_or_default();
        self.api::<K>()
            .patch(&name, &apply_params(), &Patch::Apply(obj))
            .await
            .map_err(|e| {
                kube_error(
                    "apply",
                    <K as k8s_openapi::Resource>::KIND,
                    self.ns(),
                    &name,
                    e,
                )
            })?;
        Ok(Step {
            action: StepAction::Applied,
            kind: <K as k8s_openapi::Resource>::KIND,
            name,
        })
    }

    async fn delete_if_present<K>(
        &self,
        api: &Api<K>,
        name: &str,
        dp: &DeleteParams,
    ) -> Result<bool>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + k8s_openapi::Resource
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let kind = <K as k8s_openapi::Resource>::KIND;
        Ok(clawfed_kube::object::delete_if_present(api, kind, name, dp).await?)
    }

    /// Deletes the Agent's revision Services (one revision, or all).
    async fn delete_services(&self, agent: &str, revision: Option<i64>) -> Result<Vec<Step>> {
        let services = self.api::<Service>();
        let names: Vec<String> = match revision {
            Some(r) => vec![objects::service_name(agent, r)],
            None => {
                let lp = ListParams::default().labels(&objects::agent_selector_string(agent));
                let list = services
                    .list_metadata(&lp)
                    .await
                    .map_err(|e| kube_error("list", "Service", self.ns(), "", e))?;
                list.items
                    .into_iter()
                    .filter_map(|s| s.metadata.name)
                    .collect()
            }
        };
        let mut steps = Vec::with_capacity(names.len().max(1));
        for name in &names {
            let existed = self
                .delete_if_present(&services, name, &DeleteParams::background())
                .await?;
            steps.push(deleted("Service", name, existed));
        }
        Ok(steps)
    }

    /// Polls GET until `name` is gone (see [`clawfed_kube::object::wait_gone`]).
    async fn wait_gone<K>(&self, api: &Api<K>, kind: &'static str, name: &str) -> Result<()>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        clawfed_kube::object::wait_gone(api, kind, name, self.delete_timeout()).await?;
        Ok(())
    }

    /// Waits until no Gateway Pod of the Agent is left (the RWO PVC is free
    /// and nothing serves old traffic).
    async fn wait_pods_gone(&self, agent: &str) -> Result<()> {
        let pods = self.api::<Pod>();
        let lp = ListParams::default().labels(&objects::agent_selector_string(agent));
        let timeout = self.delete_timeout();
        let start = tokio::time::Instant::now();
        let mut interval = clawfed_kube::object::FIRST_POLL;
        loop {
            let list = pods
                .list_metadata(&lp)
                .await
                .map_err(|e| kube_error("list", "Pod", self.ns(), "", e))?;
            let Some(left) = list.items.first() else {
                return Ok(());
            };
            if start.elapsed() >= timeout {
                return Err(Error::DeleteTimeout {
                    kind: "Pod",
                    namespace: self.ns().to_string(),
                    name: left.metadata.name.clone().unwrap_or_default(),
                    waited: timeout,
                });
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(clawfed_kube::object::MAX_POLL);
        }
    }
}
