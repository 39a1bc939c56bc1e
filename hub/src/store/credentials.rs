//! The managed credentials' part of the store: sealed values only. The
//! store never sees a plaintext; sealing and opening happen in
//! [`crate::secrets`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use clawfed_proto::work::credential::CredentialKind;

use super::{Effects, Result};
use crate::model::CredentialMeta;
use crate::secrets::Sealed;

/// A stored, sealed credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCredential {
    pub kind: CredentialKind,
    pub sealed: Sealed,
    /// Bumped by every set of the Agent's credential (a revision keeps the
    /// version it froze).
    pub version: i64,
    pub set_at: DateTime<Utc>,
}

impl StoredCredential {
    /// What the API may show: never the value.
    pub fn meta(&self) -> CredentialMeta {
        CredentialMeta {
            kind: self.kind.as_str().to_owned(),
            version: self.version,
            set_at: self.set_at,
        }
    }
}

/// Sealed Agent credentials and the copies deploys froze into revisions.
#[async_trait]
pub trait CredentialStore: Send + Sync {
    /// Sets or replaces Agent `agent_id`'s credential of `kind` (its
    /// version goes up by one), with its audit, in one transaction.
    /// `NotFound` when the Agent does not exist.
    async fn set_agent_credential(
        &self,
        agent_id: &str,
        kind: CredentialKind,
        sealed: &Sealed,
        fx: &Effects,
    ) -> Result<CredentialMeta>;

    /// Deletes it; `NotFound` when the Agent has none of that kind.
    async fn delete_agent_credential(
        &self,
        agent_id: &str,
        kind: CredentialKind,
        fx: &Effects,
    ) -> Result<()>;

    /// The Agent's current credentials, by kind.
    async fn list_agent_credentials(&self, agent_id: &str) -> Result<Vec<StoredCredential>>;

    /// The credentials revision `revision_id` froze at deploy, by kind.
    async fn revision_credentials(&self, revision_id: &str) -> Result<Vec<StoredCredential>>;
}
