//! Typed objects of one Agent's Gateway, built from a [`GatewaySpec`] and the
//! [`GatewayConfig`]. Pure: no I/O; [`super::client`] applies them.

use std::collections::BTreeMap;

use clawfed_kube::quantity::quantities;
use clawfed_kube::security;
use clawfed_proto::labels;
use clawfed_proto::naming::{validate_agent_name, validate_dns1123_label};
use clawfed_proto::work::check_image_digest;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    LimitRange, LimitRangeItem, LimitRangeSpec, Namespace, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe,
    ResourceQuota, ResourceQuotaSpec, ResourceRequirements, Secret, SecretKeySelector,
    SecretVolumeSource, Service, ServiceAccount, ServicePort, ServiceSpec, TCPSocketAction, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use super::{GATEWAY_ROLE, GatewayConfig, GatewaySpec, PrivateRouting};

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

fn name_error(what: &'static str, value: &str, e: impl ToString) -> Error {
    Error::Name {
        what,
        value: value.to_string(),
        reason: e.to_string(),
    }
}

/// Checks the agent name and the names derived from it for `revision`.
pub fn validate_names(agent: &str, revision: i64) -> Result<()> {
    validate_agent_name(agent).map_err(|e| name_error("agent", agent, e))?;
    if revision < 0 {
        return Err(Error::Invalid {
            field: "revision",
            reason: format!("negative revision {revision}"),
        });
    }
    let n = names(agent);
    for name in [
        n.gateway,
        n.transport,
        n.data,
        n.route,
        service_name(agent, revision),
    ] {
        validate_dns1123_label(&name).map_err(|e| name_error("object name", &name, e))?;
    }
    Ok(())
}

/// Checks the Gateway settings once, when [`super::Gateways`] is built.
pub fn validate_config(c: &GatewayConfig) -> Result<()> {
    if let Some(old) = &c.namespace {
        return Err(Error::Invalid {
            field: "gateways.namespace",
            reason: format!(
                "{old:?}: one shared Gateway namespace is no longer used; each tenant's Gateways run in its own namespace <namespacePrefix>-<24 hex>, set gateways.namespacePrefix (default {})",
                clawfed_proto::naming::GATEWAY_NAMESPACE_PREFIX
            ),
        });
    }
    validate_dns1123_label(&c.namespace_prefix)
        .map_err(|e| name_error("namespacePrefix", &c.namespace_prefix, e))?;
    let max = clawfed_proto::naming::MAX_GATEWAY_NAMESPACE_PREFIX_LEN;
    if c.namespace_prefix.len() > max {
        return Err(Error::Invalid {
            field: "gateways.namespacePrefix",
            reason: format!(
                "{:?} is longer than {max} characters (<prefix>-<24 hex> must fit 63)",
                c.namespace_prefix
            ),
        });
    }
    validate_dns1123_label(&c.runtime_cluster_role)
        .map_err(|e| name_error("runtimeClusterRole", &c.runtime_cluster_role, e))?;
    validate_dns1123_label(&c.service_account.namespace)
        .map_err(|e| name_error("serviceAccount.namespace", &c.service_account.namespace, e))?;
    validate_dns1123_label(&c.service_account.name)
        .map_err(|e| name_error("serviceAccount.name", &c.service_account.name, e))?;
    if !(1..=65535).contains(&c.port) {
        return Err(Error::Invalid {
            field: "gateways.port",
            reason: format!("{} is not a TCP port", c.port),
        });
    }
    for cidr in c
        .trusted_proxy_cidrs
        .iter()
        .chain(c.harness_egress.iter().map(|r| &r.cidr))
    {
        validate_cidr(cidr)?;
    }
    for name in &c.image_pull_secrets {
        validate_dns_subdomain(name).map_err(|reason| Error::Invalid {
            field: "gateways.imagePullSecrets",
            reason: format!("{name:?}: {reason}"),
        })?;
    }
    for client in &c.clients {
        validate_dns1123_label(&client.namespace)
            .map_err(|e| name_error("clients.namespace", &client.namespace, e))?;
        if client.pod_labels.is_empty() {
            // An empty selector would admit every Pod of the namespace.
            return Err(Error::Invalid {
                field: "gateways.clients.podLabels",
                reason: format!("must not be empty (client namespace {})", client.namespace),
            });
        }
    }
    if let Some(prefix) = &c.transport_secret_prefix {
        validate_dns1123_label(prefix)
            .map_err(|e| name_error("transportSecretPrefix", prefix, e))?;
        if prefix.len() > MAX_TRANSPORT_PREFIX {
            return Err(Error::Invalid {
                field: "gateways.transportSecretPrefix",
                reason: format!("{prefix:?} is longer than {MAX_TRANSPORT_PREFIX} characters"),
            });
        }
    }
    if let Some(sp) = &c.service_principal {
        if sp.audience.is_empty() {
            return Err(Error::Invalid {
                field: "gateways.servicePrincipal.audience",
                reason: "must not be empty".into(),
            });
        }
        clawfed_kube::token::check_expiration(sp.expiration_seconds).map_err(|e| {
            Error::Invalid {
                field: "gateways.servicePrincipal.expirationSeconds",
                reason: e.to_string(),
            }
        })?;
    }
    if let Some(image) = &c.default_image
        && c.require_immutable_digest
    {
        check_image_digest(image).map_err(Error::Digest)?;
    }
    if let Some(r) = &c.private_routing {
        route_api_resource(&r.api_version)?;
        validate_dns1123_label(&r.gateway_namespace)
            .map_err(|e| name_error("gateway namespace", &r.gateway_namespace, e))?;
        if r.gateway_name.is_empty() || r.hostname_suffix.is_empty() {
            return Err(Error::Invalid {
                field: "gateways.privateRouting",
                reason: "gatewayName and hostnameSuffix are required".into(),
            });
        }
    }
    Ok(())
}

/// A DNS subdomain (an object name such as a Secret's).
fn validate_dns_subdomain(name: &str) -> std::result::Result<(), String> {
    if clawfed_proto::naming::is_dns1123_subdomain(name) {
        Ok(())
    } else {
        Err("is not a DNS subdomain (a Secret name)".into())
    }
}

fn validate_cidr(cidr: &str) -> Result<()> {
    let ok = cidr.split_once('/').is_some_and(|(ip, bits)| {
        let max = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => return false,
        };
        bits.parse::<u8>().is_ok_and(|b| b <= max)
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid {
            field: "cidr",
            reason: format!("{cidr:?} is not an IP/prefix CIDR"),
        })
    }
}

/// Checks a spec against the config before anything is applied and returns
/// the image to run.
pub fn validate(spec: &GatewaySpec, c: &GatewayConfig) -> Result<String> {
    validate_names(&spec.agent, spec.revision)?;
    validate_dns1123_label(&spec.tenant).map_err(|e| name_error("tenant", &spec.tenant, e))?;
    let image = spec
        .image
        .clone()
        .or_else(|| c.default_image.clone())
        .ok_or(Error::NoImage)?;
    if c.require_immutable_digest {
        check_image_digest(&image).map_err(Error::Digest)?;
    }
    validate_endpoint("harnessEndpoint", &spec.harness_endpoint)?;
    if let Some(proxy) = &spec.tunnel_proxy {
        validate_endpoint("tunnelProxy", proxy)?;
    }
    if spec.transport.gateway_token.is_empty() {
        return Err(Error::Invalid {
            field: "transport.gatewayToken",
            reason: "must not be empty".into(),
        });
    }
    Ok(image)
}

/// The Harness endpoint goes into the Pod environment, so it must never
/// carry credentials (`user:pass@`).
fn validate_endpoint(field: &'static str, url: &str) -> Result<()> {
    let invalid = |reason: &str| Error::Invalid {
        field,
        reason: reason.to_string(),
    };
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| invalid("must start with http:// or https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err(invalid("has no host"));
    }
    if authority.contains('@') {
        return Err(invalid("must not carry credentials (userinfo)"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("contains whitespace or control characters"));
    }
    Ok(())
}

/// The ApiResource of HTTPRoute at `api_version` (`group/version`).
pub fn route_api_resource(api_version: &str) -> Result<ApiResource> {
    let (group, version) = api_version
        .split_once('/')
        .filter(|(g, v)| !g.is_empty() && !v.is_empty() && !v.contains('/'))
        .ok_or_else(|| Error::Invalid {
            field: "gateways.privateRouting.apiVersion",
            reason: format!("{api_version:?} is not group/version"),
        })?;
    Ok(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, ROUTE_KIND),
        ROUTE_PLURAL,
    ))
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

/// The Gateway ServiceAccount (separate from the Harness'); no token is
/// mounted.
pub fn service_account(spec: &GatewaySpec, c: &GatewayConfig) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(&names(&spec.agent).gateway, spec, c),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

/// The transport Secret. Its keys are exactly those of [`Transport`]
/// (see [`TRANSPORT_KEYS`]); the model credential has no way in.
///
/// [`Transport`]: super::Transport
pub fn transport_secret(spec: &GatewaySpec, c: &GatewayConfig) -> Secret {
    let t = &spec.transport;
    let mut data = BTreeMap::from([(TRANSPORT_KEYS[0].to_string(), t.gateway_token.clone())]);
    if let Some(ca) = &spec.tunnel_ca_pem {
        data.insert(TRANSPORT_KEYS[4].into(), ca.clone());
    }
    if let Some(r) = &spec.runtime {
        data.insert(RUNTIME_CONFIG_KEY.into(), r.config.clone());
        data.insert(RUNTIME_TOKEN_KEY.into(), r.token.clone());
        if let Some(token) = &r.app_server_token {
            data.insert(APP_SERVER_TOKEN_KEY.into(), token.clone());
        }
    }
    if let Some(tls) = &t.tls {
        data.insert(TRANSPORT_KEYS[1].into(), tls.cert_pem.clone());
        data.insert(TRANSPORT_KEYS[2].into(), tls.key_pem.clone());
        if let Some(ca) = &tls.ca_pem {
            data.insert(TRANSPORT_KEYS[3].into(), ca.clone());
        }
    }
    Secret {
        metadata: meta(&transport_secret_name(&spec.agent, c), spec, c),
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

/// The Gateway PVC: ReadWriteOnce, the configured StorageClass and size.
pub fn data_claim(spec: &GatewaySpec, c: &GatewayConfig) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(&names(&spec.agent).data, spec, c),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: c.storage_class.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(c.workspace_size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tcp_port(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn match_labels(m: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(m.clone()),
        ..Default::default()
    }
}

/// The hub's Pods (`gateway.options.hub`) as a NetworkPolicy peer.
fn hub_peer(c: &GatewayConfig) -> NetworkPolicyPeer {
    let hub_ns = BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        c.hub.namespace.clone(),
    )]);
    NetworkPolicyPeer {
        namespace_selector: Some(match_labels(&hub_ns)),
        pod_selector: Some(match_labels(&c.hub.pod_labels)),
        ..Default::default()
    }
}

/// The Gateway NetworkPolicy: default deny in both directions for the
/// Agent's Gateway Pods. In: only the approved clients and the trusted proxy
/// CIDRs, on the Gateway port. Out: DNS, and the hub's tunnel ingress in
/// tunnel mode, the Harness endpoints (`harnessEgress`) in direct mode.
pub fn network_policy(spec: &GatewaySpec, c: &GatewayConfig) -> NetworkPolicy {
    let mut from = Vec::new();
    let ns_labels = &c.approved_client_namespace_labels;
    let pod_labels = &c.approved_client_pod_labels;
    // An empty selector would mean "everything", so a peer is only made from
    // labels that were actually configured.
    if !ns_labels.is_empty() || !pod_labels.is_empty() {
        from.push(NetworkPolicyPeer {
            namespace_selector: (!ns_labels.is_empty()).then(|| match_labels(ns_labels)),
            pod_selector: (!pod_labels.is_empty()).then(|| match_labels(pod_labels)),
            ..Default::default()
        });
    }
    for client in &c.clients {
        let ns = BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            client.namespace.clone(),
        )]);
        from.push(NetworkPolicyPeer {
            namespace_selector: Some(match_labels(&ns)),
            pod_selector: Some(match_labels(&client.pod_labels)),
            ..Default::default()
        });
    }
    for cidr in &c.trusted_proxy_cidrs {
        from.push(NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: cidr.clone(),
                except: None,
            }),
            ..Default::default()
        });
    }
    let mut ingress = if from.is_empty() {
        Vec::new()
    } else {
        vec![NetworkPolicyIngressRule {
            from: Some(from),
            ports: Some(vec![tcp_port(c.port)]),
        }]
    };
    // The hub's own Pods: its activation turn and `agents chat` go to the
    // Gateway Pod's address.
    ingress.push(NetworkPolicyIngressRule {
        from: Some(vec![hub_peer(c)]),
        ports: Some(vec![tcp_port(c.port)]),
    });
    let mut dns_ns = BTreeMap::new();
    dns_ns.insert(
        "kubernetes.io/metadata.name".to_string(),
        c.dns.namespace.clone(),
    );
    let mut egress = vec![NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(match_labels(&dns_ns)),
            pod_selector: Some(match_labels(&c.dns.pod_labels)),
            ..Default::default()
        }]),
        ports: Some(
            ["UDP", "TCP"]
                .into_iter()
                .map(|p| NetworkPolicyPort {
                    port: Some(IntOrString::Int(53)),
                    protocol: Some(p.into()),
                    ..Default::default()
                })
                .collect(),
        ),
    }];
    if spec.tunnel_proxy.is_some() {
        egress.push(NetworkPolicyEgressRule {
            to: Some(vec![hub_peer(c)]),
            ports: Some(vec![tcp_port(c.hub.port)]),
        });
    }
    let direct = if spec.tunnel_proxy.is_some() {
        &[][..]
    } else {
        &c.harness_egress[..]
    };
    for rule in direct {
        egress.push(NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: rule.cidr.clone(),
                    except: None,
                }),
                ..Default::default()
            }]),
            ports: Some(rule.ports.iter().map(|&p| tcp_port(p)).collect()),
        });
    }
    NetworkPolicy {
        metadata: meta(&names(&spec.agent).gateway, spec, c),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(&agent_selector(&spec.agent))),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(ingress),
            egress: Some(egress),
        }),
    }
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// `name` from the transport Secret's `key`.
fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An HTTP GET probe of the Gateway port.
fn http_probe(path: &str, period: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("gateway".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failure_threshold),
        timeout_seconds: Some(2),
        ..Default::default()
    }
}

/// The OpenClaw runtime's environment in a Gateway Pod: its config file
/// (read-only, from the transport Secret), its state on the Gateway's
/// claim, its tokens by `secretKeyRef`, no update or discovery attempts,
/// and the tunnel ingress' CA for Node's TLS (the Codex plugin's WebSocket
/// to the ingress).
fn runtime_env(spec: &GatewaySpec, c: &GatewayConfig) -> Vec<EnvVar> {
    use clawfed_proto::work::runtime::GATEWAY_TOKEN_ENV;
    let Some(r) = &spec.runtime else {
        return Vec::new();
    };
    let secret = transport_secret_name(&spec.agent, c);
    let mut out = vec![
        env(
            "OPENCLAW_CONFIG_PATH",
            format!("{TRANSPORT_DIR}/{RUNTIME_CONFIG_KEY}"),
        ),
        env("OPENCLAW_CONFIG_READONLY", "1"),
        env("OPENCLAW_NO_AUTO_UPDATE", "1"),
        env("OPENCLAW_DISABLE_BONJOUR", "1"),
        secret_env(GATEWAY_TOKEN_ENV, &secret, RUNTIME_TOKEN_KEY),
    ];
    if r.app_server_token.is_some() {
        out.push(secret_env(
            APP_SERVER_TOKEN_ENV,
            &secret,
            APP_SERVER_TOKEN_KEY,
        ));
    }
    if spec.tunnel_ca_pem.is_some() {
        out.push(env(
            "NODE_EXTRA_CA_CERTS",
            format!("{TRANSPORT_DIR}/{}", TRANSPORT_KEYS[4]),
        ));
    }
    if let Some(limit) = gateway_resources(c)
        .limits
        .get("memory")
        .and_then(|m| clawfed_kube::quantity::bytes(m))
    {
        out.push(env(
            "NODE_OPTIONS",
            clawfed_proto::work::runtime::node_options(limit),
        ));
    }
    out
}

/// The Gateway container's resources: the installation's, or, when it sets
/// none, what the OpenClaw runtime was measured to need.
pub fn gateway_resources(c: &GatewayConfig) -> clawfed_proto::work::Resources {
    if c.resources == Default::default() {
        clawfed_proto::work::runtime::default_resources()
    } else {
        c.resources.clone()
    }
}

/// The hardened Pod spec: non-root, RuntimeDefault seccomp, all capabilities
/// dropped, no privilege escalation, read-only root filesystem, no
/// automounted ServiceAccount token (only the configured projected service
/// principal token, read-only), trusted nodes only; the PVC at
/// [`DATA_DIR`], the transport Secret read-only at [`TRANSPORT_DIR`].
pub fn pod_spec(spec: &GatewaySpec, c: &GatewayConfig, image: &str) -> PodSpec {
    use clawfed_proto::work::harness::{
        SERVICE_PRINCIPAL_DIR, SERVICE_PRINCIPAL_ENV, SERVICE_PRINCIPAL_FILE,
    };
    let n = names(&spec.agent);
    let token_file = c
        .service_principal
        .as_ref()
        .map(|_| format!("{SERVICE_PRINCIPAL_DIR}/{SERVICE_PRINCIPAL_FILE}"));
    PodSpec {
        service_account_name: Some(n.gateway.clone()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        node_selector: (!c.node_selector.is_empty()).then(|| c.node_selector.clone()),
        tolerations: clawfed_kube::scheduling::tolerations(&c.tolerations),
        image_pull_secrets: (!c.image_pull_secrets.is_empty()).then(|| {
            c.image_pull_secrets
                .iter()
                .map(|name| k8s_openapi::api::core::v1::LocalObjectReference { name: name.clone() })
                .collect()
        }),
        security_context: Some(security::hardened_pod(GATEWAY_UID)),
        containers: vec![Container {
            name: "gateway".into(),
            image: Some(clawfed_proto::registry::mirrored(
                &c.registry_mirrors,
                image,
            )),
            ports: Some(vec![ContainerPort {
                name: Some("gateway".into()),
                container_port: c.port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            env: Some(
                vec![
                    env("CLAWFED_AGENT", spec.agent.clone()),
                    env("CLAWFED_REVISION", spec.revision.to_string()),
                    env(HARNESS_ENDPOINT_ENV, spec.harness_endpoint.clone()),
                    env("CLAWFED_TRANSPORT_DIR", TRANSPORT_DIR),
                    env("OPENCLAW_STATE_DIR", DATA_DIR),
                    env("HOME", "/tmp"),
                ]
                .into_iter()
                .chain(
                    spec.tunnel_proxy
                        .as_ref()
                        .map(|url| env(TUNNEL_PROXY_ENV, url.clone())),
                )
                .chain(spec.tunnel_ca_pem.as_ref().map(|_| {
                    env(
                        TUNNEL_CA_FILE_ENV,
                        format!("{TRANSPORT_DIR}/{}", TRANSPORT_KEYS[4]),
                    )
                }))
                .chain(token_file.map(|f| env(SERVICE_PRINCIPAL_ENV, f)))
                .chain(runtime_env(spec, c))
                .collect(),
            ),
            // The runtime's own health endpoints (JSON bodies; an unknown
            // path would answer 200 with HTML); a port that accepts is all
            // another Gateway image promises.
            startup_probe: spec
                .runtime
                .as_ref()
                .map(|_| http_probe(clawfed_proto::work::runtime::STARTUP_PATH, 2, 90)),
            readiness_probe: Some(match &spec.runtime {
                Some(_) => http_probe(clawfed_proto::work::runtime::READY_PATH, 5, 3),
                None => Probe {
                    tcp_socket: Some(TCPSocketAction {
                        port: IntOrString::String("gateway".into()),
                        host: None,
                    }),
                    period_seconds: Some(5),
                    ..Default::default()
                },
            }),
            liveness_probe: spec
                .runtime
                .as_ref()
                .map(|_| http_probe(clawfed_proto::work::runtime::LIVE_PATH, 10, 6)),
            resources: {
                let r = gateway_resources(c);
                Some(ResourceRequirements {
                    requests: quantities(&r.requests),
                    limits: quantities(&r.limits),
                    ..Default::default()
                })
            },
            security_context: Some(security::hardened_container()),
            volume_mounts: Some(
                vec![
                    VolumeMount {
                        name: "tmp".into(),
                        mount_path: "/tmp".into(),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "data".into(),
                        mount_path: DATA_DIR.into(),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "transport".into(),
                        mount_path: TRANSPORT_DIR.into(),
                        read_only: Some(true),
                        ..Default::default()
                    },
                ]
                .into_iter()
                .chain(
                    c.service_principal
                        .as_ref()
                        .map(|_| clawfed_kube::token::mount(SERVICE_PRINCIPAL_DIR)),
                )
                .collect(),
            ),
            ..Default::default()
        }],
        volumes: Some(
            vec![
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: n.data.clone(),
                        read_only: Some(false),
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "transport".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(transport_secret_name(&spec.agent, c)),
                        default_mode: Some(0o440),
                        optional: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain(c.service_principal.as_ref().map(|sp| {
                clawfed_kube::token::volume(
                    &sp.audience,
                    sp.expiration_seconds,
                    SERVICE_PRINCIPAL_FILE,
                )
            }))
            .collect(),
        ),
        ..Default::default()
    }
}

/// The Gateway Deployment: exactly one replica and `Recreate` (the PVC is
/// ReadWriteOnce and holds SQLite, so two Pods must never overlap). Its
/// selector spans revisions; the template carries the revision.
pub fn deployment(spec: &GatewaySpec, c: &GatewayConfig, image: &str) -> Deployment {
    let n = names(&spec.agent);
    let mut pod_labels = owner_labels(&spec.tenant, &spec.agent);
    pod_labels.insert(labels::REVISION.to_string(), spec.revision.to_string());
    Deployment {
        metadata: revision_meta(&n.gateway, spec, c),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: match_labels(&agent_selector(&spec.agent)),
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                rolling_update: None,
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(BTreeMap::from([(
                        labels::REVISION_ID_ANNOTATION.to_string(),
                        spec.revision_id.clone(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(pod_spec(spec, c, image)),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The revision's Service `<agent>-r<N>-gateway`, selecting that revision's
/// Gateway Pod.
pub fn service(spec: &GatewaySpec, c: &GatewayConfig) -> Service {
    Service {
        metadata: revision_meta(&service_name(&spec.agent, spec.revision), spec, c),
        spec: Some(ServiceSpec {
            selector: Some(revision_selector(&spec.agent, spec.revision)),
            ports: Some(vec![ServicePort {
                name: Some("gateway".into()),
                port: c.port,
                target_port: Some(IntOrString::String("gateway".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The part of the HTTPRoute spec clawfed writes and reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// The Gateway(s) the route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentRef>,
    /// Hostnames served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    /// Rules; clawfed writes one.
    #[serde(default)]
    pub rules: Vec<RouteRule>,
}

/// A Gateway reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentRef {
    /// API group of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name.
    pub name: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// One route rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    /// Backends.
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
}

/// A backend Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// Service name.
    pub name: String,
    /// Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// The route object's body (`spec` only; the rest is metadata).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
struct RouteBody {
    #[serde(default)]
    spec: RouteSpec,
}

/// The Agent's HTTPRoute `<agent>`, attached to the configured Gateway, with
/// its one backend the revision's Service. Ownership labels name the Agent.
pub fn route(
    namespace: &str,
    tenant: &str,
    agent: &str,
    revision: i64,
    c: &GatewayConfig,
    routing: &PrivateRouting,
) -> Result<DynamicObject> {
    let ar = route_api_resource(&routing.api_version)?;
    let mut obj = DynamicObject::new(&names(agent).route, &ar).within(namespace);
    let mut l = owner_labels(tenant, agent);
    l.insert(labels::REVISION.to_string(), revision.to_string());
    obj.metadata.labels = Some(l);
    let body = RouteBody {
        spec: RouteSpec {
            parent_refs: vec![ParentRef {
                group: Some("gateway.networking.k8s.io".into()),
                kind: Some("Gateway".into()),
                name: routing.gateway_name.clone(),
                namespace: Some(routing.gateway_namespace.clone()),
            }],
            hostnames: vec![format!(
                "{agent}.{}",
                routing.hostname_suffix.trim_start_matches('.')
            )],
            rules: vec![RouteRule {
                backend_refs: vec![BackendRef {
                    name: service_name(agent, revision),
                    port: Some(c.port),
                }],
            }],
        },
    };
    obj.data = serde_json::to_value(body).map_err(|e| Error::Invalid {
        field: "route",
        reason: e.to_string(),
    })?;
    Ok(obj)
}

/// The spec of a route read back from the cluster.
pub fn route_spec(obj: &DynamicObject) -> Result<RouteSpec> {
    let body: RouteBody = serde_json::from_value(obj.data.clone()).map_err(|e| Error::Invalid {
        field: "route",
        reason: format!("unreadable HTTPRoute spec: {e}"),
    })?;
    Ok(body.spec)
}

/// The revision a route's backends point at, when they all name Services of
/// `agent` of one revision; `None` otherwise.
pub fn routed_revision(agent: &str, spec: &RouteSpec) -> Option<i64> {
    let prefix = format!("{agent}-r");
    let mut revisions = spec.rules.iter().flat_map(|r| &r.backend_refs).map(|b| {
        b.name
            .strip_prefix(&prefix)
            .and_then(|s| s.strip_suffix("-gateway"))
            .and_then(|s| s.parse::<i64>().ok())
    });
    let first = revisions.next()??;
    revisions.all(|r| r == Some(first)).then_some(first)
}

/// Name of the tenant's ResourceQuota in its Gateway namespace.
pub const NAMESPACE_QUOTA: &str = "clawfed-tenant-quota";
/// Name of the tenant's LimitRange (container defaults) there.
pub const NAMESPACE_LIMITS: &str = "clawfed-container-defaults";

fn namespace_meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(BTreeMap::from([(
            labels::MANAGED_BY.to_string(),
            labels::MANAGER.to_string(),
        )])),
        ..Default::default()
    }
}

/// A tenant's managed Gateway runtime namespace `name`: marked with the
/// clawfed namespace id it serves (the hub changes and deletes only
/// namespaces with that mark) and labelled with the tenant's name (for
/// operators: `-l clawfed.io/tenant=<name>`), Pod Security `restricted`
/// enforced.
pub fn gateway_namespace(name: &str, namespace_id: &str, tenant: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([
                (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
                (
                    labels::GATEWAY_NAMESPACE.to_string(),
                    namespace_id.to_owned(),
                ),
                (labels::TENANT.to_string(), tenant.to_owned()),
                (
                    "pod-security.kubernetes.io/enforce".to_string(),
                    "restricted".to_string(),
                ),
            ])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The RoleBinding of the hub's Gateway runtime ClusterRole to the hub's
/// own ServiceAccount, in `namespace` only: the hub's rights over Gateway
/// objects exist only in the Gateway namespaces it made. Named after the
/// ServiceAccount, so two identities never overwrite each other's.
pub fn runtime_binding(namespace: &str, c: &GatewayConfig) -> RoleBinding {
    RoleBinding {
        metadata: namespace_meta(&c.service_account.name, namespace),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: c.runtime_cluster_role.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: c.service_account.name.clone(),
            namespace: Some(c.service_account.namespace.clone()),
            ..Default::default()
        }]),
    }
}

/// The tenant's ResourceQuota in its Gateway namespace (quotas apply to
/// each physical namespace separately).
pub fn namespace_quota(namespace: &str, c: &GatewayConfig) -> ResourceQuota {
    ResourceQuota {
        metadata: namespace_meta(NAMESPACE_QUOTA, namespace),
        spec: Some(ResourceQuotaSpec {
            hard: quantities(&c.namespace_quota),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The tenant's container defaults in its Gateway namespace.
pub fn namespace_limits(namespace: &str, c: &GatewayConfig) -> LimitRange {
    let d = &c.container_defaults;
    LimitRange {
        metadata: namespace_meta(NAMESPACE_LIMITS, namespace),
        spec: Some(LimitRangeSpec {
            limits: vec![LimitRangeItem {
                type_: "Container".into(),
                default: quantities(&d.default_limit),
                default_request: quantities(&d.default_request),
                ..Default::default()
            }],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{TlsBundle, Transport};
    use clawfed_proto::work::EgressRule;

    const DIGEST_IMAGE: &str = "reg.example/gateway@sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn spec() -> GatewaySpec {
        GatewaySpec {
            tenant: "team-a".into(),
            namespace_id: "ns-id-a".into(),
            agent: "a1".into(),
            revision: 3,
            revision_id: "rev-3".into(),
            image: Some(DIGEST_IMAGE.into()),
            harness_endpoint: "http://a1-r3-harness.oce-abc.svc:8080".into(),
            tunnel_proxy: None,
            tunnel_ca_pem: None,
            transport: Transport {
                gateway_token: "s3cr3t-value".into(),
                tls: Some(TlsBundle {
                    cert_pem: "CERT-PEM-VALUE".into(),
                    key_pem: "KEY-PEM-VALUE".into(),
                    ca_pem: Some("CA".into()),
                }),
            },
            runtime: None,
        }
    }

    fn config() -> GatewayConfig {
        GatewayConfig {
            storage_class: Some("block-ssd".into()),
            workspace_size: "2Gi".into(),
            node_selector: BTreeMap::from([("trusted".into(), "true".into())]),
            trusted_proxy_cidrs: vec!["10.0.0.0/24".into()],
            approved_client_namespace_labels: BTreeMap::from([("team".into(), "edge".into())]),
            approved_client_pod_labels: BTreeMap::from([("app".into(), "client".into())]),
            harness_egress: vec![EgressRule {
                cidr: "192.0.2.0/24".into(),
                ports: vec![8080],
            }],
            private_routing: Some(PrivateRouting {
                gateway_name: "edge".into(),
                gateway_namespace: "edge-system".into(),
                hostname_suffix: "agents.example".into(),
                api_version: crate::gateway::DEFAULT_ROUTE_API_VERSION.into(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn deployment_is_one_hardened_recreate_replica_of_the_revision() {
        let (s, c) = (spec(), config());
        let image = validate(&s, &c).expect("valid");
        let d = deployment(&s, &c, &image);
        assert_eq!(d.metadata.name.as_deref(), Some("a1-gateway"));
        assert_eq!(
            d.metadata.namespace,
            Some(clawfed_proto::naming::gateway_namespace(
                "oce-gateways",
                "ns-id-a"
            )),
            "the tenant's own Gateway namespace"
        );
        let ds = d.spec;
        assert_eq!(ds.replicas, Some(1));
        assert_eq!(
            ds.strategy.and_then(|s| s.type_).as_deref(),
            Some("Recreate")
        );
        assert_eq!(ds.selector.match_labels, Some(agent_selector("a1")));
        let tl = ds.template.metadata.and_then(|m| m.labels).expect("labels");
        for (k, v) in [
            (labels::AGENT, "a1"),
            (labels::REVISION, "3"),
            (labels::WORKLOAD_ROLE, "gateway"),
            (labels::TENANT, "team-a"),
            (labels::MANAGED_BY, labels::MANAGER),
        ] {
            assert_eq!(tl.get(k).map(String::as_str), Some(v), "{k}");
        }
        let pod = ds.template.spec.expect("pod");
        assert_eq!(pod.service_account_name.as_deref(), Some("a1-gateway"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.node_selector, Some(c.node_selector.clone()));
        let psc = pod.security_context.expect("psc");
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(
            psc.seccomp_profile.map(|s| s.type_).as_deref(),
            Some("RuntimeDefault")
        );
        let ctr = &pod.containers[0];
        assert_eq!(ctr.image.as_deref(), Some(DIGEST_IMAGE));
        let sc = ctr.security_context.clone().expect("sc");
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.privileged, Some(false));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        let env = ctr.env.clone().expect("env");
        assert!(env.iter().any(|e| e.name == HARNESS_ENDPOINT_ENV
            && e.value.as_deref() == Some("http://a1-r3-harness.oce-abc.svc:8080")));
        let mounts = ctr.volume_mounts.clone().expect("mounts");
        let transport = mounts.iter().find(|m| m.name == "transport").expect("m");
        assert_eq!(transport.read_only, Some(true));
        let volumes = pod.volumes.expect("volumes");
        let claim = volumes
            .iter()
            .find_map(|v| v.persistent_volume_claim.clone())
            .expect("pvc volume");
        assert_eq!(claim.claim_name, "a1-gateway-data");
        // The transport material reaches the Pod only by reference.
        let json = serde_json::to_string(&pod.containers).expect("json");
        assert!(!json.contains("s3cr3t") && !json.contains("PEM-VALUE"));
    }

    #[test]
    fn transport_prefix_and_service_principal_reach_the_objects() {
        let s = spec();
        // Defaults: the old name, no token of any kind.
        let c = config();
        assert_eq!(
            transport_secret(&s, &c).metadata.name.as_deref(),
            Some("a1-gateway-transport")
        );
        let pod = pod_spec(&s, &c, DIGEST_IMAGE);
        assert!(pod.volumes.iter().flatten().all(|v| v.projected.is_none()));

        let mut c = config();
        c.transport_secret_prefix = Some("openclaw-transport".into());
        c.service_principal = Some(clawfed_proto::work::ServicePrincipal {
            audience: "openclaw.example".into(),
            expiration_seconds: 900,
        });
        assert!(validate_config(&c).is_ok());
        assert_eq!(
            transport_secret(&s, &c).metadata.name.as_deref(),
            Some("openclaw-transport-a1")
        );
        let pod = pod_spec(&s, &c, DIGEST_IMAGE);
        assert_eq!(pod.automount_service_account_token, Some(false));
        let volumes = pod.volumes.clone().expect("volumes");
        assert!(
            volumes
                .iter()
                .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref())
                    == Some("openclaw-transport-a1"))
        );
        let token = volumes
            .iter()
            .find_map(|v| v.projected.clone())
            .and_then(|p| p.sources)
            .and_then(|s| s[0].service_account_token.clone())
            .expect("projected token");
        assert_eq!(token.audience.as_deref(), Some("openclaw.example"));
        assert_eq!(token.expiration_seconds, Some(900));
        let mount = pod.containers[0]
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == clawfed_kube::token::VOLUME)
            .expect("mount");
        assert_eq!(mount.read_only, Some(true));

        c.transport_secret_prefix = Some("x".repeat(MAX_TRANSPORT_PREFIX + 1));
        assert!(validate_config(&c).is_err(), "prefix too long");
        c.transport_secret_prefix = Some("Bad_Prefix".into());
        assert!(validate_config(&c).is_err());
        c.transport_secret_prefix = None;
        c.service_principal = Some(clawfed_proto::work::ServicePrincipal {
            audience: String::new(),
            expiration_seconds: 900,
        });
        assert!(validate_config(&c).is_err());
    }

    #[test]
    fn digest_is_enforced_when_required() {
        let mut s = spec();
        s.image = Some("reg.example/gateway:1.0".into());
        let mut c = config();
        // Set by the hub from policy.requireImmutableDigest.
        c.require_immutable_digest = true;
        assert!(matches!(validate(&s, &c), Err(Error::Digest(_))));
        c.require_immutable_digest = false;
        assert_eq!(validate(&s, &c).as_deref(), Ok("reg.example/gateway:1.0"));
        s.image = None;
        assert_eq!(validate(&s, &c), Err(Error::NoImage));
        c.default_image = Some("reg.example/default:2".into());
        assert_eq!(validate(&s, &c).as_deref(), Ok("reg.example/default:2"));
        c.require_immutable_digest = true;
        assert!(validate_config(&c).is_err(), "tagged default image");
    }

    #[test]
    fn transport_secret_never_holds_the_model_credential() {
        let sec = transport_secret(&spec(), &config());
        let data = sec.string_data.expect("data");
        assert!(data.keys().all(|k| TRANSPORT_KEYS.contains(&k.as_str())));
        assert_eq!(
            data.get("gateway-token").map(String::as_str),
            Some("s3cr3t-value")
        );
        for k in data.keys() {
            let k = k.to_ascii_lowercase();
            assert!(
                !k.contains("model") && !k.contains("api") && !k.contains("credential"),
                "{k}"
            );
        }
        // The spec has no field for anything else: an extra key is refused
        // when the spec is decoded.
        let mut v = serde_json::to_value(spec()).expect("json");
        v["transport"]["MODEL_API_KEY"] = "sk-x".into();
        assert!(serde_json::from_value::<GatewaySpec>(v).is_err());
        // And secret values never reach Debug output.
        let dbg = format!("{:?}", spec());
        assert!(!dbg.contains("s3cr3t") && !dbg.contains("PEM-VALUE"));
    }

    #[test]
    fn claim_account_and_service() {
        let (s, c) = (spec(), config());
        let pvc = data_claim(&s, &c).spec.expect("spec");
        assert_eq!(pvc.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(pvc.storage_class_name.as_deref(), Some("block-ssd"));
        assert_eq!(
            pvc.resources
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned()),
            Some(Quantity("2Gi".into()))
        );
        let sa = service_account(&s, &c);
        assert_eq!(sa.automount_service_account_token, Some(false));
        assert_eq!(sa.metadata.name.as_deref(), Some("a1-gateway"));
        let svc = service(&s, &c);
        assert_eq!(svc.metadata.name.as_deref(), Some("a1-r3-gateway"));
        assert_eq!(
            svc.spec.and_then(|s| s.selector),
            Some(revision_selector("a1", 3))
        );
        for l in [sa.metadata.labels, svc.metadata.labels] {
            let l = l.expect("labels");
            assert_eq!(
                l.get(labels::MANAGED_BY).map(String::as_str),
                Some(labels::MANAGER)
            );
            assert_eq!(l.get(labels::TENANT).map(String::as_str), Some("team-a"));
        }
    }

    #[test]
    fn tunnel_mode_gives_the_proxy_and_egress_only_to_the_hub() {
        let mut s = spec();
        s.tunnel_proxy = Some("https://198.18.0.1:8444".into());
        s.tunnel_ca_pem = Some("-----BEGIN CERTIFICATE-----\nx\n".into());
        let secret = transport_secret(&s, &config()).string_data.expect("data");
        assert_eq!(
            secret.get("tunnel-ca.crt").map(String::as_str),
            s.tunnel_ca_pem.as_deref()
        );
        let np = network_policy(&s, &config()).spec.expect("spec");
        let egress = np.egress.expect("egress");
        assert_eq!(
            egress.len(),
            2,
            "dns + the hub's tunnel ingress, no Harness CIDR"
        );
        let hub = &egress[1];
        assert_eq!(
            hub.ports.as_ref().map(|p| p[0].port.clone()),
            Some(Some(IntOrString::Int(8444)))
        );
        let peer = &hub.to.as_ref().expect("to")[0];
        assert!(peer.ip_block.is_none());
        assert_eq!(
            peer.pod_selector
                .as_ref()
                .and_then(|p| p.match_labels.clone()),
            Some(GatewayConfig::default().hub.pod_labels)
        );
        let pod = pod_spec(&s, &config(), "img@sha256:x");
        let env = pod.containers[0].env.clone().expect("env");
        assert!(
            env.iter().any(|e| e.name == TUNNEL_PROXY_ENV
                && e.value.as_deref() == Some("https://198.18.0.1:8444"))
        );
        assert!(env.iter().any(|e| e.name == TUNNEL_CA_FILE_ENV
            && e.value.as_deref() == Some("/var/run/clawfed/transport/tunnel-ca.crt")));
        // Direct mode: no proxy in the Pod.
        let env = pod_spec(&spec(), &config(), "img@sha256:x").containers[0]
            .env
            .clone()
            .expect("env");
        assert!(env.iter().all(|e| e.name != TUNNEL_PROXY_ENV));
        s.tunnel_proxy = Some("ftp://x".into());
        assert!(validate(&s, &config()).is_err());
    }

    #[test]
    fn network_policy_denies_by_default_and_lets_in_only_approved_peers() {
        let np = network_policy(&spec(), &config()).spec.expect("spec");
        assert_eq!(
            np.pod_selector.and_then(|s| s.match_labels),
            Some(agent_selector("a1"))
        );
        assert_eq!(
            np.policy_types,
            Some(vec!["Ingress".to_string(), "Egress".to_string()])
        );
        let ingress = np.ingress.expect("ingress");
        assert_eq!(ingress.len(), 2, "approved clients, and the hub");
        let hub = ingress[1].from.clone().expect("from");
        assert_eq!(
            hub[0].pod_selector.clone().and_then(|s| s.match_labels),
            Some(config().hub.pod_labels),
            "the hub's Pods send the activation turn"
        );
        let from = ingress[0].from.clone().expect("from");
        assert_eq!(from.len(), 2);
        assert!(from[0].namespace_selector.is_some() && from[0].pod_selector.is_some());
        assert_eq!(
            from[1].ip_block.as_ref().map(|b| b.cidr.as_str()),
            Some("10.0.0.0/24")
        );
        let egress = np.egress.expect("egress");
        assert_eq!(egress.len(), 2, "dns + harness");
        assert_eq!(
            egress[1]
                .to
                .as_ref()
                .and_then(|t| t[0].ip_block.clone())
                .map(|b| b.cidr),
            Some("192.0.2.0/24".into())
        );

        // Nothing approved: only the hub, never "from everywhere".
        let bare = network_policy(&spec(), &GatewayConfig::default())
            .spec
            .expect("spec");
        let only_hub = bare.ingress.expect("ingress");
        assert_eq!(only_hub.len(), 1);
        assert!(
            only_hub[0]
                .from
                .iter()
                .flatten()
                .all(|p| p.pod_selector.is_some()
                    && p.namespace_selector.is_some()
                    && p.ip_block.is_none())
        );
        let mut c = config();
        c.approved_client_namespace_labels.clear();
        c.trusted_proxy_cidrs.clear();
        let np = network_policy(&spec(), &c).spec.expect("spec");
        let peer = &np.ingress.expect("ingress")[0].from.clone().expect("from")[0];
        assert!(peer.namespace_selector.is_none() && peer.pod_selector.is_some());

        // The Compute Driver's gatewayClients: one exact peer each, the
        // namespace by name.
        let mut c = GatewayConfig {
            clients: vec![super::super::ClientPeer {
                namespace: "openclaw-system".into(),
                pod_labels: BTreeMap::from([("app".into(), "approved".into())]),
            }],
            ..Default::default()
        };
        let np = network_policy(&spec(), &c).spec.expect("spec");
        let rule = &np.ingress.expect("ingress")[0];
        let peer = &rule.from.clone().expect("from")[0];
        assert_eq!(
            peer.namespace_selector.clone().and_then(|s| s.match_labels),
            Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                "openclaw-system".to_string()
            )]))
        );
        assert_eq!(
            peer.pod_selector.clone().and_then(|s| s.match_labels),
            Some(BTreeMap::from([(
                "app".to_string(),
                "approved".to_string()
            )]))
        );
        assert_eq!(rule.ports, Some(vec![tcp_port(c.port)]));
        c.clients[0].pod_labels.clear();
        assert!(validate_config(&c).is_err(), "never a whole namespace");
    }

    #[test]
    fn air_gapped_gateway_pods_pull_from_the_mirror_with_credentials() {
        let c = GatewayConfig {
            registry_mirrors: vec!["registry.example=mirror.internal:5000".parse().unwrap()],
            image_pull_secrets: vec!["mirror-pull".into()],
            ..config()
        };
        let digest = format!("@sha256:{}", "c".repeat(64));
        let pod = pod_spec(
            &spec(),
            &c,
            &format!("registry.example/openclaw-gateway{digest}"),
        );
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some(format!("mirror.internal:5000/openclaw-gateway{digest}").as_str())
        );
        assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "mirror-pull");
        let bad = GatewayConfig {
            image_pull_secrets: vec!["Not_A_Name".into()],
            ..config()
        };
        assert!(validate_config(&bad).is_err());
    }

    #[test]
    fn gateway_pods_get_the_installations_tolerations() {
        let c = GatewayConfig {
            tolerations: vec![clawfed_proto::work::Toleration {
                key: Some("trusted".into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }],
            ..config()
        };
        let pod = pod_spec(&spec(), &c, "img@sha256:x");
        let t = pod.tolerations.expect("tolerations");
        assert_eq!(t[0].key.as_deref(), Some("trusted"));
        assert_eq!(pod_spec(&spec(), &config(), "img").tolerations, None);
    }

    #[test]
    fn a_long_prefix_and_a_long_agent_name_still_name_a_dns_label() {
        let mut c = GatewayConfig {
            transport_secret_prefix: Some("p".repeat(MAX_TRANSPORT_PREFIX)),
            ..Default::default()
        };
        validate_config(&c).expect("the longest prefix");
        let a = transport_secret_name(&"a".repeat(40), &c);
        let b = transport_secret_name(&"b".repeat(40), &c);
        assert_ne!(a, b, "unique per Agent");
        for name in [&a, &b] {
            validate_dns1123_label(name).expect("a DNS label");
        }
        c.transport_secret_prefix = Some("oc".into());
        assert_eq!(transport_secret_name("a1", &c), "oc-a1");
        c.transport_secret_prefix = Some("p".repeat(MAX_TRANSPORT_PREFIX + 1));
        assert!(validate_config(&c).is_err());
    }

    #[test]
    fn route_attaches_to_the_gateway_and_points_at_the_revision() {
        let c = config();
        let routing = c.private_routing.clone().expect("routing");
        let r = route("gw-ns", "team-a", "a1", 2, &c, &routing).expect("route");
        assert_eq!(r.metadata.namespace.as_deref(), Some("gw-ns"));
        assert_eq!(r.metadata.name.as_deref(), Some("a1"));
        let types = r.types.clone().expect("types");
        assert_eq!(types.api_version, "gateway.networking.k8s.io/v1");
        assert_eq!(types.kind, "HTTPRoute");
        let s = route_spec(&r).expect("spec");
        assert_eq!(s.parent_refs[0].name, "edge");
        assert_eq!(s.parent_refs[0].namespace.as_deref(), Some("edge-system"));
        assert_eq!(s.hostnames, vec!["a1.agents.example".to_string()]);
        assert_eq!(s.rules[0].backend_refs[0].name, "a1-r2-gateway");
        assert_eq!(routed_revision("a1", &s), Some(2));
        assert_eq!(routed_revision("a2", &s), None);
        assert!(route_api_resource("v1").is_err());
        assert!(route_api_resource("g/v/x").is_err());
    }

    #[test]
    fn names_are_dns_labels_within_63() {
        let agent = "a".repeat(40);
        assert!(validate_names(&agent, 1).is_ok());
        assert!(validate_names(&agent, 99_999_999_999).is_ok());
        assert!(validate_names(&agent, i64::MAX).is_err(), "64+ chars");
        assert!(validate_names(&"a".repeat(41), 1).is_err());
        assert!(validate_names("A1", 1).is_err());
        assert!(validate_names("a1", -1).is_err());
    }

    #[test]
    fn config_and_endpoint_checks() {
        assert!(validate_config(&config()).is_ok());
        let mut c = config();
        c.trusted_proxy_cidrs = vec!["10.0.0.0".into()];
        assert!(validate_config(&c).is_err());
        let mut c = config();
        c.harness_egress[0].cidr = "10.0.0.0/33".into();
        assert!(validate_config(&c).is_err());
        let mut s = spec();
        s.harness_endpoint = "http://user:pw@host:1".into();
        assert!(validate(&s, &config()).is_err());
        s.harness_endpoint = "ftp://host".into();
        assert!(validate(&s, &config()).is_err());
        let yaml = "namespacePrefix: gw\nprivateRouting:\n  gatewayName: edge\n  gatewayNamespace: edge\n  hostnameSuffix: x.example\n";
        let c: GatewayConfig = serde_yaml_ng::from_str(yaml).expect("yaml");
        assert_eq!(c.namespace_prefix, "gw");
        assert!(validate_config(&c).is_ok());
        assert_eq!(
            c.private_routing.map(|r| r.api_version).as_deref(),
            Some(crate::gateway::DEFAULT_ROUTE_API_VERSION)
        );
        assert!(serde_yaml_ng::from_str::<GatewayConfig>("bogus: 1").is_err());
    }

    #[test]
    fn the_shared_namespace_key_is_refused_naming_its_replacement() {
        let c: GatewayConfig =
            serde_yaml_ng::from_str("namespace: clawfed-gateways\n").expect("yaml");
        let err = validate_config(&c).expect_err("removed").to_string();
        assert!(err.contains("gateways.namespace"), "{err}");
        assert!(err.contains("namespacePrefix"), "{err}");
        let mut c = config();
        c.namespace_prefix =
            "p".repeat(clawfed_proto::naming::MAX_GATEWAY_NAMESPACE_PREFIX_LEN + 1);
        let err = validate_config(&c).expect_err("too long").to_string();
        assert!(err.contains("namespacePrefix"), "{err}");
    }

    #[test]
    fn a_gateway_namespace_is_marked_bound_and_bounded() {
        let mut c = config();
        c.namespace_quota = BTreeMap::from([("pods".into(), "10".into())]);
        c.container_defaults.default_limit = BTreeMap::from([("cpu".into(), "500m".into())]);
        let ns = gateway_namespace("oce-gateways-x", "id-1", "team-a");
        let l = ns.metadata.labels.expect("labels");
        assert_eq!(l.get(labels::TENANT).map(String::as_str), Some("team-a"));
        assert_eq!(
            l.get(labels::GATEWAY_NAMESPACE).map(String::as_str),
            Some("id-1")
        );
        assert_eq!(
            l.get(labels::MANAGED_BY).map(String::as_str),
            Some(labels::MANAGER)
        );
        assert_eq!(
            l.get("pod-security.kubernetes.io/enforce")
                .map(String::as_str),
            Some("restricted")
        );
        let b = runtime_binding("oce-gateways-x", &c);
        assert_eq!(b.metadata.namespace.as_deref(), Some("oce-gateways-x"));
        assert_eq!(b.role_ref.kind, "ClusterRole");
        assert_eq!(
            b.role_ref.name,
            crate::gateway::DEFAULT_RUNTIME_CLUSTER_ROLE
        );
        let subjects = b.subjects.expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, "clawfed-hub");
        assert_eq!(subjects[0].namespace.as_deref(), Some("clawfed-system"));
        let q = namespace_quota("oce-gateways-x", &c);
        assert_eq!(
            q.spec.and_then(|s| s.hard),
            Some(BTreeMap::from([("pods".into(), Quantity("10".into()))]))
        );
        let lr = namespace_limits("oce-gateways-x", &c);
        assert_eq!(
            lr.spec.expect("spec").limits[0].default,
            Some(BTreeMap::from([("cpu".into(), Quantity("500m".into()))]))
        );
    }
}
