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

use clawfed_kube::quantity::quantities;
use clawfed_proto::labels;
use clawfed_proto::naming::{
    data_plane_namespace, is_legacy_data_plane_shape, validate_dns1123_label,
};
use clawfed_proto::work::NamespaceWork;
use k8s_openapi::api::core::v1::{
    LimitRange, LimitRangeItem, LimitRangeSpec, Namespace, ResourceQuota, ResourceQuotaSpec,
};
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
    ResourceQuota {
        metadata: meta(QUOTA, namespace, &work.tenant),
        spec: Some(ResourceQuotaSpec {
            hard: quantities(&work.quota),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The LimitRange with container defaults.
pub fn limit_range(work: &NamespaceWork, namespace: &str) -> LimitRange {
    let d = &work.container_defaults;
    LimitRange {
        metadata: meta(LIMITS, namespace, &work.tenant),
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
mod tests {
    use super::*;

    fn work() -> NamespaceWork {
        NamespaceWork {
            tenant: "team-a".into(),
            namespace_id: "id-1".into(),
            ..Default::default()
        }
    }

    fn obs(
        name: &str,
        tenant: Option<&str>,
        id: Option<&str>,
        managed: bool,
    ) -> NamespaceObservation {
        let mut o = NamespaceObservation {
            name: name.into(),
            ..Default::default()
        };
        if let Some(t) = tenant {
            o.labels.insert(labels::TENANT.into(), t.into());
        }
        if let Some(i) = id {
            o.annotations
                .insert(labels::NAMESPACE_ID_ANNOTATION.into(), i.into());
        }
        if managed {
            o.labels
                .insert(labels::MANAGED_BY.into(), labels::MANAGER.into());
        }
        o
    }

    /// A namespace made by the OpenClaw Compute Driver: its own markers.
    fn openclaw_obs(name: &str, tenant: &str, id: &str) -> NamespaceObservation {
        let mut o = NamespaceObservation {
            name: name.into(),
            ..Default::default()
        };
        o.labels
            .insert(labels::openclaw::TENANT.into(), tenant.into());
        o.labels
            .insert(labels::MANAGED_BY.into(), labels::openclaw::MANAGER.into());
        o.annotations
            .insert(labels::openclaw::NAMESPACE_ID_ANNOTATION.into(), id.into());
        o
    }

    type Case = (
        &'static str,
        NamespaceWork,
        Vec<NamespaceObservation>,
        Result<Resolution, &'static str>,
    );

    #[test]
    fn resolution_table() {
        let expected = data_plane_namespace("id-1");
        let legacy = "oce-team-a-0123456789ab";
        let mark = |mut o: NamespaceObservation| {
            o.labels.insert(labels::ADOPTABLE.into(), "true".into());
            o
        };
        let adopted_unmarked = {
            let mut o = obs("ops-chosen", Some("team-a"), Some("id-1"), true);
            o.labels.insert(labels::ADOPTED.into(), "true".into());
            o
        };
        let adopted_marked = mark(adopted_unmarked.clone());
        let adopt = |a: &str| NamespaceWork {
            adopt: Some(a.into()),
            ..work()
        };
        let cases: Vec<Case> = vec![
            (
                "nothing yet: create",
                work(),
                vec![],
                Ok(Resolution::Create(expected.clone())),
            ),
            (
                "expected exists with markers",
                work(),
                vec![obs(&expected, Some("team-a"), Some("id-1"), true)],
                Ok(Resolution::Existing(expected.clone())),
            ),
            (
                "legacy with all three markers",
                work(),
                vec![obs(legacy, Some("team-a"), Some("id-1"), true)],
                Ok(Resolution::Existing(legacy.into())),
            ),
            (
                "legacy without manager label",
                work(),
                vec![obs(legacy, Some("team-a"), Some("id-1"), false)],
                Err("inconsistent"),
            ),
            (
                "legacy with another id",
                work(),
                vec![obs(legacy, Some("team-a"), Some("id-2"), true)],
                Err("inconsistent"),
            ),
            (
                "legacy with only the annotation",
                work(),
                vec![obs(legacy, None, Some("id-1"), true)],
                Err("inconsistent"),
            ),
            (
                "OpenClaw driver namespace, all three of its markers, operator consent",
                work(),
                vec![mark(openclaw_obs(legacy, "team-a", "id-1"))],
                Ok(Resolution::Existing(legacy.into())),
            ),
            (
                "OpenClaw driver namespace without the operator's consent",
                work(),
                vec![openclaw_obs(legacy, "team-a", "id-1")],
                Err("not marked for adoption"),
            ),
            (
                "OpenClaw driver namespace of another id",
                work(),
                vec![mark(openclaw_obs(legacy, "team-a", "id-2"))],
                Err("inconsistent"),
            ),
            (
                "OpenClaw tenant label with clawfed's annotation and manager",
                work(),
                vec![{
                    let mut o = obs(legacy, None, Some("id-1"), true);
                    o.labels
                        .insert(labels::openclaw::TENANT.into(), "team-a".into());
                    mark(o)
                }],
                Err("inconsistent"),
            ),
            (
                "wrong name with all markers",
                work(),
                vec![obs("oce-somethingelse", Some("team-a"), Some("id-1"), true)],
                Err("wrong name"),
            ),
            (
                "two namespaces claim the tenant",
                work(),
                vec![
                    obs(&expected, Some("team-a"), Some("id-1"), true),
                    obs(legacy, Some("team-a"), Some("id-1"), true),
                ],
                Err("all claim"),
            ),
            (
                "expected name taken by an unmarked namespace",
                work(),
                vec![obs(&expected, None, None, false)],
                Err("does not belong"),
            ),
            (
                "expected name taken by another tenant",
                work(),
                vec![obs(&expected, Some("team-b"), Some("id-9"), true)],
                Err("does not belong"),
            ),
            (
                "other tenants are ignored",
                work(),
                vec![obs("oce-other", Some("team-b"), Some("id-9"), true)],
                Ok(Resolution::Create(expected.clone())),
            ),
            (
                "adopt a plain operator namespace the operator marked",
                adopt("ops-chosen"),
                vec![mark(obs("ops-chosen", None, None, false))],
                Ok(Resolution::Adopt("ops-chosen".into())),
            ),
            (
                "adopt a namespace without the operator's mark",
                adopt("kube-system"),
                vec![obs("kube-system", None, None, false)],
                Err("not marked for adoption"),
            ),
            (
                "adopt a marked namespace that is not a valid adoption target",
                adopt("ops-chosen"),
                vec![mark(obs("ops-chosen", Some("team-b"), Some("id-9"), true))],
                Err("does not belong"),
            ),
            (
                "adopt a missing namespace",
                adopt("ops-chosen"),
                vec![],
                Err("does not exist"),
            ),
            (
                "adopt another tenant's namespace",
                adopt("ops-chosen"),
                vec![obs("ops-chosen", Some("team-b"), Some("id-9"), true)],
                Err("does not belong"),
            ),
            (
                "adopt while the tenant already has a namespace",
                adopt("ops-chosen"),
                vec![
                    mark(obs("ops-chosen", None, None, false)),
                    obs(&expected, Some("team-a"), Some("id-1"), true),
                ],
                Err("all claim"),
            ),
            (
                "previously adopted namespace is found again",
                work(),
                vec![adopted_marked.clone()],
                Ok(Resolution::Existing("ops-chosen".into())),
            ),
            (
                "re-adopt the same namespace",
                adopt("ops-chosen"),
                vec![adopted_marked],
                Ok(Resolution::Adopt("ops-chosen".into())),
            ),
            (
                "adopted namespace whose mark the operator withdrew",
                work(),
                vec![adopted_unmarked.clone()],
                Err("not marked for adoption"),
            ),
            (
                "re-adopt after the operator withdrew the mark",
                adopt("ops-chosen"),
                vec![adopted_unmarked],
                Err("not marked for adoption"),
            ),
            (
                "adopt an invalid name",
                adopt("Bad_Name"),
                vec![],
                Err("invalid tenant identity"),
            ),
            (
                "invalid tenant",
                NamespaceWork {
                    tenant: "Team A".into(),
                    ..work()
                },
                vec![],
                Err("invalid tenant identity"),
            ),
        ];
        for (name, w, observed, want) in cases {
            let got = resolve(&w, &observed);
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "case: {name}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "case: {name}: {e}"),
                (g, w) => panic!("case {name}: got {g:?}, want {w:?}"),
            }
        }
    }

    #[test]
    fn network_policies_deny_by_default_and_open_dns_and_harness_flows() {
        let mut w = work();
        w.network.ingress_from_cidrs = vec!["10.1.0.0/16".into()];
        w.network.egress = vec![clawfed_proto::work::EgressRule {
            cidr: "203.0.113.0/24".into(),
            ports: vec![443],
        }];
        let pols = network_policies(&w, "oce-x", &SpokeConfig::default());
        let deny = pols[0].spec.as_ref().expect("spec");
        assert_eq!(deny.pod_selector, Some(LabelSelector::default()));
        assert_eq!(
            deny.policy_types.as_deref(),
            Some(&["Ingress".to_string(), "Egress".to_string()][..])
        );
        assert!(deny.ingress.is_none() && deny.egress.is_none());
        let dns = pols[1].spec.as_ref().expect("spec");
        let rule = &dns.egress.as_ref().expect("egress")[0];
        assert_eq!(rule.ports.as_ref().map(Vec::len), Some(2));
        let flows = pols[2].spec.as_ref().expect("spec");
        let ingress = flows.ingress.as_ref().expect("ingress");
        assert_eq!(ingress.len(), 2, "the spoke, then the CIDR");
        // The tunnel's last hop: the spoke's own Pods, on the Harness port.
        let spoke = &ingress[0].from.as_ref().expect("from")[0];
        assert_eq!(
            spoke
                .namespace_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .and_then(|l| l.get("kubernetes.io/metadata.name"))
                .map(String::as_str),
            Some("clawfed-system")
        );
        assert_eq!(
            spoke
                .pod_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(SpokeConfig::default().pod_labels)
        );
        assert_eq!(
            ingress[0].ports.as_ref().map(|p| p[0].port.clone()),
            Some(Some(IntOrString::Int(8080)))
        );
        assert_eq!(flows.egress.as_ref().map(Vec::len), Some(1));
        // The installation's DNS target replaces the spoke's own.
        let dns_peer = |pols: &[NetworkPolicy]| {
            let rule = &pols[1]
                .spec
                .as_ref()
                .expect("spec")
                .egress
                .as_ref()
                .expect("egress")[0];
            let peer = rule.to.as_ref().expect("to")[0].clone();
            (
                peer.namespace_selector
                    .and_then(|s| s.match_labels)
                    .and_then(|l| l.get("kubernetes.io/metadata.name").cloned()),
                peer.pod_selector.and_then(|s| s.match_labels),
            )
        };
        assert_eq!(
            dns_peer(&pols),
            (
                Some("kube-system".to_string()),
                Some(SpokeConfig::default().dns.pod_labels)
            )
        );
        let mut custom = w.clone();
        custom.network.dns = Some(clawfed_proto::work::DnsTarget {
            namespace: "dns-system".into(),
            pod_labels: BTreeMap::from([("app".into(), "coredns".into())]),
        });
        assert_eq!(
            dns_peer(&network_policies(&custom, "oce-x", &SpokeConfig::default())),
            (
                Some("dns-system".to_string()),
                Some(BTreeMap::from([("app".to_string(), "coredns".to_string())]))
            )
        );
        w.network.ingress_from_spoke = false;
        w.network.ingress_from_cidrs.clear();
        let pols = network_policies(&w, "oce-x", &SpokeConfig::default());
        let flows = pols[2].spec.as_ref().expect("spec");
        assert_eq!(
            flows.ingress.as_ref().map(Vec::len),
            Some(0),
            "nothing admitted"
        );
    }
}
