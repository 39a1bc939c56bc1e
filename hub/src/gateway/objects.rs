//! Typed objects of one Agent's Gateway, built from a [`GatewaySpec`] and the
//! [`GatewayConfig`]. Pure: no I/O; [`super::client`] applies them.
//!
//! # Layout
//! - this file: the errors, the well-known keys and paths, the object names,
//!   labels and selectors every builder shares.
//! - `validation.rs`: the settings, names and spec checks.
//! - `workload.rs`: ServiceAccount, transport Secret, PVC, Pod spec,
//!   Deployment and the revision's Service.
//! - `network.rs`: the NetworkPolicy.
//! - `http_route.rs`: the HTTPRoute of private routing.
//! - `namespace.rs`: each tenant's Gateway namespace, its binding, quota
//!   and container defaults.

mod http_route;
mod namespace;
mod network;
#[cfg(test)]
mod tests;
mod validation;
mod workload;

use std::collections::BTreeMap;

use clawfed_proto::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{GATEWAY_ROLE, GatewayConfig, GatewaySpec};

pub use http_route::{
    BackendRef, ParentRef, RouteRule, RouteSpec, route, route_api_resource, route_spec,
    routed_revision,
};
pub use namespace::{
    NAMESPACE_LIMITS, NAMESPACE_QUOTA, gateway_namespace, namespace_limits, namespace_quota,
    runtime_binding,
};
pub use network::network_policy;
pub use validation::{validate, validate_config, validate_names};
pub use workload::{
    data_claim, deployment, gateway_resources, pod_spec, service, service_account, transport_secret,
};

/// Why a spec or config cannot be turned into objects (fails closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A name or label value is not acceptable.
    #[error("{what} {value:?}: {reason}")]
    Name {
        /// What was named (agent, tenant, object).
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: String,
    },
    /// The image is not pinned by digest although that is required.
    #[error("gateway image refused: {0}")]
    Digest(#[source] clawfed_proto::work::DigestError),
    /// Neither the spec nor the config names an image.
    #[error("no gateway image: the spec names none and gateways.defaultImage is unset")]
    NoImage,
    /// Any other invalid field.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why it is refused.
        reason: String,
    },
}

/// Result alias of the object builders.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Keys the transport Secret may hold; nothing else is ever written to it.
pub const TRANSPORT_KEYS: [&str; 8] = [
    "gateway-token",
    "tls.crt",
    "tls.key",
    "ca.crt",
    "tunnel-ca.crt",
    RUNTIME_CONFIG_KEY,
    RUNTIME_TOKEN_KEY,
    APP_SERVER_TOKEN_KEY,
];
/// The OpenClaw runtime's config file in the transport Secret (and so at
/// `TRANSPORT_DIR/openclaw.json`, read-only).
pub const RUNTIME_CONFIG_KEY: &str = "openclaw.json";
/// The runtime's own gateway token (`OPENCLAW_GATEWAY_TOKEN`).
pub const RUNTIME_TOKEN_KEY: &str = "runtime-token";
/// The Codex app-server's capability token (`CODEX_APP_SERVER_TOKEN`).
pub const APP_SERVER_TOKEN_KEY: &str = "app-server-token";
/// The environment variable with the app-server's capability token.
pub const APP_SERVER_TOKEN_ENV: &str = "CODEX_APP_SERVER_TOKEN";
/// Where the transport Secret is mounted (read-only) in the Gateway Pod.
pub const TRANSPORT_DIR: &str = "/var/run/clawfed/transport";
/// Where the Gateway PVC is mounted (the Gateway's SQLite state).
pub const DATA_DIR: &str = "/data";
/// Environment variable with the Harness endpoint of the revision.
pub const HARNESS_ENDPOINT_ENV: &str = "CLAWFED_HARNESS_ENDPOINT";
/// Environment variable with the file (in the transport Secret) holding the
/// CA of the tunnel ingress' certificate, when the ingress speaks TLS.
pub const TUNNEL_CA_FILE_ENV: &str = "CLAWFED_TUNNEL_CA_FILE";
/// Environment variable with the hub's tunnel ingress (tunnel mode only):
/// the Gateway sends `CONNECT <endpoint host:port>` there with
/// `Proxy-Authorization: Bearer <gateway-token>`.
pub const TUNNEL_PROXY_ENV: &str = "CLAWFED_TUNNEL_PROXY";
/// The non-root uid/gid the Gateway runs as.
pub const GATEWAY_UID: i64 = 65532;
/// Kind of the route object.
pub const ROUTE_KIND: &str = "HTTPRoute";
/// Plural of the route resource.
pub const ROUTE_PLURAL: &str = "httproutes";

/// Object names of one Agent's Gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// ServiceAccount, Deployment and NetworkPolicy: `<agent>-gateway`.
    pub gateway: String,
    /// Transport Secret: `<agent>-gateway-transport`.
    pub transport: String,
    /// PVC: `<agent>-gateway-data`.
    pub data: String,
    /// HTTPRoute: `<agent>`.
    pub route: String,
}

/// Names for Agent `agent`.
pub fn names(agent: &str) -> Names {
    Names {
        gateway: format!("{agent}-gateway"),
        transport: format!("{agent}-gateway-transport"),
        data: format!("{agent}-gateway-data"),
        route: agent.to_string(),
    }
}

/// The transport Secret of `agent`: `<transportSecretPrefix>-<agent>` when
/// the installation sets a prefix, else [`Names::transport`]. A name that
/// would not be a DNS label (a long prefix and a long Agent name) is
/// `<prefix>-<first 12 hex of SHA-256(agent)>` instead: stable and unique
/// per Agent, as the OpenClaw Compute Driver names its own.
pub fn transport_secret_name(agent: &str, c: &GatewayConfig) -> String {
    match &c.transport_secret_prefix {
        Some(prefix) if prefix.len() + 1 + agent.len() <= 63 => format!("{prefix}-{agent}"),
        Some(prefix) => {
            use sha2::Digest;
            let digest = hex::encode(sha2::Sha256::digest(agent.as_bytes()));
            format!("{prefix}-{}", &digest[..12])
        }
        None => names(agent).transport,
    }
}

/// The longest transport Secret prefix: `<prefix>-<12 hex>` stays a DNS
/// label (the seed's own `openclaw-agent-transport` is 24 characters).
pub const MAX_TRANSPORT_PREFIX: usize = 50;

/// The per-revision Service: `<agent>-r<revision>-gateway`.
pub fn service_name(agent: &str, revision: i64) -> String {
    format!("{agent}-r{revision}-gateway")
}

/// Labels every Gateway object of the Agent carries.
pub fn owner_labels(tenant: &str, agent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
        (labels::TENANT.to_string(), tenant.to_string()),
        (labels::AGENT.to_string(), agent.to_string()),
        (labels::WORKLOAD_ROLE.to_string(), GATEWAY_ROLE.to_string()),
    ])
}

/// Selects every Gateway Pod of the Agent, whatever the revision (the
/// Deployment selector, which is immutable, and the NetworkPolicy's).
pub fn agent_selector(agent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::AGENT.to_string(), agent.to_string()),
        (labels::WORKLOAD_ROLE.to_string(), GATEWAY_ROLE.to_string()),
    ])
}

/// Selects the Gateway Pod of one revision (the revision's Service).
pub fn revision_selector(agent: &str, revision: i64) -> BTreeMap<String, String> {
    let mut l = agent_selector(agent);
    l.insert(labels::REVISION.to_string(), revision.to_string());
    l
}

/// `agent_selector` as a label-selector string for LIST calls.
pub fn agent_selector_string(agent: &str) -> String {
    selector_string(&agent_selector(agent))
}

/// [`revision_selector`] as a label selector string.
pub fn revision_selector_string(agent: &str, revision: i64) -> String {
    selector_string(&revision_selector(agent, revision))
}

fn selector_string(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The managed Gateway runtime namespace of `spec`'s tenant.
pub fn namespace_of(spec: &GatewaySpec, c: &GatewayConfig) -> String {
    clawfed_proto::naming::gateway_namespace(&c.namespace_prefix, &spec.namespace_id)
}

fn meta(name: &str, spec: &GatewaySpec, c: &GatewayConfig) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace_of(spec, c)),
        labels: Some(owner_labels(&spec.tenant, &spec.agent)),
        ..Default::default()
    }
}

fn revision_meta(name: &str, spec: &GatewaySpec, c: &GatewayConfig) -> ObjectMeta {
    let mut m = meta(name, spec, c);
    m.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(labels::REVISION.to_string(), spec.revision.to_string());
    m.annotations = Some(BTreeMap::from([(
        labels::REVISION_ID_ANNOTATION.to_string(),
        spec.revision_id.clone(),
    )]));
    m
}
