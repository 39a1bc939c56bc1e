//! The specs of namespace work: `namespace.ensure` (the tenant's
//! data-plane namespace and its guard rails: quota, container defaults,
//! network flows) and `namespace.delete`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::default_harness_port;

/// `namespace.ensure`: the tenant's data-plane namespace and its guard rails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceWork {
    /// The clawfed namespace (tenant) name: value of the tenant label.
    pub tenant: String,
    /// The clawfed namespace id: input of the naming rule and value of the
    /// namespace-id annotation.
    pub namespace_id: String,
    /// Adopt this operator-named namespace instead of `oce-<hash15>`; the spoke
    /// refuses unless an operator labelled it [`crate::labels::ADOPTABLE`]`=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<String>,
    /// ResourceQuota `spec.hard` (e.g. `pods: "20"`, `requests.cpu: "8"`).
    #[serde(default)]
    pub quota: BTreeMap<String, String>,
    /// LimitRange container defaults.
    #[serde(default)]
    pub container_defaults: ContainerDefaults,
    /// The flows Harness Pods need beyond DNS.
    #[serde(default)]
    pub network: HarnessNetwork,
}

/// LimitRange `Container` defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerDefaults {
    /// `defaultRequest` (e.g. `cpu: 100m`, `memory: 128Mi`).
    #[serde(default)]
    pub default_request: BTreeMap<String, String>,
    /// `default` limits.
    #[serde(default)]
    pub default_limit: BTreeMap<String, String>,
}

/// Network flows allowed to and from Harness Pods (everything else is denied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HarnessNetwork {
    /// The spoke's own Pods may reach the Harness port: the tunnel's last
    /// hop (the Gateway reaches its Harness through the hub and the spoke).
    #[serde(default = "yes")]
    pub ingress_from_spoke: bool,
    /// Further sources (CIDRs) allowed to reach the Harness port: direct
    /// mode only, where the Gateway's addresses reach it over a flat network.
    #[serde(default)]
    pub ingress_from_cidrs: Vec<String>,
    /// The Harness port opened to `ingressFromCidrs`.
    #[serde(default = "default_harness_port")]
    pub harness_port: i32,
    /// Egress destinations (e.g. the model provider's addresses).
    #[serde(default)]
    pub egress: Vec<EgressRule>,
    /// The DNS Pods every data-plane Pod may reach (the installation's
    /// `network.dns`); `None` keeps the spoke's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsTarget>,
}

/// Where a cluster's DNS Pods run: the DNS egress NetworkPolicies admit
/// them (UDP and TCP 53) and nothing else by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DnsTarget {
    /// Namespace of the DNS Pods.
    pub namespace: String,
    /// Labels of the DNS Pods.
    pub pod_labels: BTreeMap<String, String>,
}

/// One allowed egress flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressRule {
    /// Destination CIDR.
    pub cidr: String,
    /// Destination TCP ports.
    pub ports: Vec<i32>,
}

fn yes() -> bool {
    true
}

impl Default for HarnessNetwork {
    fn default() -> Self {
        Self {
            ingress_from_spoke: true,
            ingress_from_cidrs: Vec::new(),
            harness_port: default_harness_port(),
            egress: Vec::new(),
            dns: None,
        }
    }
}

/// `namespace.delete`: tear the tenant's data-plane namespace down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceDeleteWork {
    /// The clawfed namespace (tenant) name.
    pub tenant: String,
    /// The clawfed namespace id.
    pub namespace_id: String,
    /// The physical namespace (as resolved by `namespace.ensure`).
    pub data_plane_namespace: String,
}
