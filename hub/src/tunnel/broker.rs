//! Pairs a Gateway's connection with the spoke's `Tunnel` stream for it.
//!
//! The hub cannot dial a spoke, so it asks: a `TunnelOpen` goes down the
//! cluster's live `Connect` stream, the spoke connects the Harness and opens
//! a `Tunnel` stream (its own HTTP/2 stream on the connection it already
//! dialed) whose first frame names the tunnel id. Ids are random, single
//! use, and accepted only from the cluster they were sent to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clawfed_proto::link::v1::{self as pb, hub_message, tunnel_frame};
use clawfed_proto::tunnel::reason;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Status, Streaming};

use super::metrics::TunnelMetrics;
use super::route::Route;
use super::{Refusal, TunnelConfig};
use crate::link::registry::Registry;

/// Frames buffered per direction in the hub beyond the HTTP/2 windows.
const FRAME_BUFFER: usize = 2;

/// The spoke's side of an opened tunnel.
pub struct SpokeSide {
    pub accept: pb::TunnelAccept,
    pub inbound: Streaming<pb::TunnelFrame>,
    pub outbound: mpsc::Sender<Result<pb::TunnelFrame, Status>>,
}

/// An open tunnel, ready to pump.
pub struct Opened {
    pub inbound: Streaming<pb::TunnelFrame>,
    pub outbound: mpsc::Sender<Result<pb::TunnelFrame, Status>>,
    /// Cancelled when the cluster is revoked: the tunnel ends. Nothing
    /// else about the session that opened it (replaced, moved to another
    /// replica) ends the tunnel, which is a stream of its own.
    pub revoked: CancellationToken,
    /// Holds the connection's place in the limits until dropped.
    pub slot: Slot,
}

struct Pending {
    cluster_id: String,
    tx: oneshot::Sender<SpokeSide>,
}

/// Opens waiting for their spoke stream, and per cluster how many wait
/// and how many of its `Tunnel` streams have not named theirs yet.
#[derive(Default)]
struct PendingOpens {
    by_id: HashMap<String, Pending>,
    /// cluster id → (opens waiting, streams unpaired).
    per_cluster: HashMap<String, (usize, usize)>,
}

impl PendingOpens {
    fn len(&self) -> usize {
        self.by_id.len()
    }

    fn insert(&mut self, id: String, pending: Pending) {
        self.per_cluster
            .entry(pending.cluster_id.clone())
            .or_default()
            .0 += 1;
        self.by_id.insert(id, pending);
    }

    fn get(&self, id: &str) -> Option<&Pending> {
        self.by_id.get(id)
    }

    fn remove(&mut self, id: &str) -> Option<Pending> {
        let pending = self.by_id.remove(id)?;
        self.count(&pending.cluster_id, |c| c.0 -= 1);
        Some(pending)
    }

    /// Admits one more unpaired stream of `cluster_id` while it has fewer
    /// than opens waiting: a spoke opens a stream only for an open it was
    /// sent, so a cluster never needs more, and a credential alone cannot
    /// make the hub hold streams for it.
    fn admit_unpaired(&mut self, cluster_id: &str) -> bool {
        match self.per_cluster.get_mut(cluster_id) {
            Some((opens, unpaired)) if *unpaired < *opens => {
                *unpaired += 1;
                true
            }
            _ => false,
        }
    }

    fn paired_or_gone(&mut self, cluster_id: &str) {
        self.count(cluster_id, |c| c.1 -= 1);
    }

    fn count(&mut self, cluster_id: &str, change: impl FnOnce(&mut (usize, usize))) {
        if let Some(c) = self.per_cluster.get_mut(cluster_id) {
            change(c);
            if *c == (0, 0) {
                self.per_cluster.remove(cluster_id);
            }
        }
    }
}

/// An admitted unpaired stream's place, given back however `accept` ends.
struct UnpairedGuard<'a> {
    broker: &'a Broker,
    cluster_id: &'a str,
}

impl Drop for UnpairedGuard<'_> {
    fn drop(&mut self) {
        self.broker.pending().paired_or_gone(self.cluster_id);
    }
}

#[derive(Debug, Default)]
struct Counts {
    per_revision: HashMap<String, usize>,
    per_cluster: HashMap<String, usize>,
}

/// A connection's place in the limits.
pub struct Slot {
    counts: Arc<Mutex<Counts>>,
    revision_id: String,
    cluster_id: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let c = &mut *guard;
        for (map, key) in [
            (&mut c.per_revision, &self.revision_id),
            (&mut c.per_cluster, &self.cluster_id),
        ] {
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

/// Removes a pending id however `open` ends.
struct PendingGuard<'a> {
    broker: &'a Broker,
    id: String,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.broker.pending().remove(&self.id);
    }
}

/// The tunnel broker, shared by the ingress and the link service.
pub struct Broker {
    registry: Arc<Registry>,
    config: TunnelConfig,
    metrics: TunnelMetrics,
    pending: Mutex<PendingOpens>,
    counts: Arc<Mutex<Counts>>,
    shutdown: CancellationToken,
    /// Reaches the replica holding a cluster's session, once the ingress
    /// (which publishes this replica's own) runs.
    forwarding: std::sync::OnceLock<Arc<super::forward::Forwarding>>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("pending", &self.pending().len())
            .finish_non_exhaustive()
    }
}

impl Broker {
    pub fn new(
        registry: Arc<Registry>,
        config: TunnelConfig,
        metrics: TunnelMetrics,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            registry,
            config,
            metrics,
            pending: Mutex::default(),
            counts: Arc::default(),
            shutdown,
            forwarding: std::sync::OnceLock::new(),
        }
    }

    pub fn config(&self) -> &TunnelConfig {
        &self.config
    }

    pub fn metrics(&self) -> &TunnelMetrics {
        &self.metrics
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, PendingOpens> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets how the hub's own requests reach other replicas' sessions.
    pub fn set_forwarding(&self, forwarding: Arc<super::forward::Forwarding>) {
        let _ = self.forwarding.set(forwarding);
    }

    /// How the hub's own requests reach other replicas' sessions, once set.
    pub fn forwarding(&self) -> Option<&Arc<super::forward::Forwarding>> {
        self.forwarding.get()
    }

    /// When another replica holds `route`'s cluster session: the connection
    /// to the Harness through it (a CONNECT with `credential` to its
    /// ingress); `None` when this replica holds it or none does.
    pub async fn through_holder(
        &self,
        route: &Route,
        credential: &str,
    ) -> Option<Result<hyper::upgrade::Upgraded, Refusal>> {
        let (forwarding, replica, url) = self.other_holder(&route.cluster_id).await?;
        let upstream = forwarding.open(&url, &route.authority, credential).await;
        if upstream.is_ok() {
            tracing::debug!(cluster = %route.cluster_name, %replica, "tunnel.forwarded");
            self.metrics.forwarded.inc();
        }
        Some(upstream)
    }

    /// The replica holding `cluster_id`'s session when it is another one:
    /// how to reach it, its id and its ingress URL. `None` when this
    /// replica holds it, none does, or nothing forwards.
    pub async fn other_holder(
        &self,
        cluster_id: &str,
    ) -> Option<(&Arc<super::forward::Forwarding>, String, String)> {
        if self.holds_session(cluster_id) {
            return None;
        }
        let forwarding = self.forwarding()?;
        let (replica, url) = forwarding.holder(cluster_id).await?;
        Some((forwarding, replica, url))
    }

    /// Whether this replica holds `cluster_id`'s link session.
    pub fn holds_session(&self, cluster_id: &str) -> bool {
        self.registry.is_connected(cluster_id)
    }

    /// Tunnels open now for `revision_id`.
    pub fn open_for_revision(&self, revision_id: &str) -> usize {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.per_revision.get(revision_id).copied().unwrap_or(0)
    }

    fn acquire(&self, route: &Route) -> Result<Slot, Refusal> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let rev = c.per_revision.get(&route.revision_id).copied().unwrap_or(0);
        if rev >= self.config.max_per_revision {
            return Err(Refusal::new(
                reason::LIMIT,
                format!(
                    "{}/{} revision {} has {rev} tunneled connections open (limit {})",
                    route.tenant, route.agent, route.revision, self.config.max_per_revision
                ),
            ));
        }
        let cl = c.per_cluster.get(&route.cluster_id).copied().unwrap_or(0);
        if cl >= self.config.max_per_cluster {
            return Err(Refusal::new(
                reason::LIMIT,
                format!(
                    "cluster {} has {cl} tunneled connections open (limit {})",
                    route.cluster_name, self.config.max_per_cluster
                ),
            ));
        }
        *c.per_revision.entry(route.revision_id.clone()).or_default() += 1;
        *c.per_cluster.entry(route.cluster_id.clone()).or_default() += 1;
        Ok(Slot {
            counts: self.counts.clone(),
            revision_id: route.revision_id.clone(),
            cluster_id: route.cluster_id.clone(),
        })
    }

    /// Asks the route's spoke to connect its Harness; returns the open
    /// tunnel or why not.
    pub async fn open(&self, route: &Route) -> Result<Opened, Refusal> {
        let started = Instant::now();
        let slot = self.acquire(route)?;
        let offline = || {
            Refusal::new(
                reason::CLUSTER_OFFLINE,
                format!("cluster {} has no live link session", route.cluster_name),
            )
        };
        let session = self.registry.get(&route.cluster_id).ok_or_else(offline)?;
        let revoked = self.registry.tunnel_revocation(&route.cluster_id);
        let outbound = session.outbound.clone().ok_or_else(offline)?;
        drop(session);

        let id = hex::encode(rand::random::<[u8; 16]>());
        let (tx, rx) = oneshot::channel();
        self.pending().insert(
            id.clone(),
            Pending {
                cluster_id: route.cluster_id.clone(),
                tx,
            },
        );
        let _guard = PendingGuard {
            broker: self,
            id: id.clone(),
        };
        let open = pb::HubMessage {
            body: Some(hub_message::Body::TunnelOpen(pb::TunnelOpen {
                tunnel_id: id,
                target: route.target.clone(),
                revision_id: route.revision_id.clone(),
                port: route.port,
                dial_timeout_ms: u32::try_from(self.config.open_timeout.as_millis() / 2)
                    .unwrap_or(u32::MAX),
            })),
        };
        // Never wait on a session whose stream is full (a hung spoke): the
        // Gateway is told at once instead.
        match outbound.try_send(Ok(open)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                return Err(Refusal::new(
                    reason::SPOKE_TIMEOUT,
                    format!("the link to cluster {} is congested", route.cluster_name),
                ));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(offline()),
        }
        drop(outbound);
        let side = tokio::select! {
            r = tokio::time::timeout(self.config.open_timeout, rx) => match r {
                Ok(Ok(side)) => side,
                // The session ended with the request in it.
                Ok(Err(_)) => return Err(offline()),
                Err(_) => {
                    return Err(Refusal::new(
                        reason::SPOKE_TIMEOUT,
                        format!(
                            "the spoke of cluster {} did not open the tunnel within {:?}",
                            route.cluster_name, self.config.open_timeout
                        ),
                    ));
                }
            },
            _ = self.shutdown.cancelled() => {
                return Err(Refusal::new(reason::SHUTTING_DOWN, "the hub is shutting down"));
            }
        };
        if !side.accept.reason.is_empty() {
            let known = reason::ALL
                .into_iter()
                .find(|r| *r == side.accept.reason)
                .unwrap_or(reason::SPOKE_ERROR);
            return Err(Refusal::new(
                known,
                format!(
                    "cluster {}: {}",
                    route.cluster_name,
                    if side.accept.message.is_empty() {
                        side.accept.reason.as_str()
                    } else {
                        side.accept.message.as_str()
                    }
                ),
            ));
        }
        self.metrics.setup.observe(started.elapsed().as_secs_f64());
        Ok(Opened {
            inbound: side.inbound,
            outbound: side.outbound,
            revoked,
            slot,
        })
    }

    /// The `SpokeLink.Tunnel` call of cluster `cluster_id`: pairs the stream
    /// with the pending open its first frame names.
    pub async fn accept(
        &self,
        cluster_id: &str,
        mut inbound: Streaming<pb::TunnelFrame>,
    ) -> Result<ReceiverStream<Result<pb::TunnelFrame, Status>>, Status> {
        if !self.pending().admit_unpaired(cluster_id) {
            self.metrics.unpaired_refused.inc();
            return Err(Status::resource_exhausted(
                "no tunnel open of this cluster is waiting for a stream",
            ));
        }
        let _unpaired = UnpairedGuard {
            broker: self,
            cluster_id,
        };
        let first = tokio::time::timeout(self.config.open_timeout, inbound.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no TunnelAccept frame in time"))??;
        let Some(pb::TunnelFrame {
            body: Some(tunnel_frame::Body::Accept(accept)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "the first Tunnel frame must be TunnelAccept",
            ));
        };
        let pending = {
            let mut map = self.pending();
            match map.get(&accept.tunnel_id) {
                Some(p) if p.cluster_id == cluster_id => map.remove(&accept.tunnel_id),
                Some(_) => {
                    tracing::warn!(cluster_id, "tunnel.foreign_id");
                    return Err(Status::permission_denied(
                        "the tunnel id was not issued to this cluster",
                    ));
                }
                None => None,
            }
        };
        let Some(pending) = pending else {
            return Err(Status::not_found("unknown or expired tunnel id"));
        };
        let (tx, rx) = mpsc::channel(FRAME_BUFFER);
        pending
            .tx
            .send(SpokeSide {
                accept,
                inbound,
                outbound: tx,
            })
            .map_err(|_| Status::cancelled("the Gateway's connection went away"))?;
        Ok(ReceiverStream::new(rx))
    }
}
