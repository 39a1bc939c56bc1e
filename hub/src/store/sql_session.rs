//! [`SessionStore`] over the shared SQL (both backends).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::Row;

use sqlx::AssertSqlSafe;

use super::session::{ClusterSession, ReplicaRecord, SessionStore};
use super::sql::{SqlStore, from_ms, ms};
use super::{Backend, Result, Store};

#[async_trait]
impl SessionStore for SqlStore {
    async fn session_claim(
        &self,
        cluster_id: &str,
        replica_id: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<i64> {
        // One statement: the row lock orders it against a concurrent claim
        // or end of the same cluster, so epochs never repeat.
        let row = sqlx::query(
            "INSERT INTO cluster_sessions (cluster_id, replica_id, epoch, lease_expires_at) \
             VALUES ($1, $2, 1, $3) \
             ON CONFLICT (cluster_id) DO UPDATE SET replica_id = excluded.replica_id, \
             epoch = cluster_sessions.epoch + 1, lease_expires_at = excluded.lease_expires_at \
             RETURNING epoch",
        )
        .bind(cluster_id.to_owned())
        .bind(replica_id.to_owned())
        .bind(ms(lease_until))
        .fetch_one(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        row.try_get(0).map_err(|e| self.classify(e))
    }

    async fn session_renew(
        &self,
        replica_id: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<(String, i64)>> {
        // Ended sessions (lease 0) stay ended.
        let rows = sqlx::query(
            "UPDATE cluster_sessions SET lease_expires_at = $2 \
             WHERE replica_id = $1 AND lease_expires_at > 0 \
             RETURNING cluster_id, epoch",
        )
        .bind(replica_id.to_owned())
        .bind(ms(lease_until))
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(|e| self.classify(e))
    }

    async fn session_restore_online(
        &self,
        replica_id: &str,
        sessions: &[(String, i64)],
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<String>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        // The sessions as one JSON array of "<cluster id>:<epoch>" keys,
        // expanded in SQL (no array binds through the Any driver).
        let keys = serde_json::Value::from(
            sessions
                .iter()
                .map(|(c, e)| format!("{c}:{e}"))
                .collect::<Vec<_>>(),
        )
        .to_string();
        let key_set = match Store::backend(self) {
            Backend::Postgres => "SELECT json_array_elements_text(CAST($3 AS json))",
            Backend::Sqlite => "SELECT value FROM json_each($3)",
        };
        let held = format!(
            "replica_id = $1 AND lease_expires_at > 0 \
             AND (cluster_id || ':' || CAST(epoch AS TEXT)) IN ({key_set})"
        );
        let mut tx = self.begin().await?;
        let query = sqlx::query(AssertSqlSafe(format!(
            "UPDATE cluster_sessions SET lease_expires_at = $2 WHERE {held}"
        )))
        .bind(replica_id.to_owned())
        .bind(ms(lease_until))
        .bind(keys.clone());
        self.run_in(&mut tx, query).await?;
        let marked = sqlx::query(AssertSqlSafe(
            format!(
                "UPDATE clusters SET connection_state = 'online' \
             WHERE connection_state = 'offline' AND revoked_at IS NULL \
             AND id IN (SELECT cluster_id FROM cluster_sessions WHERE {held} \
                 AND lease_expires_at = $2)"
            ) + " RETURNING id",
        ))
        .bind(replica_id.to_owned())
        .bind(ms(lease_until))
        .bind(keys)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        self.commit_state_changes(tx, &marked).await
    }

    async fn session_end_offline(
        &self,
        cluster_id: &str,
        epoch: i64,
        last_seen: DateTime<Utc>,
    ) -> Result<bool> {
        let mut tx = self.begin().await?;
        // Compare-and-set on the epoch; the row lock it takes makes a
        // concurrent claim wait until this commits (then it marks online).
        let query = sqlx::query(
            "UPDATE cluster_sessions SET lease_expires_at = 0 \
             WHERE cluster_id = $1 AND epoch = $2",
        )
        .bind(cluster_id.to_owned())
        .bind(epoch);
        let ended = self.run_in(&mut tx, query).await? == 1;
        if !ended {
            return Ok(false);
        }
        let query = sqlx::query(
            "UPDATE clusters SET connection_state = 'offline', last_seen = $2 \
             WHERE id = $1 AND connection_state = 'online' AND revoked_at IS NULL",
        )
        .bind(cluster_id.to_owned())
        .bind(ms(last_seen));
        let marked = self.run_in(&mut tx, query).await? == 1;
        if marked {
            self.insert_cluster_event(&mut tx, cluster_id, Utc::now())
                .await?;
        }
        self.commit(tx).await?;
        if marked {
            self.events_committed();
        }
        Ok(true)
    }

    async fn offline_where_lease_expired(
        &self,
        now: DateTime<Utc>,
        unrecorded: bool,
    ) -> Result<Vec<String>> {
        let mut tx = self.begin().await?;
        // One UPDATE: replicas sweeping at once serialize on the row locks
        // and the later one finds the cluster offline already, so only one
        // writes the watch event.
        let marked = sqlx::query(
            "UPDATE clusters SET connection_state = 'offline' \
             WHERE connection_state = 'online' AND revoked_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM cluster_sessions s \
                 WHERE s.cluster_id = clusters.id AND s.lease_expires_at > $1) \
             AND ($2 = 1 OR EXISTS (SELECT 1 FROM cluster_sessions s \
                 WHERE s.cluster_id = clusters.id)) \
             RETURNING id",
        )
        .bind(ms(now))
        .bind(i64::from(unrecorded))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.classify(e))?;
        self.commit_state_changes(tx, &marked).await
    }

    async fn get_session(&self, cluster_id: &str) -> Result<Option<ClusterSession>> {
        let row = sqlx::query(
            "SELECT cluster_id, replica_id, epoch, lease_expires_at \
             FROM cluster_sessions WHERE cluster_id = $1",
        )
        .bind(cluster_id.to_owned())
        .fetch_optional(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        row.map(|r| {
            Ok(ClusterSession {
                cluster_id: r.try_get(0)?,
                replica_id: r.try_get(1)?,
                epoch: r.try_get(2)?,
                lease_expires_at: from_ms(r.try_get(3)?),
            })
        })
        .transpose()
        .map_err(|e: sqlx::Error| self.classify(e))
    }

    async fn session_hand_off(
        &self,
        cluster_id: &str,
        epoch: i64,
        lease_until: DateTime<Utc>,
    ) -> Result<bool> {
        // The empty owner: no replica's renewal matches it, so the lease
        // only lasts until `lease_until` unless a new session claims it.
        let handed = sqlx::query(
            "UPDATE cluster_sessions SET replica_id = '', lease_expires_at = $3 \
             WHERE cluster_id = $1 AND epoch = $2 AND lease_expires_at > 0",
        )
        .bind(cluster_id.to_owned())
        .bind(epoch)
        .bind(ms(lease_until))
        .execute(self.pool())
        .await
        .map_err(|e| self.classify(e))?
        .rows_affected();
        Ok(handed == 1)
    }

    async fn replica_heartbeat(&self, replica: &ReplicaRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO hub_replicas (replica_id, advertise_url, sessions, heartbeat_at, \
             tunnel_url) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (replica_id) DO UPDATE SET advertise_url = excluded.advertise_url, \
             sessions = excluded.sessions, heartbeat_at = excluded.heartbeat_at, \
             tunnel_url = excluded.tunnel_url",
        )
        .bind(replica.replica_id.clone())
        .bind(replica.advertise_url.clone())
        .bind(replica.sessions)
        .bind(ms(replica.heartbeat_at))
        .bind(replica.tunnel_url.clone())
        .execute(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn replicas_live(&self, since: DateTime<Utc>) -> Result<Vec<ReplicaRecord>> {
        sqlx::query("DELETE FROM hub_replicas WHERE heartbeat_at < $1")
            .bind(ms(since))
            .execute(self.pool())
            .await
            .map_err(|e| self.classify(e))?;
        let rows = sqlx::query(
            "SELECT replica_id, advertise_url, sessions, heartbeat_at, tunnel_url \
             FROM hub_replicas WHERE heartbeat_at >= $1 ORDER BY replica_id",
        )
        .bind(ms(since))
        .fetch_all(self.pool())
        .await
        .map_err(|e| self.classify(e))?;
        rows.iter()
            .map(|r| {
                Ok(ReplicaRecord {
                    replica_id: r.try_get(0)?,
                    advertise_url: r.try_get(1)?,
                    sessions: r.try_get(2)?,
                    heartbeat_at: from_ms(r.try_get(3)?),
                    tunnel_url: r.try_get(4)?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(|e| self.classify(e))
    }

    async fn replica_remove(&self, replica_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM hub_replicas WHERE replica_id = $1")
            .bind(replica_id.to_owned())
            .execute(self.pool())
            .await
            .map_err(|e| self.classify(e))?;
        Ok(())
    }

    async fn session_holder_tunnel(
        &self,
        cluster_id: &str,
        except: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<(String, String)>> {
        let row = sqlx::query(
            "SELECT s.replica_id, r.tunnel_url FROM cluster_sessions s \
             JOIN hub_replicas r ON r.replica_id = s.replica_id \
             WHERE s.cluster_id = $1 AND s.replica_id <> $2 AND s.lease_expires_at > $3 \
               AND r.tunnel_url IS NOT NULL",
        )
        .bind(cluster_id.to_owned())
        .bind(except.to_owned())
        .bind(ms(now))
        .fetch_optional(self.reader())
        .await
        .map_err(|e| self.classify(e))?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .transpose()
            .map_err(|e: sqlx::Error| self.classify(e))
    }
}

impl SqlStore {
    /// Writes one watch event for each cluster in `rows` (their ids,
    /// whose state `tx` changed), commits and wakes the watchers. Returns
    /// the ids.
    async fn commit_state_changes(
        &self,
        mut tx: super::sql::Tx,
        rows: &[sqlx::any::AnyRow],
    ) -> Result<Vec<String>> {
        let ids = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<Vec<String>, sqlx::Error>>()
            .map_err(|e| self.classify(e))?;
        for id in &ids {
            self.insert_cluster_event(&mut tx, id, Utc::now()).await?;
        }
        self.commit(tx).await?;
        if !ids.is_empty() {
            self.events_committed();
        }
        Ok(ids)
    }
}
