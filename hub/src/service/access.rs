//! Authentication, permission checks and the audit trail: who the caller
//! is, whether it may do what it asks, and the audit records of what it
//! did (denials and failures here; successes inside each mutation's own
//! transaction).

use chrono::Utc;

use super::{Result, Service, ServiceError};
use crate::auth::{self, Action, Decision, Principal};
use crate::store::{Effects, NewAudit};

impl Service {
    /// Resolves a bearer token to its principal.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<Principal> {
        let Some(secret) = bearer else {
            return Err(ServiceError::Unauthenticated(
                "missing bearer token (Authorization: Bearer <token>)".into(),
            ));
        };
        let hash = auth::hash_token(secret);
        let admission = self.admit_presented(&hash)?;
        let token = self
            .store
            .find_token(&hash)
            .await?
            .ok_or_else(|| ServiceError::Unauthenticated("unknown token".into()))?;
        self.admit_resolved(&hash, valid_token(token, "token")?, admission)
    }

    /// Resolves a request's credentials: its bearer token when it sends
    /// one (a bad one is refused, never passed over), else the API token
    /// its verified client certificate names
    /// ([`auth::client_cert_token_name`]). The rate limits apply: the
    /// caller's before the store is read, its tenant's after.
    pub async fn authenticate_request(
        &self,
        bearer: Option<&str>,
        client_cert: Option<&std::result::Result<String, auth::ClientCertError>>,
    ) -> Result<Principal> {
        match (bearer, client_cert) {
            (None, Some(Ok(name))) => {
                let subject = format!("cert:{name}");
                let admission = self.admit_presented(&subject)?;
                let token = self.store.find_token_by_name(name).await?.ok_or_else(|| {
                    ServiceError::Unauthenticated(format!(
                        "client certificate CN {name:?} names no API token \
                         (create it with clawfed-hub token create --name {name})"
                    ))
                })?;
                let p = valid_token(token, "the token the client certificate names")?;
                self.admit_resolved(&subject, p, admission)
            }
            (None, Some(Err(e))) => Err(ServiceError::Unauthenticated(e.to_string())),
            (bearer, _) => self.authenticate(bearer).await,
        }
    }

    /// The rate limits' check before the store is read: the caller's
    /// bucket, keyed by what the request presents, and its tenant's when
    /// that credential was seen before.
    fn admit_presented(&self, subject: &str) -> Result<crate::ratelimit::Admission> {
        self.rate_limits
            .admit_presented(subject)
            .map_err(ServiceError::RateLimited)
    }

    /// The check after: the tenant `p` is scoped to, for a credential seen
    /// for the first time (installation admins have no tenant's bucket).
    fn admit_resolved(
        &self,
        subject: &str,
        p: Principal,
        admission: crate::ratelimit::Admission,
    ) -> Result<Principal> {
        self.rate_limits
            .admit_resolved(subject, p.namespace.as_deref(), admission)
            .map_err(ServiceError::RateLimited)?;
        Ok(p)
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

    /// Checks `m` under `action`; a denial is audited.
    pub(super) async fn authorize(&self, action: Action, m: &Mutation<'_>) -> Result<()> {
        match m.p.permits(action, m.namespace) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => {
                self.append_audit(&m.event("denied", Some(reason.clone())))
                    .await;
                Err(ServiceError::PermissionDenied(reason))
            }
        }
    }

    /// Runs `body` as `m`: authorized under `action` first (a denial is
    /// audited and `body` never runs), a failure audited after.
    pub(super) async fn mutate<T>(
        &self,
        action: Action,
        m: &Mutation<'_>,
        body: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.authorize(action, m).await?;
        let result = body.await;
        self.finish(m, result).await
    }

    /// Audits `m` when it failed after it was authorized. (Successful
    /// mutations are audited inside their own transaction: [`Mutation::ok`].)
    pub(super) async fn finish<T>(&self, m: &Mutation<'_>, result: Result<T>) -> Result<T> {
        if let Err(err) = &result
            && !matches!(err, ServiceError::Unavailable(_))
        {
            self.append_audit(&m.event("error", Some(err.to_string())))
                .await;
        }
        result
    }

    /// Appends an audit record outside a mutation's transaction; a failure
    /// is logged, never the caller's error.
    pub(super) async fn append_audit(&self, event: &NewAudit) {
        if let Err(e) = self.store.append_audit(event).await {
            tracing::warn!(error = %e, "audit.append_failed");
        }
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

/// One mutation as the audit trail names it: the caller does `what` to
/// `target` in `namespace` (`None`: installation-wide).
pub(super) struct Mutation<'a> {
    pub(super) p: &'a Principal,
    what: &'a str,
    namespace: Option<&'a str>,
    target: String,
}

impl<'a> Mutation<'a> {
    pub(super) fn new(
        p: &'a Principal,
        what: &'a str,
        namespace: Option<&'a str>,
        target: impl Into<String>,
    ) -> Self {
        Self {
            p,
            what,
            namespace,
            target: target.into(),
        }
    }

    /// The same mutation audited under `namespace`: a namespace's creation
    /// is authorized installation-wide but recorded under its new name.
    pub(super) fn in_namespace(self, namespace: &'a str) -> Self {
        Self {
            namespace: Some(namespace),
            ..self
        }
    }

    /// Its audit record with `result` and `detail`.
    pub(super) fn event(&self, result: &str, detail: Option<String>) -> NewAudit {
        NewAudit {
            actor: self.p.actor(),
            action: self.what.to_owned(),
            namespace: self.namespace.map(str::to_owned),
            target: self.target.clone(),
            result: result.to_owned(),
            detail,
        }
    }

    /// The effects of its success: the `ok` audit record alone, written in
    /// the mutation's own transaction.
    pub(super) fn ok(&self) -> Effects {
        Effects::audit(self.event("ok", None))
    }
}
