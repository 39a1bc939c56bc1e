//! [`CredentialStore`] over the shared SQL (both backends).

use async_trait::async_trait;
use chrono::Utc;
use clawfed_proto::work::credential::CredentialKind;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::credentials::{CredentialStore, StoredCredential};
use super::sql::{SqlStore, from_ms, ms, not_found};
use super::{Effects, Result, StoreError};
use crate::model::CredentialMeta;
use crate::secrets::Sealed;

const COLS: &str = "kind, key_id, nonce, ciphertext, version, set_at";

fn credential_from_row(r: &AnyRow) -> Result<StoredCredential> {
    let corrupt = |e: sqlx::Error| StoreError::Corrupt {
        what: "credential",
        detail: e.to_string(),
    };
    let kind: String = r.try_get("kind").map_err(corrupt)?;
    Ok(StoredCredential {
        kind: CredentialKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            what: "credential",
            detail: format!("unknown kind {kind:?}"),
        })?,
        sealed: Sealed {
            key_id: r.try_get("key_id").map_err(corrupt)?,
            nonce: r.try_get("nonce").map_err(corrupt)?,
            ciphertext: r.try_get("ciphertext").map_err(corrupt)?,
        },
        version: r.try_get("version").map_err(corrupt)?,
        set_at: from_ms(r.try_get("set_at").map_err(corrupt)?),
    })
}

#[async_trait]
impl CredentialStore for SqlStore {
    async fn set_agent_credential(
        &self,
        agent_id: &str,
        kind: CredentialKind,
        sealed: &Sealed,
        fx: &Effects,
    ) -> Result<CredentialMeta> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let query = sqlx::query("SELECT 1 FROM agents WHERE id = $1 AND deleted_at IS NULL")
            .bind(agent_id.to_owned());
        self.one_in(&mut tx, query, "agent", agent_id).await?;
        let row = sqlx::query(
            "INSERT INTO agent_credentials (agent_id, kind, key_id, nonce, ciphertext, version, \
             set_at) VALUES ($1, $2, $3, $4, $5, 1, $6) \
             ON CONFLICT (agent_id, kind) DO UPDATE SET key_id = excluded.key_id, \
             nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
             version = agent_credentials.version + 1, set_at = excluded.set_at \
             RETURNING version",
        )
        .bind(agent_id.to_owned())
        .bind(kind.as_str())
        .bind(sealed.key_id.clone())
        .bind(sealed.nonce.clone())
        .bind(sealed.ciphertext.clone())
        .bind(ms(now))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        let version: i64 = row.try_get(0).map_err(|e| StoreError::Corrupt {
            what: "credential",
            detail: e.to_string(),
        })?;
        let mut fx = fx.clone();
        fx.audit
            .detail
            .get_or_insert_with(|| format!("version {version}"));
        self.commit_with_effects(tx, &fx, now).await?;
        Ok(CredentialMeta {
            kind: kind.as_str().to_owned(),
            version,
            // What the store keeps: millisecond precision.
            set_at: from_ms(ms(now)),
        })
    }

    async fn delete_agent_credential(
        &self,
        agent_id: &str,
        kind: CredentialKind,
        fx: &Effects,
    ) -> Result<()> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let query = sqlx::query("DELETE FROM agent_credentials WHERE agent_id = $1 AND kind = $2")
            .bind(agent_id.to_owned())
            .bind(kind.as_str());
        let deleted = self.run_in(&mut tx, query).await?;
        if deleted == 0 {
            return Err(not_found("credential", kind.as_str()));
        }
        self.commit_with_effects(tx, fx, now).await
    }

    async fn list_agent_credentials(&self, agent_id: &str) -> Result<Vec<StoredCredential>> {
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM agent_credentials WHERE agent_id = $1 ORDER BY kind"
        )))
        .bind(agent_id.to_owned());
        self.read_all(query, credential_from_row).await
    }

    async fn revision_credentials(&self, revision_id: &str) -> Result<Vec<StoredCredential>> {
        let query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLS} FROM revision_credentials WHERE revision_id = $1 ORDER BY kind"
        )))
        .bind(revision_id.to_owned());
        self.read_all(query, credential_from_row).await
    }
}
