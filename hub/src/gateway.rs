//! The Gateway room: each Agent's Gateway in the control cluster, managed
//! with the hub's own least-privilege identity (`deploy/hub/rbac.yaml`: it
//! creates each tenant's Gateway namespace and binds its Gateway runtime
//! role there, nowhere else; `deploy/hub/admission.yaml` holds it to that).
//!
//! Per tenant, a managed Gateway runtime namespace
//! ([`clawfed_proto::naming::gateway_namespace`]) with the tenant's quota and
//! container defaults. Per Agent, in its tenant's Gateway namespace:
//! a ServiceAccount, a transport Secret (never the model credential: that
//! goes to the Harness only), a ReadWriteOnce PVC, a default-deny
//! NetworkPolicy, a single-replica `Recreate` Deployment (the PVC holds
//! SQLite), one Service per revision and, with private routing, an HTTPRoute
//! whose backend is switched at activation.
//!
//! # Layout
//! - [`objects`]: pure builders of the typed objects (no I/O).
//! - [`ready`]: the Gateway readiness verdict, a pure function.
//! - [`runtime`]: the pipeline's [`GatewayRuntime`] over [`Gateways`].
//! - [`client`]: [`Gateways`] and each tenant's [`TenantGateways`], the thin
//!   I/O adapter (server-side apply as [`FIELD_MANAGER`], ordered stop);
//!   beside it, by job: `namespace` (each tenant's Gateway namespace, its
//!   binding, quota and defaults), `routing` (the checks before a route is
//!   touched, activation), `reach` (readiness, the data path probe, the
//!   model turn, diagnostics) and `error`.
//! - [`transport`]: each revision's transport token, derived from a hub key
//!   kept in the store (stable per revision); the store keeps its hash.
//! - [`watch`]: the watch of the Gateway Deployments and Pods: readiness from
//!   reflector stores, and a wake-up for each Gateway turning Ready.

pub mod client;
mod error;
mod namespace;
pub mod objects;
mod reach;
pub mod ready;
mod routing;
pub mod runtime;
pub mod transport;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;

use clawfed_proto::work::{EgressRule, Resources};
use serde::{Deserialize, Serialize};

pub use client::{Activation, Gateways, Step, StepAction, TenantGateways};
pub use error::{Error, Result};
pub use ready::{NotReady, Readiness};
pub use runtime::{
    GatewayFailure, GatewayRuntime, GatewayTarget, GatewaysDisabled, TunnelEndpoint,
};
pub use transport::{TransportCredentials, TransportKey};
pub use watch::{GatewayReady, GatewayWatch, ReadyListener};

/// The one field manager of every write the hub makes in the control cluster.
pub const FIELD_MANAGER: &str = "clawfed-hub";
/// Value of the workload-role label on Gateway objects.
pub const GATEWAY_ROLE: &str = "gateway";
/// Default ClusterRole the hub binds in each Gateway namespace.
pub const DEFAULT_RUNTIME_CLUSTER_ROLE: &str = "clawfed-hub-gateway-runtime";
/// Default API version of HTTPRoute (Gateway API, standard channel).
pub const DEFAULT_ROUTE_API_VERSION: &str = "gateway.networking.k8s.io/v1";
/// Default port of the OpenClaw Gateway.
pub const DEFAULT_GATEWAY_PORT: i32 = 18789;

/// Gateway settings of the hub (the `gateways` section of its config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayConfig {
    /// Each tenant's Gateways run in its own managed namespace
    /// `<namespacePrefix>-<24 hex of sha256(namespace id)>` in the control
    /// cluster, which the hub creates.
    #[serde(default = "default_namespace_prefix")]
    pub namespace_prefix: String,
    /// Removed (one namespace shared by every tenant): refused with a
    /// message naming [`Self::namespace_prefix`].
    #[serde(default, skip_serializing)]
    pub namespace: Option<String>,
    /// The ClusterRole the hub binds to its own ServiceAccount in each
    /// Gateway namespace it creates (deploy/hub/rbac.yaml).
    #[serde(default = "default_runtime_cluster_role")]
    pub runtime_cluster_role: String,
    /// The hub's own ServiceAccount: the subject of that binding.
    #[serde(default)]
    pub service_account: ServiceAccountRef,
    /// ResourceQuota `spec.hard` of each Gateway namespace. Not a setting of
    /// its own: the Compute Driver's `resources.namespace.quota` (quotas
    /// apply to each physical namespace separately).
    #[serde(skip)]
    pub namespace_quota: BTreeMap<String, String>,
    /// LimitRange container defaults of each Gateway namespace (the Compute
    /// Driver's `resources.namespace.containerDefaults`).
    #[serde(skip)]
    pub container_defaults: clawfed_proto::work::ContainerDefaults,
    /// StorageClass of the Gateway PVC (SQLite-safe block storage); `None`
    /// uses the cluster default.
    #[serde(default)]
    pub storage_class: Option<String>,
    /// Size of the Gateway PVC.
    #[serde(default = "default_workspace_size")]
    pub workspace_size: String,
    /// Node selector of Gateway Pods (the trusted nodes).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Taints Gateway Pods tolerate (e.g. the trusted pool's own taint).
    #[serde(default)]
    pub tolerations: Vec<clawfed_proto::work::Toleration>,
    /// Air-gapped control cluster: Gateway images are pulled from these
    /// mirrors (`{from, to}`, digest kept).
    #[serde(default)]
    pub registry_mirrors: Vec<clawfed_proto::registry::RegistryMirror>,
    /// Secrets of the gateway namespace (the operator's) named in every
    /// Gateway Pod's `imagePullSecrets`.
    #[serde(default)]
    pub image_pull_secrets: Vec<String>,
    /// CIDRs of the trusted proxies (the Gateway API data plane) allowed in.
    #[serde(default)]
    pub trusted_proxy_cidrs: Vec<String>,
    /// Namespace labels of approved Gateway clients. Together with
    /// [`Self::approved_client_pod_labels`] one NetworkPolicy peer; with both
    /// empty no client peer is allowed (never "every namespace").
    #[serde(default)]
    pub approved_client_namespace_labels: BTreeMap<String, String>,
    /// Pod labels of approved Gateway clients (alone: pods of the gateway
    /// namespace).
    #[serde(default)]
    pub approved_client_pod_labels: BTreeMap<String, String>,
    /// Approved Gateway clients, each an exact namespace and Pod labels
    /// (the Compute Driver's `network.gatewayClients`): one NetworkPolicy
    /// peer each, beside the label pair above.
    #[serde(default)]
    pub clients: Vec<ClientPeer>,
    /// Egress allowed to the Harness endpoints (execution clusters).
    #[serde(default)]
    pub harness_egress: Vec<EgressRule>,
    /// Where Gateway Pods may resolve names.
    #[serde(default)]
    pub dns: DnsPeer,
    /// The hub's tunnel ingress (the Gateway's egress in tunnel mode).
    #[serde(default)]
    pub hub: HubPeer,
    /// Private routing through a Gateway API Gateway; `None` means no route
    /// is managed (activation says so explicitly).
    #[serde(default)]
    pub private_routing: Option<PrivateRouting>,
    /// Refuse Gateway images not pinned by SHA-256 digest. Not a setting of
    /// its own: the hub sets it from `policy.requireImmutableDigest`
    /// ([`crate::config::Config::gateway_options`]), so the Gateway and the
    /// deploy check can never disagree.
    #[serde(skip)]
    pub require_immutable_digest: bool,
    /// Image used when the spec names none; the hub fills in
    /// `policy.defaultGatewayImage` when unset.
    #[serde(default)]
    pub default_image: Option<String>,
    /// Port the Gateway container serves on.
    #[serde(default = "default_port")]
    pub port: i32,
    /// Gateway container resources.
    #[serde(default)]
    pub resources: Resources,
    /// How long stop waits for each deleted object to be gone.
    #[serde(default = "default_delete_timeout")]
    pub delete_timeout_seconds: u64,
    /// Names the transport Secret `<prefix>-<agent>` (the Compute Driver's
    /// `transportSecretPrefix`); `None` keeps `<agent>-gateway-transport`.
    #[serde(default)]
    pub transport_secret_prefix: Option<String>,
    /// The service principal credential of Gateway Pods: a projected
    /// ServiceAccount token for this audience, mounted read-only. `None`:
    /// no token at all.
    #[serde(default)]
    pub service_principal: Option<clawfed_proto::work::ServicePrincipal>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            namespace_prefix: default_namespace_prefix(),
            namespace: None,
            runtime_cluster_role: default_runtime_cluster_role(),
            service_account: ServiceAccountRef::default(),
            namespace_quota: BTreeMap::new(),
            container_defaults: Default::default(),
            storage_class: None,
            workspace_size: default_workspace_size(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            registry_mirrors: Vec::new(),
            image_pull_secrets: Vec::new(),
            trusted_proxy_cidrs: Vec::new(),
            approved_client_namespace_labels: BTreeMap::new(),
            approved_client_pod_labels: BTreeMap::new(),
            clients: Vec::new(),
            harness_egress: Vec::new(),
            dns: DnsPeer::default(),
            hub: HubPeer::default(),
            private_routing: None,
            // The policy's default (off); see the field.
            require_immutable_digest: false,
            default_image: None,
            port: DEFAULT_GATEWAY_PORT,
            resources: Resources::default(),
            delete_timeout_seconds: default_delete_timeout(),
            transport_secret_prefix: None,
            service_principal: None,
        }
    }
}

/// A ServiceAccount, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceAccountRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Default for ServiceAccountRef {
    fn default() -> Self {
        Self {
            namespace: "clawfed-system".into(),
            name: "clawfed-hub".into(),
        }
    }
}

/// The DNS servers Gateway Pods may reach on port 53 (UDP and TCP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsPeer {
    /// Namespace of the DNS Pods.
    pub namespace: String,
    /// Labels of the DNS Pods.
    pub pod_labels: BTreeMap<String, String>,
}

impl Default for DnsPeer {
    fn default() -> Self {
        Self {
            namespace: "kube-system".into(),
            pod_labels: BTreeMap::from([("k8s-app".into(), "kube-dns".into())]),
        }
    }
}

/// One approved Gateway client: Pods labelled `pod_labels` in the
/// namespace named `namespace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientPeer {
    /// The client's namespace, by name.
    pub namespace: String,
    /// The client Pods' labels (not empty).
    pub pod_labels: BTreeMap<String, String>,
}

/// The hub's tunnel ingress as a NetworkPolicy peer: in tunnel mode the
/// only egress a Gateway Pod has besides DNS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HubPeer {
    /// Namespace of the hub Pods.
    pub namespace: String,
    /// Labels of the hub Pods.
    pub pod_labels: BTreeMap<String, String>,
    /// The tunnel ingress port.
    pub port: i32,
}

impl Default for HubPeer {
    fn default() -> Self {
        Self {
            namespace: "clawfed-system".into(),
            pod_labels: BTreeMap::from([("app.kubernetes.io/name".into(), "clawfed-hub".into())]),
            port: 8444,
        }
    }
}

/// Private routing: an HTTPRoute per Agent attached to one Gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrivateRouting {
    /// Name of the Gateway the routes attach to.
    pub gateway_name: String,
    /// Namespace of that Gateway.
    pub gateway_namespace: String,
    /// Route hostnames are `<agent>.<hostnameSuffix>`.
    pub hostname_suffix: String,
    /// `group/version` of HTTPRoute.
    #[serde(default = "default_route_api_version")]
    pub api_version: String,
}

/// One Agent revision's Gateway: the desired state `ensure` applies.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewaySpec {
    /// The clawfed namespace (tenant) name.
    pub tenant: String,
    /// The clawfed namespace id: names the tenant's Gateway namespace.
    pub namespace_id: String,
    /// Agent name (DNS-1123, at most 40 characters).
    pub agent: String,
    /// AgentRevision number.
    pub revision: i64,
    /// AgentRevision id.
    pub revision_id: String,
    /// Gateway image; [`GatewayConfig::default_image`] when `None`.
    #[serde(default)]
    pub image: Option<String>,
    /// URL of the revision's Harness (`http(s)://host:port`, no userinfo).
    pub harness_endpoint: String,
    /// The hub's tunnel ingress (`http://host:port`) the Gateway reaches the
    /// Harness through (`CONNECT`); `None` is direct mode (flat network).
    #[serde(default)]
    pub tunnel_proxy: Option<String>,
    /// The CA of the tunnel ingress' certificate (an `https://` proxy): put
    /// in the transport Secret as `tunnel-ca.crt`.
    #[serde(default)]
    pub tunnel_ca_pem: Option<String>,
    /// Transport material projected into the Gateway Pod.
    pub transport: Transport,
    /// The Gateway is the OpenClaw runtime: its config file and tokens.
    /// `None`: a Gateway image of its own contract (the project's stand-in).
    #[serde(default)]
    pub runtime: Option<GatewayRuntimeFiles>,
}

/// What the OpenClaw runtime of a Gateway reads, all from its transport
/// Secret: its config file, its own gateway token (the hub's activation
/// turn sends it) and, for dedicated Codex, the app-server's capability
/// token. None of it is a model credential.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayRuntimeFiles {
    /// The rendered config file (JSON): `crate::runtime_config::render_gateway`.
    pub config: String,
    /// `OPENCLAW_GATEWAY_TOKEN`: the revision's runtime token.
    pub token: String,
    /// `CODEX_APP_SERVER_TOKEN`: the Codex app-server's capability token.
    #[serde(default)]
    pub app_server_token: Option<String>,
}

impl fmt::Debug for GatewayRuntimeFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayRuntimeFiles")
            .field("config_bytes", &self.config.len())
            .field("token", &"<redacted>")
            .field(
                "app_server_token",
                &self.app_server_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl fmt::Debug for GatewaySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewaySpec")
            .field("tenant", &self.tenant)
            .field("agent", &self.agent)
            .field("revision", &self.revision)
            .field("revision_id", &self.revision_id)
            .field("image", &self.image)
            .field("harness_endpoint", &self.harness_endpoint)
            .field("tunnel_proxy", &self.tunnel_proxy)
            .field("transport", &self.transport)
            .field("runtime", &self.runtime)
            .finish()
    }
}

/// What the Gateway needs to authenticate its clients and reach its Harness:
/// a fixed set of fields, so nothing else (the model credential above all)
/// can be put into the transport Secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Transport {
    /// The generated Gateway token clients present.
    pub gateway_token: String,
    /// TLS bundle of the Gateway, if it terminates TLS itself.
    #[serde(default)]
    pub tls: Option<TlsBundle>,
}

/// A TLS bundle (PEM).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsBundle {
    /// Certificate chain.
    pub cert_pem: String,
    /// Private key.
    pub key_pem: String,
    /// CA to verify the Harness (or clients) with.
    #[serde(default)]
    pub ca_pem: Option<String>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("gateway_token", &"<redacted>")
            .field("tls", &self.tls.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl fmt::Debug for TlsBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsBundle(<redacted>)")
    }
}

fn default_namespace_prefix() -> String {
    clawfed_proto::naming::GATEWAY_NAMESPACE_PREFIX.into()
}

fn default_runtime_cluster_role() -> String {
    DEFAULT_RUNTIME_CLUSTER_ROLE.into()
}

fn default_workspace_size() -> String {
    "1Gi".into()
}

fn default_route_api_version() -> String {
    DEFAULT_ROUTE_API_VERSION.into()
}

fn default_port() -> i32 {
    DEFAULT_GATEWAY_PORT
}

fn default_delete_timeout() -> u64 {
    60
}
