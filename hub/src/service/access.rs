//! Authentication, permission checks and the audit trail: who the caller
//! is, whether it may do what it asks, and the audit records of what it
//! did (denials and failures here; successes inside each mutation's own
//! transaction).

use chrono::Utc;

use super::{Result, Service, ServiceError};
use crate::auth::{self, Action, Decision, Principal};
use crate::store::NewAudit;

impl Service {
    /// Resolves a bearer token to its principal.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<Principal> {
        let Some(secret) = bearer else {
            return Err(ServiceError::Unauthenticated(
                "missing bearer token (Authorization: Bearer <token>)".into(),
            ));
        };
        let token = self
            .store
            .find_token(&auth::hash_token(secret))
            .await?
            .ok_or_else(|| ServiceError::Unauthenticated("unknown token".into()))?;
        valid_token(token, "token")
    }

    /// Resolves a request's credentials: its bearer token when it sends
    /// one (a bad one is refused, never passed over), else the API token
    /// its verified client certificate names
    /// ([`auth::client_cert_token_name`]).
    pub async fn authenticate_request(
        &self,
        bearer: Option<&str>,
        client_cert: Option<&std::result::Result<String, auth::ClientCertError>>,
    ) -> Result<Principal> {
        match (bearer, client_cert) {
            (None, Some(Ok(name))) => {
                let token = self.store.find_token_by_name(name).await?.ok_or_else(|| {
                    ServiceError::Unauthenticated(format!(
                        "client certificate CN {name:?} names no API token \
                         (create it with clawfed-hub token create --name {name})"
                    ))
                })?;
                valid_token(token, "the token the client certificate names")
            }
            (None, Some(Err(e))) => Err(ServiceError::Unauthenticated(e.to_string())),
            (bearer, _) => self.authenticate(bearer).await,
        }
    }

    /// Checks a read; reads are not audited.
    pub(super) fn check_read(
        &self,
        p: &Principal,
        action: Action,
        namespace: Option<&str>,
    ) -> Result<()> {
        match p.permits(action, namespace) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(ServiceError::PermissionDenied(reason)),
        }
    }

    /// Checks a mutation; a denial is audited.
    pub(super) async fn check_mutation(
        &self,
        p: &Principal,
        action: Action,
        namespace: Option<&str>,
        what: &str,
        target: &str,
    ) -> Result<()> {
        match p.permits(action, namespace) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => {
                let event = audit(p, what, namespace, target, "denied", Some(reason.clone()));
                if let Err(e) = self.store.append_audit(&event).await {
                    tracing::warn!(error = %e, "audit.append_failed");
                }
                Err(ServiceError::PermissionDenied(reason))
            }
        }
    }

    /// Audits a mutation that failed after it was authorized. (Successful
    /// mutations are audited inside their own transaction.)
    pub(super) async fn record<T>(
        &self,
        p: &Principal,
        what: &str,
        namespace: Option<&str>,
        target: &str,
        result: Result<T>,
    ) -> Result<T> {
        if let Err(err) = &result
            && !matches!(err, ServiceError::Unavailable(_))
        {
            let event = audit(p, what, namespace, target, "error", Some(err.to_string()));
            if let Err(e) = self.store.append_audit(&event).await {
                tracing::warn!(error = %e, "audit.append_failed");
            }
        }
        result
    }

    /// The caller's own namespace (tenant tokens).
    pub(super) async fn own_namespace(&self, p: &Principal) -> Result<crate::model::Namespace> {
        let name = p
            .namespace
            .as_deref()
            .ok_or_else(|| ServiceError::PermissionDenied("token has no namespace scope".into()))?;
        Ok(self.store.get_namespace(name).await?)
    }
}

/// The caller a stored token stands for, unless it is revoked or expired;
/// `what` names it in the refusal.
fn valid_token(token: crate::store::ApiToken, what: &str) -> Result<Principal> {
    if token.revoked_at.is_some() {
        return Err(ServiceError::Unauthenticated(format!("{what} is revoked")));
    }
    if token.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(ServiceError::Unauthenticated(format!("{what} has expired")));
    }
    Ok(token.into())
}

pub(super) fn audit(
    p: &Principal,
    action: &str,
    namespace: Option<&str>,
    target: &str,
    result: &str,
    detail: Option<String>,
) -> NewAudit {
    NewAudit {
        actor: p.actor(),
        action: action.to_owned(),
        namespace: namespace.map(str::to_owned),
        target: target.to_owned(),
        result: result.to_owned(),
        detail,
    }
}
