//! The OpenClaw Kubernetes Compute Driver's installation section
//! (`drivers.compute.configuration`), accepted in the hub's config file as
//! an operator brings it, and the Harness settings it resolves to.
//!
//! Every struct rejects unknown fields, so a typo anywhere is an error
//! naming its full key path (the loader in [`crate::config`] reports the
//! path). Settings the hub also has sections of its own for (the Gateway's,
//! the image policy, the control-cluster credentials) are folded into those
//! sections by the loader, which refuses a setting given in both places;
//! the Harness and namespace settings ([`WorkloadSettings`]) exist only
//! here. Pure: no I/O.
//!
//! The seed's own spellings (`resources.namespace.{quota,containerDefaults}`,
//! `network.gatewayTrustedProxyCidrs`, `network.gatewayClients`,
//! `servicePrincipalCredentials.mode`, `runtime.gatewayStorageClassName`)
//! are the documented ones; clawfed's earlier spellings stay accepted as
//! aliases, and giving a key in both spellings is an error naming both.
//!
//! The schema is documented, with full examples, in
//! `docs/compute-driver-config.md`, `deploy/examples/compute-driver.yaml`
//! and (the seed's section, byte for byte)
//! `deploy/examples/seed-compute-driver.yaml`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clawfed_proto::naming::validate_dns1123_label;
use clawfed_proto::work::{
    ContainerDefaults, DnsTarget, EgressRule, Resources, ServicePrincipal, Toleration, Workspace,
    harness,
};
use serde::Deserialize;

/// Where the section sits in the hub's config file: every key path in an
/// error starts with it.
pub const SECTION: &str = "drivers.compute.configuration";

/// A setting of the section that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config field {key}: {reason}")]
pub struct Invalid {
    /// The full key path, e.g.
    /// `drivers.compute.configuration.runtime.nativeOpenClawSessionCapacity`.
    pub key: String,
    /// Why it is refused.
    pub reason: String,
}

fn invalid(key: &str, reason: impl Into<String>) -> Invalid {
    Invalid {
        key: format!("{SECTION}.{key}"),
        reason: reason.into(),
    }
}

/// `drivers.compute.configuration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComputeDriverConfig {
    /// How the hub reaches the control cluster's apiserver.
    #[serde(default)]
    pub authentication: Option<Authentication>,
    /// Gateway and agent images and the digest rule.
    #[serde(default)]
    pub images: Images,
    /// Requests and limits, the namespace quota and container defaults.
    #[serde(default)]
    pub resources: DriverResources,
    /// Ports, DNS, trusted proxies, Harness egress.
    #[serde(default)]
    pub network: Network,
    /// Projected ServiceAccount tokens as workload credentials.
    #[serde(default)]
    pub service_principal_credentials: ServicePrincipalCredentials,
    /// Node placement, storage, sessions, secrets, seccomp.
    #[serde(default)]
    pub runtime: Runtime,
}

/// `authentication`: explicit, never the ambient kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Authentication {
    /// `inCluster` (the hub's ServiceAccount) or `kubeconfig`.
    pub mode: AuthMode,
    /// The kubeconfig file (its current context); only with `kubeconfig`.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
}

/// `authentication.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AuthMode {
    /// The in-cluster ServiceAccount credentials.
    InCluster,
    /// A named kubeconfig file.
    Kubeconfig,
}

/// `images`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Images {
    /// Gateway image of Agents that name none.
    #[serde(default)]
    pub gateway: Option<String>,
    /// Harness (agent) image of Agents that name none.
    #[serde(default)]
    pub agent: Option<String>,
    /// Every image must be pinned as `name@sha256:<64 hex>`.
    #[serde(default)]
    pub require_immutable_digest: Option<bool>,
}

/// `resources`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DriverResources {
    /// Gateway container requests and limits.
    #[serde(default)]
    pub gateway: Option<Resources>,
    /// Default agent (Harness) container requests and limits; an Agent
    /// spec's `resources` override them key by key.
    #[serde(default)]
    pub agent: Option<Resources>,
    /// The guard rails of every physical namespace (the seed's spelling).
    #[serde(default)]
    pub namespace: Option<NamespaceResources>,
    /// Alias of `namespace.quota`.
    #[serde(default)]
    pub namespace_quota: Option<BTreeMap<String, String>>,
    /// Alias of `namespace.containerDefaults`, as LimitRange keys
    /// (`defaultRequest`, `defaultLimit`).
    #[serde(default)]
    pub container_defaults: Option<ContainerDefaults>,
}

/// `resources.namespace`: applied separately to each physical namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceResources {
    /// ResourceQuota `spec.hard`.
    #[serde(default)]
    pub quota: Option<BTreeMap<String, String>>,
    /// LimitRange container defaults: `requests` are `defaultRequest`,
    /// `limits` are `default`.
    #[serde(default)]
    pub container_defaults: Option<Resources>,
}

impl DriverResources {
    /// The namespace quota, whichever spelling gave it.
    pub fn quota(&self) -> BTreeMap<String, String> {
        self.namespace
            .as_ref()
            .and_then(|n| n.quota.clone())
            .or_else(|| self.namespace_quota.clone())
            .unwrap_or_default()
    }

    /// The container defaults, whichever spelling gave them.
    pub fn container_defaults(&self) -> ContainerDefaults {
        match self
            .namespace
            .as_ref()
            .and_then(|n| n.container_defaults.as_ref())
        {
            Some(r) => ContainerDefaults {
                default_request: r.requests.clone(),
                default_limit: r.limits.clone(),
            },
            None => self.container_defaults.clone().unwrap_or_default(),
        }
    }
}

/// `network`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Network {
    /// Port the Gateway container serves on.
    #[serde(default)]
    pub gateway_port: Option<i32>,
    /// Port the Harness serves on (default 8080).
    #[serde(default)]
    pub harness_port: Option<i32>,
    /// The DNS Pods Gateway and Harness NetworkPolicies admit.
    #[serde(default)]
    pub dns: Option<DnsTarget>,
    /// CIDRs of the proxies allowed to reach Gateways (and trusted for
    /// forwarded client addresses by the OpenClaw gateway).
    #[serde(default)]
    pub gateway_trusted_proxy_cidrs: Option<Vec<String>>,
    /// Alias of `gatewayTrustedProxyCidrs`.
    #[serde(default)]
    pub trusted_proxy_cidrs: Option<Vec<String>>,
    /// The Pods allowed to call Gateways, each an exact namespace and Pod
    /// labels.
    #[serde(default)]
    pub gateway_clients: Option<Vec<GatewayClient>>,
    /// Egress allowed to Harness Pods (e.g. the model provider).
    #[serde(default)]
    pub egress: Vec<EgressRule>,
}

/// One approved Gateway client: Pods with `podLabels` in the namespace
/// named `namespace`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GatewayClient {
    /// The client's namespace, by name.
    pub namespace: String,
    /// The client Pods' labels (required: never a whole namespace).
    pub pod_labels: BTreeMap<String, String>,
}

/// `servicePrincipalCredentials.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ServicePrincipalMode {
    /// No token.
    Disabled,
    /// A projected ServiceAccount token for `audience`.
    ProjectedServiceAccountToken,
}

/// `servicePrincipalCredentials`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServicePrincipalCredentials {
    /// `disabled` or `projectedServiceAccountToken` (the seed's spelling).
    #[serde(default)]
    pub mode: Option<ServicePrincipalMode>,
    /// Alias of `mode`: `true` is `projectedServiceAccountToken`.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The token's audience (required when enabled).
    #[serde(default)]
    pub audience: Option<String>,
    /// Token lifetime (600..86400, default 900).
    #[serde(default = "default_token_seconds")]
    pub expiration_seconds: i64,
}

impl Default for ServicePrincipalCredentials {
    fn default() -> Self {
        Self {
            mode: None,
            enabled: None,
            audience: None,
            expiration_seconds: default_token_seconds(),
        }
    }
}

fn default_token_seconds() -> i64 {
    harness::SERVICE_PRINCIPAL_TOKEN_SECONDS
}

impl ServicePrincipalCredentials {
    /// Whether workloads get the token, whichever spelling said so.
    pub fn projected(&self) -> bool {
        match self.mode {
            Some(m) => m == ServicePrincipalMode::ProjectedServiceAccountToken,
            None => self.enabled == Some(true),
        }
    }
}

/// `runtime`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Runtime {
    /// Node selector of Harness Pods.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Node selector of Gateway Pods.
    #[serde(default)]
    pub gateway_node_selector: Option<BTreeMap<String, String>>,
    /// Taints Harness (and embedded) Pods tolerate (clawfed's key).
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Taints Gateway Pods tolerate (clawfed's key).
    #[serde(default)]
    pub gateway_tolerations: Option<Vec<Toleration>>,
    /// StorageClass of the Gateway PVC.
    #[serde(default)]
    pub gateway_storage_class_name: Option<String>,
    /// Alias of `gatewayStorageClassName`.
    #[serde(default)]
    pub gateway_storage_class: Option<String>,
    /// Size of a dedicated Harness' workspace PVC (default 1Gi).
    #[serde(default)]
    pub workspace_size: Option<String>,
    /// StorageClass of the workspace PVC (default: the cluster's).
    #[serde(default)]
    pub workspace_storage_class: Option<String>,
    /// Sessions a native OpenClaw Harness holds (1..1024, default 8).
    #[serde(default)]
    pub native_open_claw_session_capacity: Option<u32>,
    /// The transport Secret of an Agent's Gateway is `<prefix>-<agent>`.
    #[serde(default)]
    pub transport_secret_prefix: Option<String>,
    /// Localhost seccomp profile of Codex Harness Pods (relative path).
    #[serde(default)]
    pub codex_seccomp_profile: Option<String>,
}

/// What the Harness work and namespace work of every revision carry,
/// resolved from the section (defaults where it says nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSettings {
    /// Default agent container resources (the Agent spec overrides).
    pub agent_resources: Resources,
    /// ResourceQuota `spec.hard`.
    pub namespace_quota: BTreeMap<String, String>,
    /// LimitRange container defaults.
    pub container_defaults: ContainerDefaults,
    /// Node selector of Harness Pods.
    pub node_selector: BTreeMap<String, String>,
    /// Taints Harness Pods tolerate.
    pub tolerations: Vec<Toleration>,
    /// The workspace PVC of dedicated Harnesses.
    pub workspace: Workspace,
    /// `OPENCLAW_SESSION_CAPACITY` of native OpenClaw Harnesses.
    pub session_capacity: u32,
    /// Localhost seccomp profile of Codex Harnesses.
    pub codex_seccomp_profile: Option<String>,
    /// Projected token of Harness Pods.
    pub service_principal: Option<ServicePrincipal>,
    /// The Harness port (work, Service, NetworkPolicy, Gateway, tunnel).
    pub harness_port: i32,
    /// DNS target of the data-plane NetworkPolicies; `None`: the spoke's.
    pub dns: Option<DnsTarget>,
    /// Harness egress.
    pub egress: Vec<EgressRule>,
}

impl Default for WorkloadSettings {
    fn default() -> Self {
        ComputeDriverConfig::default().workload()
    }
}

impl Runtime {
    /// The Gateway PVC's StorageClass, whichever spelling gave it.
    pub fn gateway_storage_class(&self) -> Option<&String> {
        self.gateway_storage_class_name
            .as_ref()
            .or(self.gateway_storage_class.as_ref())
    }
}

impl Network {
    /// The trusted proxy CIDRs, whichever spelling gave them.
    pub fn trusted_proxy_cidrs(&self) -> Option<&Vec<String>> {
        self.gateway_trusted_proxy_cidrs
            .as_ref()
            .or(self.trusted_proxy_cidrs.as_ref())
    }
}

impl ComputeDriverConfig {
    /// Refuses a key given in both its seed spelling and its alias: (the
    /// seed's key, the alias, each given?), keys relative to the section.
    fn check_aliases(&self) -> Result<(), Invalid> {
        let ns = self.resources.namespace.as_ref();
        let both = [
            (
                "resources.namespace.quota",
                "resources.namespaceQuota",
                ns.is_some_and(|n| n.quota.is_some()),
                self.resources.namespace_quota.is_some(),
            ),
            (
                "resources.namespace.containerDefaults",
                "resources.containerDefaults",
                ns.is_some_and(|n| n.container_defaults.is_some()),
                self.resources.container_defaults.is_some(),
            ),
            (
                "network.gatewayTrustedProxyCidrs",
                "network.trustedProxyCidrs",
                self.network.gateway_trusted_proxy_cidrs.is_some(),
                self.network.trusted_proxy_cidrs.is_some(),
            ),
            (
                "servicePrincipalCredentials.mode",
                "servicePrincipalCredentials.enabled",
                self.service_principal_credentials.mode.is_some(),
                self.service_principal_credentials.enabled.is_some(),
            ),
            (
                "runtime.gatewayStorageClassName",
                "runtime.gatewayStorageClass",
                self.runtime.gateway_storage_class_name.is_some(),
                self.runtime.gateway_storage_class.is_some(),
            ),
        ];
        for (seed, alias, a, b) in both {
            if a && b {
                return Err(invalid(
                    seed,
                    format!("also given as its alias {SECTION}.{alias}; keep one"),
                ));
            }
        }
        Ok(())
    }

    /// The service principal the section gives workloads, when enabled.
    pub fn service_principal(&self) -> Option<ServicePrincipal> {
        let s = &self.service_principal_credentials;
        s.projected().then(|| ServicePrincipal {
            audience: s.audience.clone().unwrap_or_default(),
            expiration_seconds: s.expiration_seconds,
        })
    }

    /// The Harness and namespace settings, defaults filled in.
    pub fn workload(&self) -> WorkloadSettings {
        let r = &self.runtime;
        WorkloadSettings {
            agent_resources: self.resources.agent.clone().unwrap_or_default(),
            namespace_quota: self.resources.quota(),
            container_defaults: self.resources.container_defaults(),
            node_selector: r.node_selector.clone(),
            tolerations: r.tolerations.clone(),
            workspace: Workspace {
                size: r.workspace_size.clone().unwrap_or_else(|| "1Gi".into()),
                storage_class: r.workspace_storage_class.clone(),
            },
            session_capacity: r
                .native_open_claw_session_capacity
                .unwrap_or(harness::DEFAULT_SESSION_CAPACITY),
            codex_seccomp_profile: r.codex_seccomp_profile.clone(),
            service_principal: self.service_principal(),
            harness_port: self.network.harness_port.unwrap_or(harness::DEFAULT_PORT),
            dns: self.network.dns.clone(),
            egress: self.network.egress.clone(),
        }
    }

    /// Checks every value; errors name the full key path.
    pub fn validate(&self) -> Result<(), Invalid> {
        self.check_aliases()?;
        if let Some(a) = &self.authentication {
            match (a.mode, &a.kubeconfig) {
                (AuthMode::Kubeconfig, None) => {
                    return Err(invalid(
                        "authentication.kubeconfig",
                        "required when authentication.mode is kubeconfig",
                    ));
                }
                (AuthMode::InCluster, Some(_)) => {
                    return Err(invalid(
                        "authentication.kubeconfig",
                        "only with authentication.mode kubeconfig (inCluster uses the ServiceAccount)",
                    ));
                }
                _ => {}
            }
        }
        let images = &self.images;
        for (key, image) in [
            ("images.gateway", &images.gateway),
            ("images.agent", &images.agent),
        ] {
            let Some(image) = image else { continue };
            if image.is_empty() || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(key, "must be a non-empty image reference"));
            }
            if images.require_immutable_digest == Some(true)
                && let Err(e) = clawfed_proto::work::check_image_digest(image)
            {
                return Err(invalid(
                    key,
                    format!("images.requireImmutableDigest is set: {e}"),
                ));
            }
        }
        let res = &self.resources;
        if let Some(r) = &res.gateway {
            resources("resources.gateway", r)?;
        }
        if let Some(r) = &res.agent {
            resources("resources.agent", r)?;
        }
        if let Some(n) = &res.namespace {
            if let Some(q) = &n.quota {
                quantities("resources.namespace.quota", q)?;
            }
            if let Some(d) = &n.container_defaults {
                resources("resources.namespace.containerDefaults", d)?;
            }
        }
        if let Some(q) = &res.namespace_quota {
            quantities("resources.namespaceQuota", q)?;
        }
        if let Some(d) = &res.container_defaults {
            quantities(
                "resources.containerDefaults.defaultRequest",
                &d.default_request,
            )?;
            quantities("resources.containerDefaults.defaultLimit", &d.default_limit)?;
        }
        let net = &self.network;
        for (key, port) in [
            ("network.gatewayPort", net.gateway_port),
            ("network.harnessPort", net.harness_port),
        ] {
            if let Some(p) = port {
                tcp_port(key, p)?;
            }
        }
        if let Some(dns) = &net.dns {
            validate_dns1123_label(&dns.namespace)
                .map_err(|e| invalid("network.dns.namespace", e.to_string()))?;
            if dns.pod_labels.is_empty() {
                // An empty selector would admit every Pod of the namespace.
                return Err(invalid("network.dns.podLabels", "must not be empty"));
            }
            labels("network.dns.podLabels", &dns.pod_labels)?;
        }
        let proxy_key = if net.gateway_trusted_proxy_cidrs.is_some() {
            "network.gatewayTrustedProxyCidrs"
        } else {
            "network.trustedProxyCidrs"
        };
        for (i, cidr) in net.trusted_proxy_cidrs().into_iter().flatten().enumerate() {
            let key = format!("{proxy_key}[{i}]");
            check_cidr(&key, cidr)?;
            if cidr.ends_with("/0") {
                return Err(invalid(&key, "cannot trust every source"));
            }
        }
        for (i, client) in net.gateway_clients.iter().flatten().enumerate() {
            let key = format!("network.gatewayClients[{i}]");
            validate_dns1123_label(&client.namespace)
                .map_err(|e| invalid(&format!("{key}.namespace"), e.to_string()))?;
            if client.pod_labels.is_empty() {
                // An empty selector would admit every Pod of the namespace.
                return Err(invalid(&format!("{key}.podLabels"), "must not be empty"));
            }
            labels(&format!("{key}.podLabels"), &client.pod_labels)?;
        }
        for (i, rule) in net.egress.iter().enumerate() {
            check_cidr(&format!("network.egress[{i}].cidr"), &rule.cidr)?;
            if rule.ports.is_empty() {
                return Err(invalid(
                    &format!("network.egress[{i}].ports"),
                    "must name at least one port",
                ));
            }
            for (j, p) in rule.ports.iter().enumerate() {
                tcp_port(&format!("network.egress[{i}].ports[{j}]"), *p)?;
            }
        }
        let sp = &self.service_principal_credentials;
        if sp.projected() && sp.audience.as_deref().is_none_or(str::is_empty) {
            return Err(invalid(
                "servicePrincipalCredentials.audience",
                "required when servicePrincipalCredentials.mode is projectedServiceAccountToken",
            ));
        }
        clawfed_kube::token::check_expiration(sp.expiration_seconds).map_err(|e| {
            invalid(
                "servicePrincipalCredentials.expirationSeconds",
                e.to_string(),
            )
        })?;
        let rt = &self.runtime;
        labels("runtime.nodeSelector", &rt.node_selector)?;
        for (key, list) in [
            ("runtime.tolerations", Some(&rt.tolerations)),
            (
                "runtime.gatewayTolerations",
                rt.gateway_tolerations.as_ref(),
            ),
        ] {
            for (i, t) in list.into_iter().flatten().enumerate() {
                t.check()
                    .map_err(|(field, reason)| invalid(&format!("{key}[{i}].{field}"), reason))?;
            }
        }
        if let Some(sel) = &rt.gateway_node_selector {
            labels("runtime.gatewayNodeSelector", sel)?;
        }
        for (key, class) in [
            (
                "runtime.gatewayStorageClassName",
                &rt.gateway_storage_class_name,
            ),
            ("runtime.gatewayStorageClass", &rt.gateway_storage_class),
            ("runtime.workspaceStorageClass", &rt.workspace_storage_class),
        ] {
            if let Some(class) = class {
                dns_subdomain(key, class)?;
            }
        }
        if let Some(size) = &rt.workspace_size {
            clawfed_kube::quantity::check(size)
                .map_err(|e| invalid("runtime.workspaceSize", e.to_string()))?;
        }
        if let Some(n) = rt.native_open_claw_session_capacity
            && !(1..=1024).contains(&n)
        {
            return Err(invalid(
                "runtime.nativeOpenClawSessionCapacity",
                format!("{n} is not between 1 and 1024"),
            ));
        }
        if let Some(prefix) = &rt.transport_secret_prefix {
            validate_dns1123_label(prefix)
                .map_err(|e| invalid("runtime.transportSecretPrefix", e.to_string()))?;
            let max = crate::gateway::objects::MAX_TRANSPORT_PREFIX;
            if prefix.len() > max {
                return Err(invalid(
                    "runtime.transportSecretPrefix",
                    format!("at most {max} characters, so <prefix>-<agent> stays a DNS label"),
                ));
            }
        }
        if let Some(path) = &rt.codex_seccomp_profile {
            clawfed_kube::security::check_localhost_profile(path)
                .map_err(|e| invalid("runtime.codexSeccompProfile", e.to_string()))?;
        }
        Ok(())
    }
}

fn tcp_port(key: &str, port: i32) -> Result<(), Invalid> {
    if (1..=65535).contains(&port) {
        Ok(())
    } else {
        Err(invalid(key, format!("{port} is not a TCP port (1..65535)")))
    }
}

fn resources(key: &str, r: &Resources) -> Result<(), Invalid> {
    quantities(&format!("{key}.requests"), &r.requests)?;
    quantities(&format!("{key}.limits"), &r.limits)
}

/// Resource names (`cpu`, `requests.memory`, `count/pods`) and quantities.
fn quantities(key: &str, m: &BTreeMap<String, String>) -> Result<(), Invalid> {
    for (name, value) in m {
        let ok_name = !name.is_empty()
            && name.len() <= 253
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'/'));
        if !ok_name {
            return Err(invalid(
                &format!("{key}.{name}"),
                "is not a Kubernetes resource name",
            ));
        }
        clawfed_kube::quantity::check(value)
            .map_err(|e| invalid(&format!("{key}.{name}"), e.to_string()))?;
    }
    Ok(())
}

fn check_cidr(key: &str, cidr: &str) -> Result<(), Invalid> {
    if clawfed_proto::naming::is_cidr(cidr) {
        Ok(())
    } else {
        Err(invalid(key, format!("{cidr:?} is not an IP/prefix CIDR")))
    }
}

fn dns_subdomain(key: &str, name: &str) -> Result<(), Invalid> {
    if clawfed_proto::naming::is_dns1123_subdomain(name) {
        Ok(())
    } else {
        Err(invalid(key, format!("{name:?} is not a DNS subdomain")))
    }
}

/// Label keys (`[prefix/]name`) and values, as Kubernetes accepts them.
fn labels(key: &str, m: &BTreeMap<String, String>) -> Result<(), Invalid> {
    for (k, v) in m {
        let field = format!("{key}.{k}");
        if let Some(reason) = clawfed_proto::naming::label_key_error(k) {
            return Err(invalid(&field, reason));
        }
        if !(v.is_empty() || clawfed_proto::naming::is_label_name(v)) {
            return Err(invalid(
                &field,
                format!(
                    "label value {v:?} must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
                ),
            ));
        }
    }
    Ok(())
}
