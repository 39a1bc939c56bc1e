//! The `drivers` section: the Compute Driver's own installation YAML, which
//! settings it shares with clawfed's sections, and how it is folded into
//! them ([`Config::set_compute_driver`]).

use serde::Deserialize;

use super::{Config, ConfigError};

/// `drivers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DriversConfig {
    /// `drivers.compute`.
    #[serde(default)]
    pub compute: Option<ComputeDriverSection>,
}

/// `drivers.compute`: the Compute Driver's own installation YAML under
/// `configuration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComputeDriverSection {
    /// `drivers.compute.id`: which driver the section is for. clawfed is the
    /// Kubernetes Compute Driver; another id is refused (absent: that one).
    #[serde(default)]
    pub id: Option<String>,
    /// `drivers.compute.configuration`.
    #[serde(default)]
    pub configuration: crate::compute_driver::ComputeDriverConfig,
}
/// Settings of the Compute Driver section that clawfed also has keys of
/// its own for: (driver key under `drivers.compute.configuration`, the own
/// keys it would contradict).
pub(super) const SHARED_KEYS: [(&str, &[&str]); 16] = [
    ("authentication", &["gateway.kubeconfig"]),
    (
        "images.gateway",
        &["policy.defaultGatewayImage", "gateway.options.defaultImage"],
    ),
    ("images.agent", &["policy.defaultAgentImage"]),
    (
        "images.requireImmutableDigest",
        &["policy.requireImmutableDigest"],
    ),
    ("resources.gateway", &["gateway.options.resources"]),
    ("network.gatewayPort", &["gateway.options.port"]),
    ("network.dns", &["gateway.options.dns"]),
    (
        "network.gatewayTrustedProxyCidrs",
        &["gateway.options.trustedProxyCidrs"],
    ),
    (
        "network.trustedProxyCidrs",
        &["gateway.options.trustedProxyCidrs"],
    ),
    ("network.gatewayClients", &["gateway.options.clients"]),
    (
        "runtime.gatewayNodeSelector",
        &["gateway.options.nodeSelector"],
    ),
    (
        "runtime.gatewayTolerations",
        &["gateway.options.tolerations"],
    ),
    (
        "runtime.gatewayStorageClassName",
        &["gateway.options.storageClass"],
    ),
    (
        "runtime.gatewayStorageClass",
        &["gateway.options.storageClass"],
    ),
    (
        "runtime.transportSecretPrefix",
        &["gateway.options.transportSecretPrefix"],
    ),
    (
        "servicePrincipalCredentials",
        &["gateway.options.servicePrincipal"],
    ),
];

/// The id of the OpenClaw Kubernetes Compute Driver (`drivers.compute.id`).
pub const KUBERNETES_COMPUTE_DRIVER: &str = "compute-kubernetes";

impl Config {
    /// Takes `driver` (the Compute Driver's `configuration`) as this
    /// installation's: checks it, keeps it for the Harness settings
    /// ([`Self::workload_settings`]) and writes what it says about
    /// Gateways, images and control-cluster credentials into clawfed's own
    /// sections, so the rest of the hub reads one place. What it leaves out
    /// keeps clawfed's setting. (The file loader has already refused
    /// settings given both ways.)
    pub fn set_compute_driver(
        &mut self,
        driver: crate::compute_driver::ComputeDriverConfig,
    ) -> Result<(), ConfigError> {
        driver.validate()?;
        if let Some(a) = &driver.authentication {
            self.gateway.kubeconfig = match a.mode {
                crate::compute_driver::AuthMode::InCluster => None,
                crate::compute_driver::AuthMode::Kubeconfig => a.kubeconfig.clone(),
            };
        }
        let images = &driver.images;
        if let Some(image) = &images.gateway {
            self.policy.default_gateway_image = image.clone();
            self.gateway.options.default_image = None;
        }
        if let Some(image) = &images.agent {
            self.policy.default_agent_image = Some(image.clone());
        }
        if let Some(require) = images.require_immutable_digest {
            self.policy.require_immutable_digest = require;
        }
        let options = &mut self.gateway.options;
        if let Some(r) = &driver.resources.gateway {
            options.resources = r.clone();
        }
        let net = &driver.network;
        if let Some(port) = net.gateway_port {
            options.port = port;
        }
        if let Some(dns) = &net.dns {
            options.dns = crate::gateway::DnsPeer {
                namespace: dns.namespace.clone(),
                pod_labels: dns.pod_labels.clone(),
            };
        }
        if let Some(cidrs) = net.trusted_proxy_cidrs() {
            options.trusted_proxy_cidrs = cidrs.clone();
        }
        if let Some(clients) = &net.gateway_clients {
            options.clients = clients
                .iter()
                .map(|c| crate::gateway::ClientPeer {
                    namespace: c.namespace.clone(),
                    pod_labels: c.pod_labels.clone(),
                })
                .collect();
        }
        let rt = &driver.runtime;
        if let Some(sel) = &rt.gateway_node_selector {
            options.node_selector = sel.clone();
        }
        if let Some(t) = &rt.gateway_tolerations {
            options.tolerations = t.clone();
        }
        if let Some(class) = rt.gateway_storage_class() {
            options.storage_class = Some(class.clone());
        }
        if let Some(prefix) = &rt.transport_secret_prefix {
            options.transport_secret_prefix = Some(prefix.clone());
        }
        if let Some(sp) = driver.service_principal() {
            options.service_principal = Some(sp);
        }
        let id = self.drivers.compute.as_ref().and_then(|c| c.id.clone());
        self.drivers.compute = Some(ComputeDriverSection {
            id,
            configuration: driver,
        });
        Ok(())
    }

    /// The Harness and namespace settings of every revision: the Compute
    /// Driver section's, defaults where it (or the section) is absent.
    pub fn workload_settings(&self) -> crate::compute_driver::WorkloadSettings {
        self.drivers
            .compute
            .as_ref()
            .map(|c| c.configuration.workload())
            .unwrap_or_default()
    }
}
