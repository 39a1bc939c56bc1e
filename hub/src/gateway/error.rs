//! The Gateway room's errors: one enum, each variant with a stable reason
//! code and whether retrying may help.

use std::time::Duration;

use clawfed_kube::RequestError;

use super::objects;

/// Errors of the Gateway client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec or config is not acceptable (nothing was applied).
    #[error("invalid gateway: {0}")]
    Invalid(#[from] objects::Error),
    /// The managed gateway namespace cannot be used.
    #[error("gateway namespace {namespace}: {reason}")]
    NamespaceUnavailable {
        /// The namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
    /// Private routing is configured but the control cluster does not serve
    /// HTTPRoute at the configured API version.
    #[error(
        "private routing is enabled but the control cluster does not serve {kind} {api_version}: {reason}; install the Gateway API CRDs or fix gateways.privateRouting.apiVersion (the route was not changed)"
    )]
    RouteApiMissing {
        /// Kind looked for.
        kind: &'static str,
        /// `group/version` looked for.
        api_version: String,
        /// What discovery said.
        reason: String,
    },
    /// Private routing is configured but the hub may not manage routes.
    #[error(
        "private routing is enabled but clawfed-hub may not {verbs} httproutes in namespace {namespace}{reason}; grant it in deploy/hub/rbac.yaml (the route was not changed)"
    )]
    RouteForbidden {
        /// The gateway namespace.
        namespace: String,
        /// The verbs denied, comma separated.
        verbs: String,
        /// The authorizer's reason, if any (with a leading separator).
        reason: String,
    },
    /// The apiserver refused the hub's identity (a [`RequestError`] whose
    /// cause is a 403; see the `From<RequestError>` conversion).
    #[error("clawfed-hub may not {0}")]
    Forbidden(#[source] RequestError),
    /// Any other apiserver failure (`apply`, `get`, `list`, `delete`, ...).
    #[error(transparent)]
    Kube(RequestError),
    /// A request through the revision's Gateway to its Harness (the data
    /// path probe) was not answered with success.
    #[error(
        "request {path} through gateway pod {pod} of agent {agent} revision {revision}: {detail}"
    )]
    PathProbe {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
        /// The Gateway Pod probed ("" when there was none).
        pod: String,
        /// The path requested.
        path: &'static str,
        /// What came back (status and the first bytes of the body) or why
        /// nothing did.
        detail: String,
    },
    /// A Gateway object of that name belongs to another tenant.
    #[error("{kind} {name} belongs to tenant {owner:?}, not {tenant:?}")]
    OwnedByOtherTenant {
        /// Object kind.
        kind: &'static str,
        /// Object name.
        name: String,
        /// The tenant label found.
        owner: String,
        /// The tenant asked for.
        tenant: String,
    },
    /// The Gateway already runs a newer revision than the one asked for.
    #[error("gateway of agent {agent} runs revision {deployed}, newer than {requested}")]
    Superseded {
        /// Agent.
        agent: String,
        /// Revision in the Deployment.
        deployed: i64,
        /// Revision asked for.
        requested: i64,
    },
    /// Activation asked for a revision whose Gateway is not prepared.
    #[error("gateway revision {revision} of agent {agent} is not prepared (no Service {service})")]
    NotPrepared {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
        /// The missing Service.
        service: String,
    },
    /// Activation asked for a revision whose Gateway is not ready.
    #[error("gateway revision {revision} of agent {agent} is not ready: {reason}")]
    NotReady {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
        /// The readiness reason code.
        reason: &'static str,
    },
    /// Retirement asked for the revision the route points at.
    #[error("gateway revision {revision} of agent {agent} is the routed revision")]
    RevisionActive {
        /// Agent.
        agent: String,
        /// Revision.
        revision: i64,
    },
    /// The hub's RoleBinding in the Gateway namespace is not honoured yet.
    #[error(
        "gateway namespace {namespace}: the hub's role binding is not in force after {waited:?} ({reason})"
    )]
    BindingPending {
        /// The namespace.
        namespace: String,
        /// How long it waited.
        waited: Duration,
        /// The authorizer's last answer.
        reason: String,
    },
    /// These Gateways have no transport key ([`Gateways::with_transport`]).
    #[error("no transport key: the hub derives each revision's transport token from it")]
    NoTransportKey,
    /// The revision's transport token hash could not be recorded.
    #[error("recording the transport credential of revision {revision_id}: {source}")]
    Transport {
        /// The revision.
        revision_id: String,
        /// The cause.
        #[source]
        source: Box<crate::store::StoreError>,
    },
    /// A deleted object did not go away in time.
    #[error("{kind} {namespace}/{name} still present after {waited:?}")]
    DeleteTimeout {
        /// Object kind.
        kind: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// How long it waited.
        waited: Duration,
    },
}

/// Result alias of the Gateway client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A stable reason code for status conditions and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Invalid(_) => "InvalidGateway",
            Error::NamespaceUnavailable { .. } => "GatewayNamespaceUnavailable",
            Error::RouteApiMissing { .. } => "RouteApiMissing",
            Error::RouteForbidden { .. } => "RouteForbidden",
            Error::Forbidden(_) => "Forbidden",
            Error::Kube(_) => "KubernetesError",
            Error::OwnedByOtherTenant { .. } => "OwnedByOtherTenant",
            Error::Superseded { .. } => "Superseded",
            Error::NotPrepared { .. } => "GatewayNotPrepared",
            Error::NotReady { .. } => "GatewayNotReady",
            Error::PathProbe { .. } => "DataPathProbeFailed",
            Error::RevisionActive { .. } => "RevisionActive",
            Error::DeleteTimeout { .. } => "DeleteTimeout",
            Error::NoTransportKey => "NoTransportKey",
            Error::BindingPending { .. } => "GatewayNamespaceBindingPending",
            Error::Transport { .. } => "TransportCredential",
        }
    }

    /// True when retrying later may succeed without anyone changing the spec,
    /// the config or the cluster's RBAC/CRDs.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube(e) => e.is_transient(),
            // The path may come up (a spoke reconnecting, endpoints being
            // published); the pipeline's deadline bounds the retries.
            Error::NotReady { .. }
            | Error::DeleteTimeout { .. }
            | Error::PathProbe { .. }
            | Error::BindingPending { .. } => true,
            Error::Transport { source, .. } => {
                matches!(source.as_ref(), crate::store::StoreError::Unavailable(_))
            }
            _ => false,
        }
    }
}

/// A failed request is [`Error::Forbidden`] when the apiserver answered
/// 403 (the hub's RBAC must change), else [`Error::Kube`].
impl From<RequestError> for Error {
    fn from(e: RequestError) -> Self {
        if e.is_forbidden() {
            Error::Forbidden(e)
        } else {
            Error::Kube(e)
        }
    }
}

impl From<clawfed_kube::object::Error> for Error {
    fn from(e: clawfed_kube::object::Error) -> Self {
        use clawfed_kube::object::Error as E;
        match e {
            E::Kube(e) => e.into(),
            E::DeleteTimeout {
                kind,
                namespace,
                name,
                waited,
            } => Error::DeleteTimeout {
                kind,
                namespace,
                name,
                waited,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(code: u16) -> RequestError {
        let status = kube::core::Status::failure("denied", "Reason").with_code(code);
        RequestError::new(
            "get",
            "Deployment",
            "ns",
            "d",
            kube::Error::Api(status.boxed()),
        )
    }

    #[test]
    fn a_403_is_forbidden_and_anything_else_a_kubernetes_error() {
        let cause = failed(403).source.to_string();
        let forbidden = Error::from(failed(403));
        assert_eq!(forbidden.reason(), "Forbidden");
        assert!(!forbidden.is_transient());
        assert_eq!(
            forbidden.to_string(),
            format!("clawfed-hub may not get Deployment ns/d: {cause}")
        );

        let cause = failed(503).source.to_string();
        let unavailable = Error::from(failed(503));
        assert_eq!(unavailable.reason(), "KubernetesError");
        assert!(unavailable.is_transient());
        assert_eq!(
            unavailable.to_string(),
            format!("get Deployment ns/d: {cause}")
        );
    }
}
