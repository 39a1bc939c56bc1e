//! Hub replicas: which replica owns each cluster's live link session.
//!
//! A session is claimed with a new fencing epoch (monotonic per cluster),
//! its lease renewed by the owning replica (one statement for all its
//! sessions), and ended by compare-and-set on the epoch: only the owner of
//! the newest session may mark the cluster offline. When an owner dies,
//! its leases lapse and any replica marks those clusters offline.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::Result;

/// A cluster's session as the store records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSession {
    pub cluster_id: String,
    /// The hub replica that holds (or last held) the session.
    pub replica_id: String,
    /// The fencing epoch: bumped by every new session of the cluster.
    pub epoch: i64,
    /// When the lease lapses unless renewed (the epoch of 1970 once the
    /// session ended).
    pub lease_expires_at: DateTime<Utc>,
}

/// A hub replica as it last published itself (see
/// [`SessionStore::replica_heartbeat`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    pub replica_id: String,
    /// The link address spokes reach it at (`link.advertiseUrl`).
    pub advertise_url: String,
    /// Sessions it held when it published.
    pub sessions: i64,
    pub heartbeat_at: DateTime<Utc>,
    /// Where its tunnel ingress is reached, when it runs one.
    pub tunnel_url: Option<String>,
}

/// Session ownership across hub replicas.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Records a new session of `cluster_id` held by `replica_id` until
    /// `lease_until`, superseding any older one (on any replica). Returns
    /// its epoch, higher than every earlier one of the cluster.
    async fn session_claim(
        &self,
        cluster_id: &str,
        replica_id: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<i64>;

    /// Renews the lease of every session `replica_id` still holds, in one
    /// statement. Returns `(cluster id, epoch)` of those: a live session
    /// missing from it was superseded elsewhere.
    async fn session_renew(
        &self,
        replica_id: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<(String, i64)>>;

    /// After renewals stalled past the lease (a slow database, a paused
    /// process), other replicas' sweeps may have marked this replica's
    /// clusters offline although their sessions live on. Renews exactly
    /// `sessions` (`(cluster id, epoch)` held by `replica_id`, still the
    /// newest) until `lease_until` and marks those clusters online again
    /// (one watch event each), in one transaction. Returns the clusters
    /// marked online.
    async fn session_restore_online(
        &self,
        replica_id: &str,
        sessions: &[(String, i64)],
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<String>>;

    /// Ends the session `epoch` of `cluster_id` and marks the cluster
    /// offline (last seen `last_seen`, one watch event), only if `epoch`
    /// is still the newest: a superseded session changes nothing. Returns
    /// whether it was.
    async fn session_end_offline(
        &self,
        cluster_id: &str,
        epoch: i64,
        last_seen: DateTime<Utc>,
    ) -> Result<bool>;

    /// Marks offline every online cluster whose session lease lapsed
    /// before `now` (its owner died), and with `unrecorded` also those
    /// with no session recorded at all (online from before sessions were
    /// recorded: a replica's start-up). Each cluster is marked (and its
    /// watch event written) once even when replicas sweep at the same
    /// time. Returns their ids.
    async fn offline_where_lease_expired(
        &self,
        now: DateTime<Utc>,
        unrecorded: bool,
    ) -> Result<Vec<String>>;

    /// The cluster's recorded session.
    async fn get_session(&self, cluster_id: &str) -> Result<Option<ClusterSession>>;

    /// Hands the session `epoch` of `cluster_id` off to whichever replica
    /// its spoke reconnects to (a redirect): the lease is set to
    /// `lease_until` and no replica renews it any more, so the cluster
    /// stays online while the spoke moves, and is marked offline by the
    /// lapsed-lease sweep if it never arrives. Only the newest, live
    /// session; returns whether it was.
    async fn session_hand_off(
        &self,
        cluster_id: &str,
        epoch: i64,
        lease_until: DateTime<Utc>,
    ) -> Result<bool>;

    /// Publishes `replica`: its advertised link address and session count,
    /// with its heartbeat time (an upsert by replica id).
    async fn replica_heartbeat(&self, replica: &ReplicaRecord) -> Result<()>;

    /// The replicas whose heartbeat is at or after `since`, by id; the
    /// rows of older ones (dead replicas) are removed.
    async fn replicas_live(&self, since: DateTime<Utc>) -> Result<Vec<ReplicaRecord>>;

    /// Removes `replica_id`'s row (it shuts down).
    async fn replica_remove(&self, replica_id: &str) -> Result<()>;
    /// The replica other than `except` whose session lease on `cluster_id`
    /// is live at `now`, and where its tunnel ingress is reached: (replica
    /// id, tunnel URL). `None` when no other replica holds it or the holder
    /// runs no ingress.
    async fn session_holder_tunnel(
        &self,
        cluster_id: &str,
        except: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<(String, String)>>;
}
