//! Bootstrap tokens and enrollment: a token is created for a cluster name,
//! consumed once by the spoke that enrols (or re-enrols) under it, and,
//! when it requires approval, waits for an admin's.

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::SqlStore;
use crate::model::Cluster;
use crate::store::link::{BootstrapToken, ClusterClaim, EnrollRejected, NewBootstrapToken};
use crate::store::sql::{from_ms, ms};
use crate::store::{Effects, Result, StoreError};

pub(super) async fn create_bootstrap_token(
    store: &SqlStore,
    token: &NewBootstrapToken,
    fx: &Effects,
) -> Result<BootstrapToken> {
    let now = Utc::now();
    let mut tx = store.begin().await?;
    let query =
        sqlx::query("SELECT 1 FROM clusters WHERE name = $1").bind(token.cluster_name.clone());
    let exists = store.row_in(&mut tx, query).await?.is_some();
    if exists && !token.reenroll {
        return Err(StoreError::FailedPrecondition(format!(
            "cluster {:?} is already enrolled; re-enrolling it is an admin decision (--reenroll)",
            token.cluster_name
        )));
    }
    let id = Uuid::now_v7().to_string();
    let query = sqlx::query(
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
    .bind(i64::from(token.require_approval));
    store.run_in(&mut tx, query).await?;
    store.commit_with_effects(tx, fx, now).await?;
    Ok(BootstrapToken {
        id,
        cluster_name: token.cluster_name.clone(),
        reenroll: token.reenroll,
        expires_at: from_ms(ms(token.expires_at)),
        used_at: None,
    })
}

pub(super) async fn begin_enrollment(
    store: &SqlStore,
    token_hash: &str,
    cluster_name: &str,
    claim: &ClusterClaim,
    now: DateTime<Utc>,
) -> Result<Result<Cluster, EnrollRejected>> {
    let mut tx = store.begin().await?;
    let Some(row) = store
        .row_in(
            &mut tx,
            sqlx::query(
                "SELECT id, cluster_name, reenroll, expires_at, used_at, require_approval, \
         approved_at FROM bootstrap_tokens WHERE token_hash = $1",
            )
            .bind(token_hash.to_owned()),
        )
        .await?
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
        let query = sqlx::query(
            "UPDATE bootstrap_tokens SET pending_since = COALESCE(pending_since, $1) \
             WHERE id = $2",
        )
        .bind(ms(now))
        .bind(token_id);
        store.run_in(&mut tx, query).await?;
        store.commit(tx).await?;
        return Ok(Err(EnrollRejected::AwaitingApproval));
    }
    // Consume first: a concurrent enrollment with the same token finds
    // it used (the UPDATE is the single winner).
    let query =
        sqlx::query("UPDATE bootstrap_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL")
            .bind(ms(now))
            .bind(token_id);
    let consumed = store.run_in(&mut tx, query).await?;
    if consumed == 0 {
        return Ok(Err(EnrollRejected::TokenUsed));
    }
    let query =
        sqlx::query("SELECT id FROM clusters WHERE name = $1").bind(cluster_name.to_owned());
    let existing = store.row_in(&mut tx, query).await?;
    // One spoke per Kubernetes cluster: a refusal returns before the
    // commit, so the token is not consumed.
    if let Some(uid) = &claim.kubernetes_uid
        && !claim.allow_shared
        && let Some(other) = store
            .row_in(
                &mut tx,
                sqlx::query(
                    "SELECT name FROM clusters WHERE kubernetes_uid = $1 AND name <> $2 \
             AND revoked_at IS NULL ORDER BY name LIMIT 1",
                )
                .bind(uid.clone())
                .bind(cluster_name.to_owned()),
            )
            .await?
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
            let query = sqlx::query(
                "UPDATE clusters SET connection_state = 'pending', revoked_at = NULL \
                 WHERE id = $1",
            )
            .bind(id.clone());
            store.run_in(&mut tx, query).await?;
            super::certificates::revoke_certificates(store, &mut tx, &id, now).await?;
            id
        }
        None => {
            let id = Uuid::now_v7().to_string();
            let query = sqlx::query(
                "INSERT INTO clusters (id, name, labels, capabilities, certificate_serials, \
                 connection_state, last_seen, version, created_at) \
                 VALUES ($1, $2, '{}', '[]', '[]', 'pending', NULL, '', $3)",
            )
            .bind(id.clone())
            .bind(cluster_name.to_owned())
            .bind(ms(now));
            store.run_in(&mut tx, query).await?;
            id
        }
    };
    let query = sqlx::query("UPDATE clusters SET kubernetes_uid = $1 WHERE id = $2")
        .bind(claim.kubernetes_uid.clone())
        .bind(id.clone());
    store.run_in(&mut tx, query).await?;
    let audit = crate::store::NewAudit {
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
    let fx = Effects::audit(audit);
    store.write_effects(&mut tx, &fx, now).await?;
    store.commit_effects(tx, &fx).await?;
    Ok(Ok(super::connection::get_cluster_by_id(store, &id).await?))
}

pub(super) async fn approve_enrollment(
    store: &SqlStore,
    cluster_name: &str,
    now: DateTime<Utc>,
    fx: &Effects,
) -> Result<bool> {
    let mut tx = store.begin().await?;
    let query = sqlx::query(
        "UPDATE bootstrap_tokens SET approved_at = $1 WHERE cluster_name = $2 \
         AND require_approval = 1 AND pending_since IS NOT NULL AND approved_at IS NULL \
         AND used_at IS NULL AND expires_at > $1",
    )
    .bind(ms(now))
    .bind(cluster_name.to_owned());
    let approved = store.run_in(&mut tx, query).await?;
    if approved == 0 {
        return Ok(false);
    }
    store.commit_with_effects(tx, fx, now).await?;
    Ok(true)
}
