//! Cluster certificates and revocation: certificates issued, their expiry
//! and standing, and the revocation of a cluster with every certificate
//! it holds, under the revocation sequence.

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::SqlStore;
use crate::model::Cluster;
use crate::store::link::{CertificateStatus, RevokedCertificate};
use crate::store::sql::{from_ms, ms};
use crate::store::{Effects, Result};

pub(super) async fn add_certificate(
    store: &SqlStore,
    cluster_id: &str,
    serial: &str,
    not_after: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<()> {
    let mut tx = store.begin().await?;
    let query = sqlx::query("SELECT certificate_serials FROM clusters WHERE id = $1")
        .bind(cluster_id.to_owned());
    let row = store.one_in(&mut tx, query, "cluster", cluster_id).await?;
    let mut serials: Vec<String> =
        serde_json::from_str(&row.get::<String, _>(0)).unwrap_or_default();
    serials.push(serial.to_owned());
    let query = sqlx::query("UPDATE clusters SET certificate_serials = $1 WHERE id = $2")
        .bind(serde_json::to_string(&serials).unwrap_or_else(|_| "[]".into()))
        .bind(cluster_id.to_owned());
    store.run_in(&mut tx, query).await?;
    let query = sqlx::query(
        "INSERT INTO cluster_certificates (serial, cluster_id, issued_at, not_after, \
         revoked_at) VALUES ($1, $2, $3, $4, NULL)",
    )
    .bind(serial.to_owned())
    .bind(cluster_id.to_owned())
    .bind(ms(now))
    .bind(ms(not_after));
    store.run_in(&mut tx, query).await?;
    store.commit(tx).await
}

pub(super) async fn certificate_expiry(
    store: &SqlStore,
) -> Result<std::collections::HashMap<String, DateTime<Utc>>> {
    let rows = sqlx::query(
        "SELECT cluster_id, MAX(not_after) FROM cluster_certificates \
         WHERE revoked_at IS NULL GROUP BY cluster_id",
    )
    .fetch_all(store.pool())
    .await
    .map_err(|e| store.classify(e))?;
    rows.iter()
        .map(|r| {
            let id: String = r.try_get(0).map_err(|e| store.classify(e))?;
            let not_after: i64 = r.try_get(1).map_err(|e| store.classify(e))?;
            Ok((id, from_ms(not_after)))
        })
        .collect()
}

pub(super) async fn certificate_status(
    store: &SqlStore,
    serial: &str,
) -> Result<Option<CertificateStatus>> {
    let row = sqlx::query(
        "SELECT c.cluster_id, c.revoked_at, k.revoked_at FROM cluster_certificates c \
         JOIN clusters k ON k.id = c.cluster_id WHERE c.serial = $1",
    )
    .bind(serial.to_owned())
    .fetch_optional(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
    Ok(row.map(|r| CertificateStatus {
        cluster_id: r.get(0),
        revoked: r.get::<Option<i64>, _>(1).is_some() || r.get::<Option<i64>, _>(2).is_some(),
    }))
}

pub(super) async fn revoke_cluster(
    store: &SqlStore,
    name: &str,
    at: DateTime<Utc>,
    fx: &Effects,
) -> Result<Cluster> {
    let mut tx = store.begin().await?;
    let query = sqlx::query("SELECT id FROM clusters WHERE name = $1").bind(name.to_owned());
    let id: String = store.one_in(&mut tx, query, "cluster", name).await?.get(0);
    let query = sqlx::query(
        "UPDATE clusters SET connection_state = 'revoked', revoked_at = COALESCE(revoked_at, $1) \
         WHERE id = $2",
    )
    .bind(ms(at))
    .bind(id.clone());
    store.run_in(&mut tx, query).await?;
    revoke_certificates(store, &mut tx, &id, at).await?;
    store.write_effects(&mut tx, fx, at).await?;
    store.insert_cluster_event(&mut tx, &id, at).await?;
    store.commit_effects(tx, fx).await?;
    store.events_committed();
    // The link closes the cluster's session on this, not on its poll.
    store.store_signals().revocations.notify();
    super::connection::get_cluster_by_id(store, &id).await
}

pub(super) async fn revoked_after(store: &SqlStore, after: i64) -> Result<Vec<RevokedCertificate>> {
    let rows = sqlx::query(
        "SELECT cluster_id, serial, revoked_at, revoked_seq FROM cluster_certificates \
         WHERE revoked_seq > $1 ORDER BY revoked_seq",
    )
    .bind(after)
    .fetch_all(store.reader())
    .await
    .map_err(|e| store.classify(e))?;
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

/// Revokes every certificate of `cluster_id` not revoked yet, under
/// the next revocation sequence (the head row stays locked until the
/// transaction commits, so sequences become visible in order).
pub(super) async fn revoke_certificates(
    store: &SqlStore,
    tx: &mut crate::store::sql::Tx,
    cluster_id: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    let seq: i64 =
        sqlx::query("UPDATE revocation_head SET seq = seq + 1 WHERE id = 1 RETURNING seq")
            .fetch_one(&mut **tx)
            .await
            .map_err(|e| store.classify(e))?
            .get(0);
    let query = sqlx::query(
        "UPDATE cluster_certificates SET revoked_at = COALESCE(revoked_at, $1), \
         revoked_seq = COALESCE(revoked_seq, $2) WHERE cluster_id = $3",
    )
    .bind(ms(at))
    .bind(seq)
    .bind(cluster_id.to_owned());
    store.run_in(tx, query).await?;
    Ok(())
}
