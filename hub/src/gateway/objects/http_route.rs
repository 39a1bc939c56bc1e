//! The Agent's HTTPRoute (private routing): its API resource, the part of
//! its spec clawfed writes and reads, and which revision it routes to.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use super::{Error, ROUTE_KIND, ROUTE_PLURAL, Result, labels, names, owner_labels, service_name};
use crate::gateway::{GatewayConfig, PrivateRouting};

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
