//! [`LinkStore`] over the shared SQL (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

use super::group::{LinkWrite, Written};
use super::link::{
    BootstrapToken, CertificateStatus, ClusterClaim, EnrollRejected, LinkStore, NewBootstrapToken,
    OutboxItem, OutboxSummary, RevokedCertificate, SpokeReport,
};
use super::sql::{CLUSTER_COLS, SqlStore, cluster_from_row, from_ms, ms, not_found};
use super::{Effects, Result, StoreError};
use crate::model::{Cluster, ConnectionState};

pub(super) const OUTBOX_COLS: &str =
    "cluster_id, sequence, target, kind, generation, spec, created_at";

fn outbox_from_row(r: &sqlx::any::AnyRow) -> Result<OutboxItem> {
    let corrupt = |e: sqlx::Error| StoreError::Corrupt {
        what: "outbox item",
        detail: e.to_string(),
    };
    Ok(OutboxItem {
        cluster_id: r.try_get("cluster_id").map_err(corrupt)?,
        sequence: r.try_get("sequence").map_err(corrupt)?,
        target: r.try_get("target").map_err(corrupt)?,
        kind: r.try_get("kind").map_err(corrupt)?,
        generation: r.try_get("generation").map_err(corrupt)?,
        spec: r.try_get("spec").map_err(corrupt)?,
        created_at: from_ms(r.try_get("created_at").map_err(corrupt)?),
    })
}

#[async_trait]
impl LinkStore for SqlStore {
    async fn create_bootstrap_token(
        &self,
        token: &NewBootstrapToken,
        fx: &Effects,
    ) -> Result<BootstrapToken> {
        let now = Utc::now();
        let mut tx = self.begin().await?;
        let exists = sqlx::query("SELECT 1 FROM clusters WHERE name = $1")
            .bind(token.cluster_name.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .is_some();
        if exists && !token.reenroll {
            return Err(StoreError::FailedPrecondition(format!(
                "cluster {:?} is already enrolled; re-enrolling it is an admin decision (--reenroll)",
                token.cluster_name
            )));
        }
        let id = Uuid::now_v7().to_string();
        sqlx::query(
            "INSERT INTO bootstrap_tokens (id, cluster_name, token_hash, reenroll, created_by, \
             created_at, expires_at, used_at, require_approval) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8)",
        )
        .bind(id.clone())
        .bind(token.cluster_name.clone())
        .bind(token.hash.clone())
        .bind(i64::from(token.reenroll))
        .bind(token.created_by.clone())
        .bind(ms(now))
        .bind(ms(token.expires_at))
        .bind(i64::from(token.require_approval))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        Ok(BootstrapToken {
            id,
            cluster_name: token.cluster_name.clone(),
            reenroll: token.reenroll,
            expires_at: from_ms(ms(token.expires_at)),
            used_at: None,
        })
    }

    async fn begin_enrollment(
        &self,
        token_hash: &str,
        cluster_name: &str,
        claim: &ClusterClaim,
        now: DateTime<Utc>,
    ) -> Result<Result<Cluster, EnrollRejected>> {
        let mut tx = self.begin().await?;
        let Some(row) = sqlx::query(
            "SELECT id, cluster_name, reenroll, expires_at, used_at, require_approval, \
             approved_at FROM bootstrap_tokens WHERE token_hash = $1",
        )
        .bind(token_hash.to_owned())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        else {
            return Ok(Err(EnrollRejected::UnknownToken));
        };
        let token_id: String = row.get(0);
        let for_cluster: String = row.get(1);
        let reenroll = row.get::<i64, _>(2) != 0;
        if row.get::<Option<i64>, _>(4).is_some() {
            return Ok(Err(EnrollRejected::TokenUsed));
        }
        if row.get::<i64, _>(3) <= ms(now) {
            return Ok(Err(EnrollRejected::TokenExpired));
        }
        if for_cluster != cluster_name {
            return Ok(Err(EnrollRejected::WrongCluster));
        }
        let needs_approval = row.get::<i64, _>(5) != 0;
        if needs_approval && row.get::<Option<i64>, _>(6).is_none() {
            sqlx::query(
                "UPDATE bootstrap_tokens SET pending_since = COALESCE(pending_since, $1) \
                 WHERE id = $2",
            )
            .bind(ms(now))
            .bind(token_id)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
            self.commit(tx).await?;
            return Ok(Err(EnrollRejected::AwaitingApproval));
        }
        // Consume first: a concurrent enrollment with the same token finds
        // it used (the UPDATE is the single winner).
        let consumed = sqlx::query(
            "UPDATE bootstrap_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL",
        )
        .bind(ms(now))
        .bind(token_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if consumed == 0 {
            return Ok(Err(EnrollRejected::TokenUsed));
        }
        let existing = sqlx::query("SELECT id FROM clusters WHERE name = $1")
            .bind(cluster_name.to_owned())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
        // One spoke per Kubernetes cluster: a refusal returns before the
        // commit, so the token is not consumed.
        if let Some(uid) = &claim.kubernetes_uid
            && !claim.allow_shared
            && let Some(other) = sqlx::query(
                "SELECT name FROM clusters WHERE kubernetes_uid = $1 AND name <> $2 \
                 AND revoked_at IS NULL ORDER BY name LIMIT 1",
            )
            .bind(uid.clone())
            .bind(cluster_name.to_owned())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
        {
            return Ok(Err(EnrollRejected::SharedCluster {
                other: other.get(0),
                uid: uid.clone(),
            }));
        }
        let id = match existing {
            Some(_) if !reenroll => {
                return Ok(Err(EnrollRejected::AlreadyEnrolled(
                    cluster_name.to_owned(),
                )));
            }
            Some(row) => {
                // Re-enrollment keeps the id (revisions and outbox refer to
                // it) but every earlier certificate stays revoked.
                let id: String = row.get(0);
                sqlx::query(
                    "UPDATE clusters SET connection_state = 'pending', revoked_at = NULL \
                     WHERE id = $1",
                )
                .bind(id.clone())
                .execute(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?;
                self.revoke_certificates(&mut tx, &id, now).await?;
                id
            }
            None => {
                let id = Uuid::now_v7().to_string();
                sqlx::query(
                    "INSERT INTO clusters (id, name, labels, capabilities, certificate_serials, \
                     connection_state, last_seen, version, created_at) \
                     VALUES ($1, $2, '{}', '[]', '[]', 'pending', NULL, '', $3)",
                )
                .bind(id.clone())
                .bind(cluster_name.to_owned())
                .bind(ms(now))
                .execute(&mut *tx)
                .await
                .map_err(|e| self.classify(e))?;
                id
            }
        };
        sqlx::query("UPDATE clusters SET kubernetes_uid = $1 WHERE id = $2")
            .bind(claim.kubernetes_uid.clone())
            .bind(id.clone())
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
        let audit = super::NewAudit {
            actor: "system:link".into(),
            action: if reenroll {
                "cluster.reenroll".into()
            } else {
                "cluster.enroll".into()
            },
            namespace: None,
            target: format!("clusters/{cluster_name}"),
            result: "ok".into(),
            detail: None,
        };
        self.write_effects(&mut tx, &Effects::audit(audit), now)
            .await?;
        self.commit(tx).await?;
        Ok(Ok(self.get_cluster_by_id(&id).await?))
    }

    async fn approve_enrollment(
        &self,
        cluster_name: &str,
        now: DateTime<Utc>,
        fx: &Effects,
    ) -> Result<bool> {
        let mut tx = self.begin().await?;
        let approved = sqlx::query(
            "UPDATE bootstrap_tokens SET approved_at = $1 WHERE cluster_name = $2 \
             AND require_approval = 1 AND pending_since IS NOT NULL AND approved_at IS NULL \
             AND used_at IS NULL AND expires_at > $1",
        )
        .bind(ms(now))
        .bind(cluster_name.to_owned())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        if approved == 0 {
            return Ok(false);
        }
        self.write_effects(&mut tx, fx, now).await?;
        self.commit_effects(tx, fx).await?;
        Ok(true)
    }

    async fn add_certificate(
        &self,
        cluster_id: &str,
        serial: &str,
        not_after: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let row = sqlx::query("SELECT certificate_serials FROM clusters WHERE id = $1")
            .bind(cluster_id.to_owned())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("cluster", cluster_id))?;
        let mut serials: Vec<String> =
            serde_json::from_str(&row.get::<String, _>(0)).unwrap_or_default();
        serials.push(serial.to_owned());
        sqlx::query("UPDATE clusters SET certificate_serials = $1 WHERE id = $2")
            .bind(serde_json::to_string(&serials).unwrap_or_else(|_| "[]".into()))
            .bind(cluster_id.to_owned())
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
        sqlx::query(
            "INSERT INTO cluster_certificates (serial, cluster_id, issued_at, not_after, \
             revoked_at) VALUES ($1, $2, $3, $4, NULL)",
        )
        .bind(serial.to_owned())
        .bind(cluster_id.to_owned())
        .bind(ms(now))
        .bind(ms(not_after))
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        self.commit(tx).await
    }

    async fn certificate_expiry(&self) -> Result<std::collections::HashMap<String, DateTime<Utc>>> {
        let rows = sqlx::query(
            "SELECT cluster_id, MAX(not_after) FROM cluster_certificates \
             WHERE revoked_at IS NULL GROUP BY cluster_id",
        )
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get(0).map_err(|e| self.classify(e))?;
                let not_after: i64 = r.try_get(1).map_err(|e| self.classify(e))?;
                Ok((id, from_ms(not_after)))
            })
            .collect()
    }

    async fn get_cluster_by_id(&self, id: &str) -> Result<Cluster> {
        let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.to_owned())
            .fetch_optional(self.reader())
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("cluster", id))?;
        cluster_from_row(&row)
    }

    async fn certificate_status(&self, serial: &str) -> Result<Option<CertificateStatus>> {
        let row = sqlx::query(
            "SELECT c.cluster_id, c.revoked_at, k.revoked_at FROM cluster_certificates c \
             JOIN clusters k ON k.id = c.cluster_id WHERE c.serial = $1",
        )
        .bind(serial.to_owned())
        .fetch_optional(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        Ok(row.map(|r| CertificateStatus {
            cluster_id: r.get(0),
            revoked: r.get::<Option<i64>, _>(1).is_some() || r.get::<Option<i64>, _>(2).is_some(),
        }))
    }

    async fn revoke_cluster(&self, name: &str, at: DateTime<Utc>, fx: &Effects) -> Result<Cluster> {
        let mut tx = self.begin().await?;
        let id: String = sqlx::query("SELECT id FROM clusters WHERE name = $1")
            .bind(name.to_owned())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("cluster", name))?
            .get(0);
        sqlx::query(
            "UPDATE clusters SET connection_state = 'revoked', revoked_at = COALESCE(revoked_at, $1) \
             WHERE id = $2",
        )
        .bind(ms(at))
        .bind(id.clone())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        self.revoke_certificates(&mut tx, &id, at).await?;
        self.write_effects(&mut tx, fx, at).await?;
        self.insert_cluster_event(&mut tx, &id, at).await?;
        self.commit_effects(tx, fx).await?;
        self.events_committed();
        // The link closes the cluster's session on this, not on its poll.
        self.store_signals().revocations.notify();
        self.get_cluster_by_id(&id).await
    }

    async fn revoked_after(&self, after: i64) -> Result<Vec<RevokedCertificate>> {
        let rows = sqlx::query(
            "SELECT cluster_id, serial, revoked_at, revoked_seq FROM cluster_certificates \
             WHERE revoked_seq > $1 ORDER BY revoked_seq",
        )
        .bind(after)
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        Ok(rows
            .iter()
            .map(|r| RevokedCertificate {
                cluster_id: r.get(0),
                serial: r.get(1),
                revoked_at: from_ms(r.get(2)),
                sequence: r.get(3),
            })
            .collect())
    }

    async fn set_connection_state(
        &self,
        cluster_id: &str,
        state: ConnectionState,
        last_seen: DateTime<Utc>,
        hello: Option<(&str, &[String])>,
    ) -> Result<()> {
        let (version, capabilities) = match hello {
            Some((v, caps)) => (
                Some(v.to_owned()),
                Some(serde_json::to_string(caps).unwrap_or_else(|_| "[]".into())),
            ),
            None => (None, None),
        };
        // With its watch event in one transaction: a change of state, or a
        // Hello that changes the version or capabilities, is an event; a
        // heartbeat's last_seen is not, nor a Hello that changes nothing (a
        // spoke moving to another replica while its cluster stays online:
        // the event's sequence is one row every writer waits for, and a
        // failover would queue thousands of them for nothing).
        let mut tx = self.begin().await?;
        let before: Option<(String, Option<String>, Option<String>)> = sqlx::query(
            "SELECT connection_state, version, capabilities FROM clusters WHERE id = $1",
        )
        .bind(cluster_id.to_owned())
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .map(|r| (r.get(0), r.get(1), r.get(2)));
        let hello_changes = match (&before, &version, &capabilities) {
            (Some((_, v0, c0)), Some(v), Some(c)) => {
                v0.as_deref() != Some(v.as_str()) || c0.as_deref() != Some(c.as_str())
            }
            _ => false,
        };
        let updated = sqlx::query(
            "UPDATE clusters SET connection_state = $1, last_seen = $2, \
             version = COALESCE($3, version), capabilities = COALESCE($4, capabilities) \
             WHERE id = $5 AND revoked_at IS NULL",
        )
        .bind(state.as_str())
        .bind(ms(last_seen))
        .bind(version)
        .bind(capabilities)
        .bind(cluster_id.to_owned())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        let changed = before.as_ref().map(|b| b.0.as_str()) != Some(state.as_str());
        let event = updated == 1 && (changed || hello_changes);
        if event {
            self.insert_cluster_event(&mut tx, cluster_id, Utc::now())
                .await?;
        }
        self.commit(tx).await?;
        if event {
            self.events_committed();
        }
        Ok(())
    }

    async fn mark_stale_offline(&self, before: DateTime<Utc>) -> Result<u64> {
        let mut tx = self.begin().await?;
        let stale: Vec<String> = sqlx::query(
            "SELECT id FROM clusters WHERE connection_state = 'online' AND revoked_at IS NULL \
             AND (last_seen IS NULL OR last_seen < $1)",
        )
        .bind(ms(before))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
        let mut marked = 0;
        for id in &stale {
            marked += sqlx::query(
                "UPDATE clusters SET connection_state = 'offline' \
                 WHERE id = $1 AND connection_state = 'online' AND revoked_at IS NULL",
            )
            .bind(id.clone())
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .rows_affected();
            self.insert_cluster_event(&mut tx, id, Utc::now()).await?;
        }
        self.commit(tx).await?;
        if !stale.is_empty() {
            self.events_committed();
        }
        Ok(marked)
    }

    async fn outbox_put(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        spec: &str,
    ) -> Result<Option<i64>> {
        let written = self
            .link_write(LinkWrite::Put {
                cluster_id: cluster_id.to_owned(),
                target: target.to_owned(),
                kind: kind.to_owned(),
                generation,
                spec: spec.to_owned(),
                now: Utc::now(),
            })
            .await?;
        match written {
            Written::Put(sequence) => Ok(sequence),
            other => Err(mismatch(other)),
        }
    }

    async fn outbox_pending(
        &self,
        cluster_id: &str,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<OutboxItem>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {OUTBOX_COLS} FROM outbox WHERE cluster_id = $1 AND acked_at IS NULL \
             AND sequence > $2 ORDER BY sequence LIMIT $3"
        )))
        .bind(cluster_id.to_owned())
        .bind(after_sequence)
        .bind(limit)
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter().map(outbox_from_row).collect()
    }

    async fn outbox_ack(
        &self,
        cluster_id: &str,
        sequence: i64,
        target: &str,
        generation: i64,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let written = self
            .link_write(LinkWrite::Ack {
                cluster_id: cluster_id.to_owned(),
                sequence,
                target: target.to_owned(),
                generation,
                now,
            })
            .await?;
        match written {
            Written::Ack(acked) => Ok(acked),
            other => Err(mismatch(other)),
        }
    }

    async fn outbox_ack_applied(
        &self,
        cluster_id: &str,
        applied: &[(String, i64)],
        now: DateTime<Utc>,
    ) -> Result<u64> {
        if applied.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        let mut acked = 0;
        for (target, generation) in applied {
            acked += sqlx::query(
                "UPDATE outbox SET acked_at = $1 WHERE cluster_id = $2 AND target = $3 \
                 AND generation <= $4 AND acked_at IS NULL",
            )
            .bind(ms(now))
            .bind(cluster_id.to_owned())
            .bind(target.clone())
            .bind(*generation)
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .rows_affected();
        }
        self.commit(tx).await?;
        Ok(acked)
    }

    async fn outbox_knows_target(&self, cluster_id: &str, target: &str) -> Result<bool> {
        Ok(self
            .outbox_latest_generation(cluster_id, target)
            .await?
            .is_some())
    }

    async fn outbox_target_exists(&self, target: &str) -> Result<bool> {
        Ok(
            sqlx::query("SELECT 1 FROM outbox WHERE target = $1 LIMIT 1")
                .bind(target.to_owned())
                .fetch_optional(self.reader())
                .await
                .map_err(|e| self.classify(e))?
                .is_some(),
        )
    }

    async fn outbox_latest_generation(
        &self,
        cluster_id: &str,
        target: &str,
    ) -> Result<Option<i64>> {
        Ok(
            sqlx::query("SELECT MAX(generation) FROM outbox WHERE cluster_id = $1 AND target = $2")
                .bind(cluster_id.to_owned())
                .bind(target.to_owned())
                .fetch_one(self.reader())
                .await
                .map_err(|e| self.classify(e))?
                .get(0),
        )
    }

    async fn outbox_acked_latest(&self, cluster_id: &str) -> Result<Vec<(String, String, i64)>> {
        let rows = sqlx::query(
            "SELECT o.target, o.kind, o.generation FROM outbox o \
             WHERE o.cluster_id = $1 AND o.acked_at IS NOT NULL \
             AND o.generation = (SELECT MAX(i.generation) FROM outbox i \
               WHERE i.cluster_id = o.cluster_id AND i.target = o.target \
               AND i.acked_at IS NOT NULL) \
             ORDER BY o.target, o.sequence",
        )
        .bind(cluster_id.to_owned())
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        let mut out: Vec<(String, String, i64)> = Vec::with_capacity(rows.len());
        for r in &rows {
            let target: String = r.get(0);
            // A resent copy shares the generation: one entry per target.
            if out.last().is_some_and(|(t, _, _)| *t == target) {
                continue;
            }
            out.push((target, r.get(1), r.get(2)));
        }
        Ok(out)
    }

    async fn outbox_resend(&self, cluster_id: &str, targets: &[String]) -> Result<Vec<i64>> {
        let mut sequences = Vec::new();
        for target in targets {
            let now = Utc::now();
            let mut tx = self.begin().await?;
            // The counter bump first: it serialises puts to this cluster.
            let sequence: i64 = sqlx::query(
                "UPDATE clusters SET next_sequence = next_sequence + 1 WHERE id = $1 \
                 RETURNING next_sequence",
            )
            .bind(cluster_id.to_owned())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .ok_or_else(|| not_found("cluster", cluster_id))?
            .get(0);
            let queued = sqlx::query(
                "SELECT 1 FROM outbox WHERE cluster_id = $1 AND target = $2 AND acked_at IS NULL",
            )
            .bind(cluster_id.to_owned())
            .bind(target.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?
            .is_some();
            if queued {
                continue;
            }
            let latest = sqlx::query(AssertSqlSafe(format!(
                "SELECT {OUTBOX_COLS} FROM outbox WHERE cluster_id = $1 AND target = $2 \
                 AND acked_at IS NOT NULL ORDER BY generation DESC, sequence DESC LIMIT 1"
            )))
            .bind(cluster_id.to_owned())
            .bind(target.clone())
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
            let Some(item) = latest.as_ref().map(outbox_from_row).transpose()? else {
                continue;
            };
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO outbox ({OUTBOX_COLS}, acked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL)"
            )))
            .bind(cluster_id.to_owned())
            .bind(sequence)
            .bind(item.target)
            .bind(item.kind)
            .bind(item.generation)
            .bind(item.spec)
            .bind(ms(now))
            .execute(&mut *tx)
            .await
            .map_err(|e| self.classify(e))?;
            self.commit(tx).await?;
            sequences.push(sequence);
        }
        Ok(sequences)
    }

    async fn outbox_summary(&self) -> Result<Vec<OutboxSummary>> {
        let rows = sqlx::query(
            "SELECT o.cluster_id, c.name, COUNT(*), MAX(o.sequence) FROM outbox o \
             JOIN clusters c ON c.id = o.cluster_id WHERE o.acked_at IS NULL \
             GROUP BY o.cluster_id, c.name",
        )
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        Ok(rows
            .iter()
            .map(|r| OutboxSummary {
                cluster_id: r.get(0),
                cluster_name: r.get(1),
                depth: r.get(2),
                max_sequence: r.get(3),
            })
            .collect())
    }

    async fn put_report(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        body: &serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let written = self
            .link_write(LinkWrite::Report {
                cluster_id: cluster_id.to_owned(),
                target: target.to_owned(),
                kind: kind.to_owned(),
                generation,
                body: body.to_string(),
                now,
            })
            .await?;
        match written {
            Written::Report => Ok(()),
            other => Err(mismatch(other)),
        }
    }

    async fn list_reports(&self, cluster_id: &str) -> Result<Vec<SpokeReport>> {
        let rows = sqlx::query(
            "SELECT cluster_id, target, kind, generation, body, received_at FROM spoke_reports \
             WHERE cluster_id = $1 ORDER BY target, kind",
        )
        .bind(cluster_id.to_owned())
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter().map(report_from_row).collect()
    }

    async fn target_reports(
        &self,
        target: &str,
        kind: &str,
    ) -> Result<Vec<(String, Option<SpokeReport>)>> {
        let rows = sqlx::query(
            "SELECT c.name, r.cluster_id, r.target, r.kind, r.generation, r.body, r.received_at \
             FROM clusters c \
             JOIN (SELECT DISTINCT cluster_id FROM outbox WHERE target = $1) o \
               ON o.cluster_id = c.id \
             LEFT JOIN spoke_reports r \
               ON r.cluster_id = c.id AND r.target = $1 AND r.kind = $2 \
             ORDER BY c.name",
        )
        .bind(target.to_owned())
        .bind(kind.to_owned())
        .fetch_all(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter()
            .map(|r| {
                let name: String = r.get(0);
                let cluster_id: Option<String> = r.get(1);
                let report = match cluster_id {
                    None => None,
                    Some(cluster_id) => Some(SpokeReport {
                        cluster_id,
                        target: r.get(2),
                        kind: r.get(3),
                        generation: r.get(4),
                        body: serde_json::from_str(&r.get::<String, _>(5)).map_err(|e| {
                            StoreError::Corrupt {
                                what: "spoke report",
                                detail: e.to_string(),
                            }
                        })?,
                        received_at: from_ms(r.get(6)),
                    }),
                };
                Ok((name, report))
            })
            .collect()
    }

    async fn get_report(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
    ) -> Result<Option<SpokeReport>> {
        let row = sqlx::query(
            "SELECT cluster_id, target, kind, generation, body, received_at FROM spoke_reports \
             WHERE cluster_id = $1 AND target = $2 AND kind = $3",
        )
        .bind(cluster_id.to_owned())
        .bind(target.to_owned())
        .bind(kind.to_owned())
        .fetch_optional(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        row.as_ref().map(report_from_row).transpose()
    }
}

/// A group commit answered a write with another kind's result (a bug).
fn mismatch(written: Written) -> StoreError {
    StoreError::Corrupt {
        what: "group commit result",
        detail: format!("unexpected {written:?}"),
    }
}

fn report_from_row(r: &sqlx::any::AnyRow) -> Result<SpokeReport> {
    Ok(SpokeReport {
        cluster_id: r.get(0),
        target: r.get(1),
        kind: r.get(2),
        generation: r.get(3),
        body: serde_json::from_str(&r.get::<String, _>(4)).map_err(|e| StoreError::Corrupt {
            what: "spoke report",
            detail: e.to_string(),
        })?,
        received_at: from_ms(r.get(5)),
    })
}

impl SqlStore {
    /// Appends a watch event with the cluster's state as `tx` sees it:
    /// connected, offline or revoked, with last seen, version,
    /// capabilities and the expiry of its newest unrevoked certificate.
    /// Revokes every certificate of `cluster_id` not revoked yet, under
    /// the next revocation sequence (the head row stays locked until the
    /// transaction commits, so sequences become visible in order).
    pub(super) async fn revoke_certificates(
        &self,
        tx: &mut super::sql::Tx,
        cluster_id: &str,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let seq: i64 =
            sqlx::query("UPDATE revocation_head SET seq = seq + 1 WHERE id = 1 RETURNING seq")
                .fetch_one(&mut **tx)
                .await
                .map_err(|e| self.classify(e))?
                .get(0);
        sqlx::query(
            "UPDATE cluster_certificates SET revoked_at = COALESCE(revoked_at, $1), \
             revoked_seq = COALESCE(revoked_seq, $2) WHERE cluster_id = $3",
        )
        .bind(ms(at))
        .bind(seq)
        .bind(cluster_id.to_owned())
        .execute(&mut **tx)
        .await
        .map_err(|e| self.classify(e))?;
        Ok(())
    }

    pub(super) async fn insert_cluster_event(
        &self,
        tx: &mut super::sql::Tx,
        cluster_id: &str,
        now: DateTime<Utc>,
    ) -> Result<()> {
        use crate::model::event::{ClusterEvent, EventBody};
        let sql = format!("SELECT {CLUSTER_COLS} FROM clusters WHERE id = $1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(cluster_id.to_owned())
            .fetch_one(&mut **tx)
            .await
            .map_err(|e| self.classify(e))?;
        let cluster = cluster_from_row(&row)?;
        let expires: Option<i64> = sqlx::query(
            "SELECT MAX(not_after) FROM cluster_certificates \
             WHERE cluster_id = $1 AND revoked_at IS NULL",
        )
        .bind(cluster_id.to_owned())
        .fetch_one(&mut **tx)
        .await
        .map_err(|e| self.classify(e))?
        .try_get(0)
        .map_err(|e| self.classify(e))?;
        let state = ClusterEvent {
            state: cluster.connection_state,
            last_seen: cluster.last_seen,
            version: cluster.version,
            capabilities: cluster.capabilities,
            certificate_expires_at: expires.map(from_ms),
        };
        let body = match cluster.connection_state {
            ConnectionState::Online => EventBody::ClusterConnected(state),
            ConnectionState::Revoked => EventBody::ClusterRevoked(state),
            _ => EventBody::ClusterOffline(state),
        };
        let event = super::NewEvent {
            namespace_id: None,
            cluster: Some(cluster.name),
            body,
        };
        self.insert_event(tx, &event, now).await?;
        Ok(())
    }
}
