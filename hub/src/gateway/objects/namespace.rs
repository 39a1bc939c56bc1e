//! Each tenant's managed Gateway runtime namespace: the namespace itself,
//! the binding of the hub's Gateway runtime role there, and the tenant's
//! quota and container defaults in it.

use std::collections::BTreeMap;

use clawfed_kube::guardrails;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::labels;
use crate::gateway::GatewayConfig;

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
    guardrails::resource_quota(
        namespace_meta(NAMESPACE_QUOTA, namespace),
        &c.namespace_quota,
    )
}

/// The tenant's container defaults in its Gateway namespace.
pub fn namespace_limits(namespace: &str, c: &GatewayConfig) -> LimitRange {
    guardrails::container_limits(
        namespace_meta(NAMESPACE_LIMITS, namespace),
        &c.container_defaults,
    )
}
