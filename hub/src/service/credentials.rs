//! Agents' managed credentials: set (sealed before they reach the store),
//! deleted and listed, metadata only; and what each revision froze.

use clawfed_proto::work::credential::CredentialKind;

use super::access::Mutation;
use super::{Result, Service, ServiceError};
use crate::auth::{Action, Principal};
use crate::model::CredentialMeta;
use crate::quota::QuotaKind;
use crate::secrets::SecretValue;

impl Service {
    /// Sets or replaces an Agent's managed credential of `kind`. Write-only:
    /// the value is sealed before it reaches the store, and the answer, the
    /// audit record and any error carry metadata only. The running revision
    /// keeps what it froze; the next deploy carries the new value.
    pub async fn set_credential(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        kind: &str,
        value: SecretValue,
    ) -> Result<CredentialMeta> {
        let m = Mutation::new(
            p,
            "agent.credential.set",
            Some(ns),
            format!("agents/{agent}/credentials/{kind}"),
        );
        self.mutate(Action::EditDraft, &m, async {
            let kind = credential_kind(kind)?;
            credential_value("value", &value)?;
            let a = self.store.get_agent(ns, agent).await?;
            let harness = a.spec.harness_kind.as_str();
            if !kind.allowed_for(a.spec.harness_kind) {
                return Err(ServiceError::InvalidArgument {
                    field: "kind".into(),
                    reason: format!(
                        "{kind} credentials are accepted only for dedicated-codex Agents; \
                         agent {agent:?} is {harness}"
                    ),
                });
            }
            let secrets = self.secrets.as_ref().ok_or_else(|| {
                ServiceError::FailedPrecondition(
                    "this hub has no secrets key (secrets.keyFile or secrets.keySecret)".into(),
                )
            })?;
            let sealed = secrets
                .seal_credential(&a.id, kind, &value)
                .map_err(|e| ServiceError::Internal(e.to_string()))?;
            let mut fx = m.ok();
            fx.quotas = self.quota_checks(ns, &[QuotaKind::Credentials]);
            Ok(self
                .store
                .set_agent_credential(&a.id, kind, &sealed, &fx)
                .await?)
        })
        .await
    }

    /// Deletes an Agent's managed credential of `kind` (revisions keep what
    /// they froze).
    pub async fn delete_credential(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        kind: &str,
    ) -> Result<()> {
        let m = Mutation::new(
            p,
            "agent.credential.delete",
            Some(ns),
            format!("agents/{agent}/credentials/{kind}"),
        );
        self.mutate(Action::EditDraft, &m, async {
            let kind = credential_kind(kind)?;
            let a = self.store.get_agent(ns, agent).await?;
            let fx = m.ok();
            Ok(self.store.delete_agent_credential(&a.id, kind, &fx).await?)
        })
        .await
    }

    /// An Agent's managed credentials: kind, version and when each was set,
    /// never a value.
    pub async fn list_credentials(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
    ) -> Result<Vec<CredentialMeta>> {
        self.check_read(p, Action::Read, Some(ns))?;
        let a = self.store.get_agent(ns, agent).await?;
        let stored = self.store.list_agent_credentials(&a.id).await?;
        Ok(stored.iter().map(|c| c.meta()).collect())
    }

    /// The credentials revision `number` froze at deploy (metadata only).
    pub async fn list_revision_credentials(
        &self,
        p: &Principal,
        ns: &str,
        agent: &str,
        number: i64,
    ) -> Result<Vec<CredentialMeta>> {
        self.check_read(p, Action::Read, Some(ns))?;
        let rev = self.store.get_revision(ns, agent, number).await?;
        let stored = self.store.revision_credentials(&rev.id).await?;
        Ok(stored.iter().map(|c| c.meta()).collect())
    }
}

/// Parses a credential kind, naming the field and the accepted kinds.
fn credential_kind(kind: &str) -> Result<CredentialKind> {
    CredentialKind::parse(kind).ok_or_else(|| ServiceError::InvalidArgument {
        field: "kind".into(),
        reason: format!(
            "{kind:?} is not a credential kind; expected one of {}",
            CredentialKind::expected()
        ),
    })
}

/// Largest credential value accepted.
const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;

/// A credential value must be non-empty, bounded and free of NUL (it
/// becomes an environment variable). The reasons never echo the value.
fn credential_value(field: &str, value: &SecretValue) -> Result<()> {
    let invalid = |reason: &str| {
        Err(ServiceError::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        })
    };
    if value.is_empty() {
        return invalid("must not be empty");
    }
    if value.len() > MAX_CREDENTIAL_BYTES {
        return invalid(&format!(
            "must be at most {MAX_CREDENTIAL_BYTES} bytes, got {}",
            value.len()
        ));
    }
    if value.expose().contains('\0') {
        return invalid("must not contain NUL characters");
    }
    Ok(())
}
