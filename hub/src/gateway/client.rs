//! [`Gateways`] (every tenant's, one kube client: the hub's own identity in
//! the control cluster) and [`TenantGateways`] (one tenant's, in its Gateway
//! namespace): applies the Gateway objects, stops and deletes Gateways.
//!
//! Stop deletes the route first, then the runtime (Deployment, its Pods,
//! the revision Services); the PVC, ServiceAccount, Secret and
//! NetworkPolicy stay. Absent objects count as done, so stop converges.
//! Activation and its checks are in `routing`, the Gateway namespace in
//! `namespace`, readiness and the probes in `reach`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clawfed_kube::RequestError;
use clawfed_proto::labels;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::error::{Error, Result};
use super::objects::{self, ROUTE_KIND};
use super::transport::TransportCredentials;
use super::watch::{GatewayWatch, ReadyListener};
use super::{FIELD_MANAGER, GatewayConfig, GatewaySpec, PrivateRouting};

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

pub(super) const WRITE_VERBS: [&str; 4] = ["get", "create", "patch", "delete"];

/// The Gateways of every Agent, managed with one kube client (the hub's own
/// identity in the control cluster).
#[derive(Clone)]
pub struct Gateways {
    pub(super) client: Client,
    pub(super) config: GatewayConfig,
    /// Derives each revision's transport token (see [`super::transport`]).
    pub(super) transport: Option<TransportCredentials>,
    /// The watch [`Gateways::watch`] started (shared by clones): readiness
    /// from its stores once they are in sync.
    pub(super) watch: Arc<OnceLock<GatewayWatch>>,
    /// Namespace and routing checks that passed recently (see [`CHECK_TTL`]).
    pub(super) passed: Arc<PassedChecks>,
}

impl std::fmt::Debug for Gateways {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateways")
            .field("namespace_prefix", &self.config.namespace_prefix)
            .finish()
    }
}

/// How long the data path probe waits for an answer.
pub(super) const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long `ensure` waits for the authorizer to honour the RoleBinding it
/// applied in a new Gateway namespace.
pub(super) const AUTHORIZE_WAIT: Duration = Duration::from_secs(15);

/// How long a passed namespace or routing check is trusted before it is
/// made again. Every Gateway ensure and activation needs both, and each
/// costs round trips to the control apiserver (a GET; discovery and four
/// access reviews). A failed check is never kept, so a fix is seen at the
/// next attempt. A route right revoked within the window is found by the
/// activation's route write (403, the route unchanged) instead of before
/// the Gateway's objects are applied; any failed write forgets the checks.
pub(super) const CHECK_TTL: Duration = Duration::from_secs(60);

/// When each check last passed, per Gateway namespace (shared by clones).
#[derive(Debug, Default)]
pub(super) struct PassedChecks {
    pub(super) namespace: PassedIn,
    pub(super) routing: PassedIn,
}

/// When one check last passed in each namespace.
#[derive(Debug, Default)]
pub(super) struct PassedIn(std::sync::Mutex<HashMap<String, std::time::Instant>>);

impl PassedIn {
    pub(super) fn fresh(&self, namespace: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .is_some_and(|at| at.elapsed() < CHECK_TTL)
    }

    pub(super) fn set(&self, namespace: &str, passed: bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if passed {
            map.insert(namespace.to_owned(), std::time::Instant::now());
        } else {
            map.remove(namespace);
        }
    }
}

pub(super) fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

pub(super) fn deleted(kind: &'static str, name: &str, existed: bool) -> Step {
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

pub(super) fn label_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
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
}

/// One tenant's Gateways: the operations on its Agents' Gateway objects,
/// all in its managed runtime namespace ([`Gateways::tenant`]).
#[derive(Clone)]
pub struct TenantGateways {
    pub(super) gateways: Gateways,
    /// The managed Gateway runtime namespace.
    pub(super) namespace: String,
    /// The clawfed namespace id it belongs to.
    pub(super) namespace_id: String,
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

    pub(super) fn ns(&self) -> &str {
        &self.namespace
    }

    /// Whether the tenant's Gateway namespace exists. The hub may read and
    /// write in it only once it made it (its binding is made there); before
    /// that none of the tenant's Gateway objects exist, so stop, retire and
    /// delete are done and readiness is "no Deployment", without asking
    /// the apiserver for objects in a namespace it has no rights in.
    pub(super) async fn namespace_exists(&self) -> Result<bool> {
        if self.passed.namespace.fresh(self.ns()) {
            return Ok(true);
        }
        Api::<Namespace>::all(self.client.clone())
            .get_opt(self.ns())
            .await
            .map(|found| found.is_some())
            .map_err(|e| RequestError::new("get", "Namespace", "", self.ns(), e).into())
    }

    pub(super) fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), self.ns())
    }

    pub(super) fn delete_timeout(&self) -> Duration {
        Duration::from_secs(self.config.delete_timeout_seconds)
    }

    /// The route API and its settings, when private routing is configured.
    pub(super) fn routes(&self) -> Result<Option<(Api<DynamicObject>, &PrivateRouting)>> {
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

    /// Agent names are unique per tenant only, and all Gateways share one
    /// namespace: the Gateway ServiceAccount (made first by `ensure`, kept
    /// until `delete`) records which tenant owns the name.
    pub(super) async fn check_tenant(&self, tenant: &str, agent: &str) -> Result<()> {
        let name = objects::names(agent).gateway;
        let sa = self
            .api::<ServiceAccount>()
            .get_opt(&name)
            .await
            .map_err(|e| RequestError::new("get", "ServiceAccount", self.ns(), &name, e))?;
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
    pub(super) async fn check_owner(&self, spec: &GatewaySpec) -> Result<()> {
        self.check_tenant(&spec.tenant, &spec.agent).await?;
        let name = objects::names(&spec.agent).gateway;
        let d = self
            .api::<Deployment>()
            .get_opt(&name)
            .await
            .map_err(|e| RequestError::new("get", "Deployment", self.ns(), &name, e))?;
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

    pub(super) async fn apply<K>(&self, obj: &K) -> Result<Step>
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
                RequestError::new(
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

    pub(super) async fn delete_if_present<K>(
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
    pub(super) async fn delete_services(
        &self,
        agent: &str,
        revision: Option<i64>,
    ) -> Result<Vec<Step>> {
        let services = self.api::<Service>();
        let names: Vec<String> = match revision {
            Some(r) => vec![objects::service_name(agent, r)],
            None => {
                let lp = ListParams::default().labels(&objects::agent_selector_string(agent));
                let list = services
                    .list_metadata(&lp)
                    .await
                    .map_err(|e| RequestError::new("list", "Service", self.ns(), "", e))?;
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
    pub(super) async fn wait_gone<K>(
        &self,
        api: &Api<K>,
        kind: &'static str,
        name: &str,
    ) -> Result<()>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        clawfed_kube::object::wait_gone(api, kind, name, self.delete_timeout()).await?;
        Ok(())
    }

    /// Waits until no Gateway Pod of the Agent is left (the RWO PVC is free
    /// and nothing serves old traffic).
    pub(super) async fn wait_pods_gone(&self, agent: &str) -> Result<()> {
        let pods = self.api::<Pod>();
        let lp = ListParams::default().labels(&objects::agent_selector_string(agent));
        let timeout = self.delete_timeout();
        let start = tokio::time::Instant::now();
        let mut interval = clawfed_kube::object::FIRST_POLL;
        loop {
            let list = pods
                .list_metadata(&lp)
                .await
                .map_err(|e| RequestError::new("list", "Pod", self.ns(), "", e))?;
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
