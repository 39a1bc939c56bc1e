//! The tenant's data-plane namespace: resolution (pure), the namespace object
//! and its guard rails (ResourceQuota, LimitRange, NetworkPolicies, the
//! spoke's tenant RoleBinding).
//!
//! Resolution fails closed: a namespace that claims the tenant with a wrong
//! name or incomplete markers, two namespaces claiming one tenant, or an
//! expected name already taken by someone else are errors, never guesses.
//! A namespace clawfed did not create is adopted only while an operator's
//! [`labels::ADOPTABLE`] mark is on it (the admission policy in
//! deploy/spoke enforces the same on the apiserver).

use std::collections::BTreeMap;

use clawfed_kube::guardrails;
use clawfed_proto::labels;
use clawfed_proto::naming::{
    data_plane_namespace, is_legacy_data_plane_shape, validate_dns1123_label,
};
use clawfed_proto::work::NamespaceWork;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::owner_labels;
use crate::config::SpokeConfig;
use clawfed_proto::readiness::HARNESS_ROLE;

/// Name of the ResourceQuota in each data-plane namespace.
pub const QUOTA: &str = "clawfed-quota";
/// Name of the LimitRange in each data-plane namespace.
pub const LIMITS: &str = "clawfed-defaults";
/// Name of the default-deny NetworkPolicy.
pub const DENY_ALL: &str = "clawfed-default-deny";
/// Name of the DNS egress NetworkPolicy.
pub const ALLOW_DNS: &str = "clawfed-allow-dns";
/// Name of the Harness flows NetworkPolicy.
pub const HARNESS_FLOWS: &str = "clawfed-harness-flows";
/// Name of the RoleBinding granting the spoke its tenant role.
pub const SPOKE_BINDING: &str = "clawfed-spoke";

/// Why a data-plane namespace cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceError {
    /// The tenant name is not a DNS-1123 label or the namespace id is empty.
    #[error("invalid tenant identity: {0}")]
    InvalidIdentity(String),
    /// A namespace claims the tenant but has neither the expected name, a
    /// legacy shape, nor an adoption marker.
    #[error("namespace {name} claims tenant {tenant} but has a wrong name (expected {expected})")]
    WrongName {
        /// The claiming namespace.
        name: String,
        /// The tenant.
        tenant: String,
        /// The expected name.
        expected: String,
    },
    /// A namespace carries some but not all of the tenant's markers (or
    /// markers of another tenant).
    #[error("namespace {name} has inconsistent clawfed markers for tenant {tenant}")]
    InconsistentMarkers {
        /// The namespace.
        name: String,
        /// The tenant.
        tenant: String,
    },
    /// More than one namespace claims the tenant.
    #[error("namespaces {names:?} all claim tenant {tenant}")]
    TwoClaims {
        /// The tenant.
        tenant: String,
        /// The claiming namespaces.
        names: Vec<String>,
    },
    /// The namespace to adopt does not exist.
    #[error("namespace {0} to adopt does not exist")]
    AdoptMissing(String),
    /// The namespace to adopt (or adopted before) lacks the operator's
    /// adoption mark, so clawfed may not take it over.
    #[error(
        "namespace {0} is not marked for adoption: an operator must label it {key}=true first",
        key = labels::ADOPTABLE
    )]
    NotAdoptable(String),
    /// The namespace name is taken by an object clawfed does not own.
    #[error("namespace {0} exists and does not belong to this tenant")]
    Taken(String),
    /// The namespace does not (or no longer) belong to the tenant.
    #[error("namespace {name} is not the data-plane namespace of tenant {tenant}")]
    NotOwned {
        /// The namespace.
        name: String,
        /// The tenant.
        tenant: String,
    },
}

/// What discovery saw of a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceObservation {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
}

impl From<&Namespace> for NamespaceObservation {
    fn from(ns: &Namespace) -> Self {
        NamespaceObservation {
            name: ns.metadata.name.clone().unwrap_or_default(),
            labels: ns.metadata.labels.clone().unwrap_or_default(),
            annotations: ns.metadata.annotations.clone().unwrap_or_default(),
        }
    }
}

/// One marker set: the tenant label, the namespace-id annotation and the
/// manager label value.
struct Markers {
    tenant: &'static str,
    namespace_id: &'static str,
    manager: &'static str,
}

/// clawfed's own markers, then the OpenClaw Compute Driver's.
const MARKER_SETS: [Markers; 2] = [
    Markers {
        tenant: labels::TENANT,
        namespace_id: labels::NAMESPACE_ID_ANNOTATION,
        manager: labels::MANAGER,
    },
    Markers {
        tenant: labels::openclaw::TENANT,
        namespace_id: labels::openclaw::NAMESPACE_ID_ANNOTATION,
        manager: labels::openclaw::MANAGER,
    },
];

impl NamespaceObservation {
    /// True when the namespace has any marker (of either set) of tenant
    /// `tenant` or id `id`.
    fn claims(&self, tenant: &str, id: &str) -> bool {
        MARKER_SETS.iter().any(|m| {
            self.labels.get(m.tenant).is_some_and(|t| t == tenant)
                || self
                    .annotations
                    .get(m.namespace_id)
                    .is_some_and(|a| a == id)
        })
    }

    fn has_markers(&self, m: &Markers, tenant: &str, id: &str) -> bool {
        self.labels.get(m.tenant).is_some_and(|t| t == tenant)
            && self
                .annotations
                .get(m.namespace_id)
                .is_some_and(|a| a == id)
            && self
                .labels
                .get(labels::MANAGED_BY)
                .is_some_and(|v| v == m.manager)
    }

    /// True when it has all three markers of the tenant exactly: clawfed's
    /// own, or the OpenClaw Compute Driver's.
    pub fn has_all_markers(&self, tenant: &str, id: &str) -> bool {
        MARKER_SETS.iter().any(|m| self.has_markers(m, tenant, id))
    }

    /// True when it carries the OpenClaw Compute Driver's complete marker
    /// set and not clawfed's: made by an existing OpenClaw installation.
    pub fn made_by_openclaw(&self, tenant: &str, id: &str) -> bool {
        self.has_markers(&MARKER_SETS[1], tenant, id)
            && !self.has_markers(&MARKER_SETS[0], tenant, id)
    }

    /// True when an operator marked it for adoption.
    pub fn adoptable(&self) -> bool {
        self.labels
            .get(labels::ADOPTABLE)
            .is_some_and(|v| v == "true")
    }

    fn has_any_clawfed_marker(&self) -> bool {
        MARKER_SETS.iter().any(|m| {
            self.labels.contains_key(m.tenant) || self.annotations.contains_key(m.namespace_id)
        })
    }
}

/// How the tenant's namespace is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Create `oce-<hash15>`.
    Create(String),
    /// Use the existing, valid namespace (new-style, legacy or adopted).
    Existing(String),
    /// Adopt the operator-named namespace.
    Adopt(String),
}

impl Resolution {
    /// The namespace name.
    pub fn name(&self) -> &str {
        match self {
            Resolution::Create(n) | Resolution::Existing(n) | Resolution::Adopt(n) => n,
        }
    }

    /// True for an adopted namespace (new or existing).
    pub fn adopted(&self, observed: &[NamespaceObservation]) -> bool {
        match self {
            Resolution::Adopt(_) => true,
            Resolution::Create(_) => false,
            Resolution::Existing(n) => observed.iter().any(|o| {
                &o.name == n && o.labels.get(labels::ADOPTED).is_some_and(|v| v == "true")
            }),
        }
    }
}

/// Resolves the tenant's namespace from what discovery saw: `observed` holds
/// every namespace that carries the tenant label, the namespace-id annotation
/// or the manager label, plus the expected and the adopted name when they
/// exist. Pure.
pub fn resolve(
    work: &NamespaceWork,
    observed: &[NamespaceObservation],
) -> Result<Resolution, NamespaceError> {
    let tenant = work.tenant.as_str();
    let id = work.namespace_id.as_str();
    validate_dns1123_label(tenant)
        .map_err(|e| NamespaceError::InvalidIdentity(format!("tenant {tenant:?}: {e}")))?;
    if id.is_empty() {
        return Err(NamespaceError::InvalidIdentity("empty namespace id".into()));
    }
    let expected = data_plane_namespace(id);
    let adopt = work.adopt.as_deref();
    if let Some(a) = adopt {
        validate_dns1123_label(a)
            .map_err(|e| NamespaceError::InvalidIdentity(format!("adopt {a:?}: {e}")))?;
    }

    let mut valid = Vec::new();
    for ns in observed.iter().filter(|o| o.claims(tenant, id)) {
        if !ns.has_all_markers(tenant, id) {
            return Err(NamespaceError::InconsistentMarkers {
                name: ns.name.clone(),
                tenant: tenant.into(),
            });
        }
        // Taking over an OpenClaw installation's namespace changes who
        // manages it: only with the operator's consent.
        if ns.made_by_openclaw(tenant, id) && !ns.adoptable() {
            return Err(NamespaceError::NotAdoptable(ns.name.clone()));
        }
        let adopted = ns.labels.get(labels::ADOPTED).is_some_and(|v| v == "true");
        let clawfed_name = ns.name == expected || is_legacy_data_plane_shape(&ns.name);
        if !clawfed_name {
            if !(adopted || adopt == Some(ns.name.as_str())) {
                return Err(NamespaceError::WrongName {
                    name: ns.name.clone(),
                    tenant: tenant.into(),
                    expected,
                });
            }
            // Adopted before, but the operator has withdrawn the mark.
            if !ns.adoptable() {
                return Err(NamespaceError::NotAdoptable(ns.name.clone()));
            }
        }
        if !valid.contains(&ns.name) {
            valid.push(ns.name.clone());
        }
    }
    if valid.len() > 1 {
        valid.sort();
        return Err(NamespaceError::TwoClaims {
            tenant: tenant.into(),
            names: valid,
        });
    }

    if let Some(a) = adopt {
        if let Some(other) = valid.iter().find(|n| n.as_str() != a) {
            return Err(NamespaceError::TwoClaims {
                tenant: tenant.into(),
                names: vec![a.to_string(), other.clone()],
            });
        }
        let Some(target) = observed.iter().find(|o| o.name == a) else {
            return Err(NamespaceError::AdoptMissing(a.into()));
        };
        if target.has_any_clawfed_marker() && !target.has_all_markers(tenant, id) {
            return Err(NamespaceError::Taken(a.into()));
        }
        if !target.adoptable() {
            return Err(NamespaceError::NotAdoptable(a.into()));
        }
        return Ok(Resolution::Adopt(a.into()));
    }
    if let Some(name) = valid.pop() {
        return Ok(Resolution::Existing(name));
    }
    if observed.iter().any(|o| o.name == expected) {
        // Exists without this tenant's markers: someone else's.
        return Err(NamespaceError::Taken(expected));
    }
    Ok(Resolution::Create(expected))
}

/// The Namespace object: tenant label, manager label, namespace-id annotation
/// (plus the adoption marker and Pod Security level).
pub fn namespace_object(
    work: &NamespaceWork,
    name: &str,
    adopted: bool,
    config: &SpokeConfig,
) -> Namespace {
    let mut l = owner_labels(&work.tenant);
    if adopted {
        l.insert(labels::ADOPTED.into(), "true".into());
    }
    if let Some(level) = &config.pod_security_level {
        l.insert("pod-security.kubernetes.io/enforce".into(), level.clone());
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(l),
            annotations: Some(BTreeMap::from([(
                labels::NAMESPACE_ID_ANNOTATION.to_string(),
                work.namespace_id.clone(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn meta(name: &str, namespace: &str, tenant: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        labels: Some(owner_labels(tenant)),
        ..Default::default()
    }
}

/// The RoleBinding of the spoke's tenant ClusterRole to its own
/// ServiceAccount, in this namespace only.
pub fn spoke_binding(namespace: &str, tenant: &str, config: &SpokeConfig) -> RoleBinding {
    RoleBinding {
        metadata: meta(SPOKE_BINDING, namespace, tenant),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: config.tenant_cluster_role.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: config.service_account_name.clone(),
            namespace: Some(config.service_account_namespace.clone()),
            ..Default::default()
        }]),
    }
}

/// The ResourceQuota.
pub fn quota(work: &NamespaceWork, namespace: &str) -> ResourceQuota {
    guardrails::resource_quota(meta(QUOTA, namespace, &work.tenant), &work.quota)
}

/// The LimitRange with container defaults.
pub fn limit_range(work: &NamespaceWork, namespace: &str) -> LimitRange {
    guardrails::container_limits(
        meta(LIMITS, namespace, &work.tenant),
        &work.container_defaults,
    )
}

fn port(protocol: &str, p: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.into()),
        port: Some(IntOrString::Int(p)),
        ..Default::default()
    }
}

/// The three NetworkPolicies: default-deny ingress and egress for every Pod;
/// DNS egress to the DNS Pods (the work's, else the spoke's configured
/// ones); the Harness flows of the work.
pub fn network_policies(
    work: &NamespaceWork,
    namespace: &str,
    config: &SpokeConfig,
) -> Vec<NetworkPolicy> {
    let (dns_namespace, dns_labels) = match &work.network.dns {
        Some(d) => (d.namespace.clone(), d.pod_labels.clone()),
        None => (config.dns.namespace.clone(), config.dns.pod_labels.clone()),
    };
    let both = Some(vec!["Ingress".to_string(), "Egress".to_string()]);
    let deny = NetworkPolicy {
        metadata: meta(DENY_ALL, namespace, &work.tenant),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: both.clone(),
            ..Default::default()
        }),
    };
    let dns = NetworkPolicy {
        metadata: meta(ALLOW_DNS, namespace, &work.tenant),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "kubernetes.io/metadata.name".to_string(),
                            dns_namespace,
                        )])),
                        ..Default::default()
                    }),
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(dns_labels),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ports: Some(vec![port("UDP", 53), port("TCP", 53)]),
            }]),
            ..Default::default()
        }),
    };
    let n = &work.network;
    let spoke_ns = BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        config.service_account_namespace.clone(),
    )]);
    let from_spoke = n.ingress_from_spoke.then(|| NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(spoke_ns),
                ..Default::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(config.pod_labels.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(vec![port("TCP", n.harness_port)]),
    });
    let ingress = from_spoke
        .into_iter()
        .chain(
            n.ingress_from_cidrs
                .iter()
                .map(|cidr| NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: cidr.clone(),
                            except: None,
                        }),
                        ..Default::default()
                    }]),
                    ports: Some(vec![port("TCP", n.harness_port)]),
                }),
        )
        .collect();
    // The installation's egress, and this cluster's workload proxy.
    let proxy = config.cluster.proxy_endpoint().map(|(ip, p)| {
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        (format!("{ip}/{bits}"), vec![i32::from(p)])
    });
    let egress = n
        .egress
        .iter()
        .map(|r| (r.cidr.clone(), r.ports.clone()))
        .chain(proxy)
        .map(|(cidr, ports)| NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                ip_block: Some(IPBlock { cidr, except: None }),
                ..Default::default()
            }]),
            ports: Some(ports.iter().map(|p| port("TCP", *p)).collect()),
        })
        .collect();
    let flows = NetworkPolicy {
        metadata: meta(HARNESS_FLOWS, namespace, &work.tenant),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    labels::WORKLOAD_ROLE.to_string(),
                    HARNESS_ROLE.to_string(),
                )])),
                ..Default::default()
            }),
            policy_types: both,
            ingress: Some(ingress),
            egress: Some(egress),
        }),
    };
    vec![deny, dns, flows]
}

#[cfg(test)]
mod tests;
