//! One `SpokeLink.Connect` stream.
//!
//! The first message must be Hello; the cluster is the one the verified
//! certificate names. The hub answers Welcome, acks what the spoke already
//! applied, then sends every unacked outbox item in sequence order, keeping
//! at most `send_window` unacked on the wire. Acks, reports and heartbeats
//! flow back on the same stream. Silence for two heartbeat intervals, a
//! revocation, a newer session of the same cluster, certificate expiry or
//! hub shutdown end the stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::spoke_link_server::SpokeLink;
use clawfed_proto::link::v1::{hub_message, report, spoke_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::LinkState;
use super::enroll::{authenticate, renew};
use super::metrics::ClusterLabel;
use super::registry::{CloseReason, Outbound, SessionHandle};
use super::tls::PeerIdentity;
use crate::model::{Cluster, ConnectionState};
use clawfed_proto::digest::AppliedDigest;

/// How long a new stream may take to send its Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The retry-after range (seconds) of a GoAway to a live session: spokes
/// spread their reconnects over it.
pub(crate) const GO_AWAY_RETRY: (u32, u32) = (1, 5);
/// The retry-after range (seconds) of a GoAway that moves a session to
/// another replica (balancing): that replica is up, and few sessions move
/// at a time.
pub(crate) const REDIRECT_RETRY: (u32, u32) = (0, 2);
/// What a session is told when its replica moves it to another.
const MOVED: &str = "moved to another hub replica (balancing), reconnect there";
/// What a session is told when its replica shuts down: another replica
/// (or this one, restarted) takes it after the jittered retry-after.
const SHUTTING_DOWN: &str = "hub shutting down, reconnect";
/// How often an online cluster's last_seen is written to the store.
const LAST_SEEN_WRITE_INTERVAL: Duration = Duration::from_secs(30);

/// A sent item still unacked after this long stops holding a send slot
/// (checked at each heartbeat): a spoke that dropped it without an ack (an
/// older spoke superseding queued work) or an ack lost with a broken stream
/// would otherwise shrink the window for the rest of the session. The item
/// stays unacked in the outbox and goes again with the next session.
const IN_FLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The in-flight entries sent before `now - max_age`.
fn aged_out(
    in_flight: &HashMap<i64, (Instant, String, i64)>,
    now: Instant,
    max_age: Duration,
) -> Vec<i64> {
    in_flight
        .iter()
        .filter(|(_, (sent, _, _))| now.saturating_duration_since(*sent) >= max_age)
        .map(|(sequence, _)| *sequence)
        .collect()
}

/// The `SpokeLink` service.
#[derive(Debug, Clone)]
pub struct SpokeLinkApi {
    state: Arc<LinkState>,
}

impl SpokeLinkApi {
    /// The service over the link state.
    pub fn new(state: Arc<LinkState>) -> Self {
        Self { state }
    }
}

/// Messages that are not outbox work (tunnel opens, diagnose requests)
/// waiting for the spoke's stream.
const CONTROL_QUEUE: usize = 256;

/// The stream to a spoke.
pub type HubStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::HubMessage, Status>> + Send>>;

/// The session's two queues as one stream: control messages first, work
/// after. It ends when the work queue ends (the session is over), however
/// long a control sender (a registry handle) is still held.
fn merged(
    control: mpsc::Receiver<Result<pb::HubMessage, Status>>,
    work: mpsc::Receiver<Result<pb::HubMessage, Status>>,
) -> HubStream {
    Box::pin(futures::stream::unfold(
        (Some(control), work),
        |(mut control, mut work)| async move {
            loop {
                let Some(c) = control.as_mut() else {
                    return work.recv().await.map(|m| (m, (control, work)));
                };
                tokio::select! {
                    biased;
                    m = c.recv() => match m {
                        Some(m) => return Some((m, (control, work))),
                        None => control = None,
                    },
                    m = work.recv() => return m.map(|m| (m, (control, work))),
                }
            }
        },
    ))
}

fn hub(body: hub_message::Body) -> pb::HubMessage {
    pb::HubMessage { body: Some(body) }
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// A retry-after in [lo, hi] seconds, jittered so shed spokes spread out.
fn jittered_retry_after(lo: u32, hi: u32) -> u32 {
    lo + (rand::random::<u32>() % (hi - lo + 1))
}

#[tonic::async_trait]
impl SpokeLink for SpokeLinkApi {
    type ConnectStream = HubStream;

    async fn connect(
        &self,
        request: Request<Streaming<pb::SpokeMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let identity = authenticate(&self.state, &request).await?;
        let cluster = self
            .state
            .store
            .get_cluster_by_id(&identity.cluster_id)
            .await
            .map_err(|_| Status::unauthenticated("unknown cluster"))?;
        if cluster.connection_state == ConnectionState::Revoked {
            return Err(CloseReason::Revoked.status("cluster revoked"));
        }
        let (tx, rx) = mpsc::channel(64);
        // Tunnel opens and diagnose requests have a channel of their own,
        // sent ahead of queued work: a spoke receiving its backlog must
        // still get a CONNECT's open at once.
        let (control, control_rx) = mpsc::channel(CONTROL_QUEUE);
        let at_capacity = self.state.registry.len() >= self.state.config.max_sessions
            && !self.state.registry.is_connected(&cluster.id);
        if at_capacity {
            self.state.metrics.sessions_shed.inc();
            let retry_after_seconds = jittered_retry_after(5, 30);
            let _ = tx
                .send(Ok(hub(hub_message::Body::GoAway(pb::GoAway {
                    reason: "hub at session capacity".into(),
                    retry_after_seconds,
                    redirect_url: String::new(),
                }))))
                .await;
            return Ok(Response::new(merged(control_rx, rx)));
        }
        let state = self.state.clone();
        let inbound = request.into_inner();
        tokio::spawn(async move {
            run(state, identity, cluster, inbound, tx, control).await;
        });
        Ok(Response::new(merged(control_rx, rx)))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        renew(&self.state, request).await
    }

    type TunnelStream = ReceiverStream<Result<pb::TunnelFrame, Status>>;

    /// One tunneled connection. The id pairing binds it to a cluster with a
    /// live (authenticated) session, so only the certificate itself is
    /// checked here, in memory: no store round trip on the setup path.
    async fn tunnel(
        &self,
        request: Request<Streaming<pb::TunnelFrame>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        let certs = request.peer_certs();
        let identity = super::tls::peer_identity(certs.as_ref().map(|c| c.as_slice()))
            .map_err(|e| Status::unauthenticated(e.to_string()))?;
        if identity.not_after <= Utc::now() {
            return Err(CloseReason::CertificateExpired.status("client certificate expired"));
        }
        if self.state.deny.contains(&identity.serial) {
            return Err(CloseReason::Revoked.status("cluster certificate revoked"));
        }
        let stream = self
            .state
            .tunnels
            .accept(&identity.cluster_id, request.into_inner())
            .await?;
        Ok(Response::new(stream))
    }
}

/// Why the loop ended.
enum End {
    /// The spoke closed the stream or the connection dropped.
    Gone,
    /// Two heartbeat intervals of silence.
    Silent,
    /// Ended with this status sent to the spoke.
    Status(Status),
    /// Ended after a GoAway.
    GoAway,
}

struct Session {
    state: Arc<LinkState>,
    handle: SessionHandle,
    cluster: Cluster,
    tx: Outbound,
    /// Sent and not yet acked: sequence → (sent at, target, generation).
    in_flight: HashMap<i64, (Instant, String, i64)>,
    last_sent: i64,
    /// The outbox may hold items after `last_sent` this session has not
    /// read: set by a wake-up (a put), the heartbeat and a full send
    /// window; cleared when a read returned less than the window. An ack
    /// reads the outbox only while it is set (one read per item saved,
    /// issue 17).
    maybe_pending: bool,
    /// Targets sent on this session: a report on one of them needs no
    /// store lookup to prove the target is this cluster's. A cache, cleared
    /// when it outgrows [`SENT_TARGETS_MAX`].
    sent_targets: std::collections::HashSet<String>,
    last_seen_written: Instant,
    /// The applied-digest comparison of this session.
    digest: DigestCheck,
}

/// Bound of [`Session::sent_targets`].
const SENT_TARGETS_MAX: usize = 4096;

/// The hub's side of `Heartbeat.applied_digest` for one session.
#[derive(Debug, Default)]
struct DigestCheck {
    /// The spoke advertised [`clawfed_proto::digest::CAPABILITY`].
    enabled: bool,
    /// The spoke's last digest that matched the hub's records: while it
    /// stays the same and nothing was acked since, nothing is read from
    /// the store.
    matched: Option<AppliedDigest>,
    /// A mismatch seen once (spoke's, hub's): acted on only when the next
    /// heartbeat shows the same pair (acks and records cross on the wire).
    pending: Option<(AppliedDigest, AppliedDigest)>,
    /// `(target, generation)` resent on this session: each at most once,
    /// so work the spoke refused (acked, never recorded) is not resent in
    /// a loop.
    resent: std::collections::HashSet<(String, i64)>,
}

async fn run(
    state: Arc<LinkState>,
    identity: PeerIdentity,
    cluster: Cluster,
    mut inbound: Streaming<pb::SpokeMessage>,
    tx: Outbound,
    control: Outbound,
) {
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, inbound.message()).await {
        Ok(Ok(Some(pb::SpokeMessage {
            body: Some(spoke_message::Body::Hello(hello)),
        }))) => hello,
        Ok(Err(status)) => {
            // A malformed or oversized first message: say so to the spoke
            // instead of ending the stream as if all were well.
            tracing::warn!(cluster = %cluster.name, error = %status, "link.hello_failed");
            let _ = tx.send(Err(status)).await;
            return;
        }
        _ => {
            let _ = tx
                .send(Err(Status::invalid_argument(
                    "the first message must be Hello",
                )))
                .await;
            return;
        }
    };
    if !hello.claimed_cluster_id.is_empty() && hello.claimed_cluster_id != identity.cluster_id {
        tracing::warn!(cluster = %cluster.name, claimed = %hello.claimed_cluster_id, "link.hello_identity_mismatch");
        let _ = tx
            .send(Err(Status::permission_denied(
                "Hello claims a cluster other than the one the client certificate names",
            )))
            .await;
        return;
    }
    let handle = state
        .registry
        .register(&cluster.id, &cluster.name, now_ms(), Some(control));
    state.metrics.connected_spokes.inc();
    state
        .metrics
        .certificate_expiry
        .get_or_create(&ClusterLabel {
            cluster: cluster.name.clone(),
        })
        .set((identity.not_after - Utc::now()).num_seconds() as f64);
    state
        .metrics
        .certificate_not_after
        .get_or_create(&ClusterLabel {
            cluster: cluster.name.clone(),
        })
        .set(identity.not_after.timestamp() as f64);
    let mut session = Session {
        state: state.clone(),
        handle: handle.clone(),
        cluster,
        tx,
        in_flight: HashMap::new(),
        last_sent: 0,
        maybe_pending: true,
        sent_targets: Default::default(),
        last_seen_written: Instant::now(),
        digest: DigestCheck {
            enabled: hello
                .capabilities
                .iter()
                .any(|c| c == clawfed_proto::digest::CAPABILITY),
            ..Default::default()
        },
    };
    let end = match session.open(&hello).await {
        Ok(()) => session.serve(&mut inbound, &identity).await,
        Err(status) => End::Status(status),
    };
    session.close(end).await;
    state.metrics.connected_spokes.dec();
}

impl Session {
    async fn send(&self, body: hub_message::Body) -> bool {
        self.tx.send(Ok(hub(body))).await.is_ok()
    }

    fn store_err(e: crate::store::StoreError) -> Status {
        tracing::error!(error = %e, "link.store_error");
        Status::unavailable("hub store unavailable")
    }

    /// Compares the spoke's applied digest with the acked work of this
    /// cluster; a mismatch seen on two heartbeats in a row resends the
    /// targets of the differing buckets (the same generation again: the
    /// spoke re-applies it, level-based).
    async fn compare_digest(&mut self, wire: &str) -> Result<(), Status> {
        use clawfed_proto::digest;
        if !self.digest.enabled {
            return Ok(());
        }
        // An empty or older-form digest: the spoke has not read its records yet.
        let Some(theirs) = AppliedDigest::parse(wire) else {
            return Ok(());
        };
        if self.digest.matched == Some(theirs) {
            return Ok(());
        }
        let acked = self
            .state
            .store
            .outbox_acked_latest(&self.cluster.id)
            .await
            .map_err(Self::store_err)?;
        let entries = || acked.iter().map(|(t, k, g)| (t.as_str(), k.as_str(), *g));
        let ours = AppliedDigest::compute(entries());
        let differing = ours.differing(&theirs);
        tracing::debug!(cluster = %self.cluster.name, differing = differing.len(), acked = acked.len(), "link.digest_compared");
        if differing.is_empty() {
            self.digest.matched = Some(theirs);
            self.digest.pending = None;
            return Ok(());
        }
        self.digest.matched = None;
        if self.digest.pending != Some((theirs, ours)) {
            self.digest.pending = Some((theirs, ours));
            return Ok(());
        }
        self.digest.pending = None;
        let targets: Vec<String> = digest::counted(entries())
            .into_iter()
            .filter(|(t, _)| differing.contains(&digest::bucket(t)))
            .filter(|(t, g)| self.digest.resent.insert((t.to_string(), *g)))
            .map(|(t, _)| t.to_string())
            .collect();
        let resent = self
            .state
            .store
            .outbox_resend(&self.cluster.id, &targets)
            .await
            .map_err(Self::store_err)?;
        tracing::info!(cluster = %self.cluster.name, buckets = differing.len(),
            targets = targets.len(), resent = resent.len(), "link.digest_mismatch");
        if resent.is_empty() {
            return Ok(());
        }
        self.dispatch().await
    }

    /// Marks the cluster online, acks what the spoke already applied and
    /// sends Welcome.
    async fn open(&mut self, hello: &pb::Hello) -> Result<(), Status> {
        let store = &self.state.store;
        let id = self.cluster.id.clone();
        // Before the cluster shows online: this session supersedes any
        // older one, on any replica (that one notices on its next lease
        // renewal), and from now on only this epoch may mark it offline.
        let config = &self.state.config;
        let epoch = store
            .session_claim(&id, &config.replica_id, store.now() + config.lease_ttl())
            .await
            .map_err(Self::store_err)?;
        self.handle.epoch.store(epoch, Ordering::Release);
        store
            .set_connection_state(
                &id,
                ConnectionState::Online,
                Utc::now(),
                Some((&hello.spoke_version, &hello.capabilities)),
            )
            .await
            .map_err(Self::store_err)?;
        let applied: Vec<(String, i64)> =
            hello.applied.iter().map(|(t, g)| (t.clone(), *g)).collect();
        let already = store
            .outbox_ack_applied(&id, &applied, Utc::now())
            .await
            .map_err(Self::store_err)?;
        let pending = store
            .outbox_pending(&id, 0, self.state.config.send_window as i64)
            .await
            .map_err(Self::store_err)?;
        tracing::info!(
            cluster = %self.cluster.name,
            session = self.handle.id,
            epoch,
            replica = %config.replica_id,
            version = %hello.spoke_version,
            applied = applied.len(),
            ackedFromHello = already,
            resend = pending.len(),
            "link.connected"
        );
        let welcome = pb::Welcome {
            cluster_id: id,
            cluster_name: self.cluster.name.clone(),
            heartbeat_interval_seconds: self.state.config.heartbeat.as_secs().max(1) as u32,
            resend: pending.iter().map(|p| p.target.clone()).collect(),
        };
        if !self.send(hub_message::Body::Welcome(welcome)).await {
            return Err(Status::cancelled("spoke went away"));
        }
        Ok(())
    }

    async fn serve(
        &mut self,
        inbound: &mut Streaming<pb::SpokeMessage>,
        identity: &PeerIdentity,
    ) -> End {
        let heartbeat = self.state.config.heartbeat;
        let mut beat = tokio::time::interval(heartbeat);
        beat.tick().await;
        let expires_in = (identity.not_after - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        let expiry = tokio::time::sleep(expires_in);
        tokio::pin!(expiry);
        // Offline two heartbeat intervals after the last message, whenever
        // that falls: a deadline re-armed on every message, not a check on
        // the next beat (which let a hung or partitioned spoke linger for
        // up to three intervals).
        let silence = tokio::time::sleep(2 * heartbeat);
        tokio::pin!(silence);
        if let Err(status) = self.dispatch().await {
            return End::Status(status);
        }
        loop {
            tokio::select! {
                _ = self.handle.close.cancelled() => {
                    return match self.handle.close_reason() {
                        Some(CloseReason::Revoked) => End::Status(CloseReason::Revoked.status("cluster revoked")),
                        Some(CloseReason::Replaced) => End::Status(CloseReason::Replaced.status("replaced by a newer session of this cluster")),
                        _ => self.go_away(SHUTTING_DOWN).await,
                    };
                }
                _ = self.state.shutdown.cancelled() => return self.go_away(SHUTTING_DOWN).await,
                message = inbound.message() => match message {
                    Ok(Some(m)) => {
                        self.handle.last_heard_ms.store(now_ms(), Ordering::Relaxed);
                        silence.as_mut().reset(tokio::time::Instant::now() + 2 * heartbeat);
                        if let Err(status) = self.on_message(m).await {
                            return End::Status(status);
                        }
                    }
                    Ok(None) => return End::Gone,
                    Err(status) => {
                        // A frame that does not decode or exceeds the size
                        // limit (or a dropped connection): the status goes
                        // back to the spoke, so it is not a clean end.
                        tracing::debug!(cluster = %self.cluster.name, error = %status, "link.stream_error");
                        return End::Status(status);
                    }
                },
                _ = self.handle.wake.notified() => {
                    // Only a wake for an item past the last one sent reads
                    // the outbox: on PostgreSQL a put in this replica wakes
                    // its session in process and again by its NOTIFY.
                    let head = self.handle.known_head.swap(0, Ordering::AcqRel);
                    if head > self.last_sent {
                        self.maybe_pending = true;
                        if let Err(status) = self.dispatch().await {
                            return End::Status(status);
                        }
                    }
                }
                _ = &mut silence => return End::Silent,
                _ = beat.tick() => {
                    let beat_msg = pb::Heartbeat { unix_millis: now_ms() as u64, applied_digest: String::new() };
                    if !self.send(hub_message::Body::Heartbeat(beat_msg)).await {
                        return End::Gone;
                    }
                    // Safety net for a missed wake-up, and re-send of items
                    // sent on this stream but unacked for long.
                    self.maybe_pending = true;
                    if let Err(status) = self.dispatch().await {
                        return End::Status(status);
                    }
                }
                _ = &mut expiry => {
                    return End::Status(CloseReason::CertificateExpired.status("client certificate expired; reconnect with the renewed certificate"));
                }
            }
        }
    }

    /// Tells the spoke to go (this replica shuts down, or moved the
    /// session to another), naming where to reconnect when known.
    async fn go_away(&self, reason: &str) -> End {
        let moved = self.handle.redirect_url();
        let (reason, retry, redirect) = match moved {
            Some(url) => (MOVED, REDIRECT_RETRY, Some(url)),
            None => (reason, GO_AWAY_RETRY, self.state.handoff_redirect().await),
        };
        if redirect.is_some() {
            let why = if reason == MOVED {
                "balance"
            } else {
                "handoff"
            };
            self.state
                .metrics
                .redirects
                .get_or_create(&super::metrics::RedirectLabel {
                    reason: why.to_owned(),
                })
                .inc();
        }
        tracing::info!(cluster = %self.cluster.name, redirect = redirect.as_deref().unwrap_or(""), "link.go_away");
        let _ = self
            .send(hub_message::Body::GoAway(pb::GoAway {
                reason: reason.to_owned(),
                retry_after_seconds: jittered_retry_after(retry.0, retry.1),
                redirect_url: redirect.unwrap_or_default(),
            }))
            .await;
        End::GoAway
    }

    /// Sends unacked items after the last one sent, up to the window.
    async fn dispatch(&mut self) -> Result<(), Status> {
        let room = self
            .state
            .config
            .send_window
            .saturating_sub(self.in_flight.len());
        if room == 0 {
            // Whatever is queued waits for an ack to make room.
            self.maybe_pending = true;
            return Ok(());
        }
        self.state.metrics.outbox_reads.inc();
        let items = self
            .state
            .store
            .outbox_pending(&self.cluster.id, self.last_sent, room as i64)
            .await
            .map_err(Self::store_err)?;
        self.maybe_pending = items.len() >= room;
        for item in items {
            let Some(spec) = self.unsealed_spec(&item) else {
                // Cannot be sent as stored (see `unsealed_spec`): skipped,
                // unacked; the revision fails at its phase deadline.
                self.last_sent = item.sequence;
                continue;
            };
            let work = pb::Work {
                sequence: item.sequence as u64,
                target: item.target.clone(),
                generation: item.generation,
                spec,
                kind: item.kind,
            };
            if !self.send(hub_message::Body::Work(work)).await {
                return Err(Status::cancelled("spoke went away"));
            }
            self.last_sent = item.sequence;
            if self.sent_targets.len() >= SENT_TARGETS_MAX {
                self.sent_targets.clear();
            }
            self.sent_targets.insert(item.target.clone());
            self.in_flight.insert(
                item.sequence,
                (Instant::now(), item.target, item.generation),
            );
        }
        Ok(())
    }

    /// The spec of `item` as it goes over the link: the credential values
    /// of Harness work opened (they are sealed in the outbox). `None` when
    /// they do not open (the secrets key changed since it was queued);
    /// logged without any value.
    fn unsealed_spec(&self, item: &crate::store::OutboxItem) -> Option<Vec<u8>> {
        if item.kind != clawfed_proto::work::WorkKind::HarnessApply.as_str() {
            return Some(item.spec.clone().into_bytes());
        }
        let opened = serde_json::from_str::<serde_json::Value>(&item.spec)
            .map_err(|e| e.to_string())
            .and_then(|mut spec| {
                self.state
                    .secrets
                    .open_work_credentials(&self.cluster.id, &item.target, &mut spec)
                    .map_err(|e| e.to_string())?;
                Ok(spec.to_string().into_bytes())
            });
        match opened {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                tracing::error!(cluster = %self.cluster.name, target = %item.target, sequence = item.sequence, %error, "link.work_unsendable");
                None
            }
        }
    }

    async fn on_message(&mut self, message: pb::SpokeMessage) -> Result<(), Status> {
        let id = self.cluster.id.clone();
        match message.body {
            Some(spoke_message::Body::Ack(ack)) => {
                // The acked state changes: compare the next digest again.
                self.digest.matched = None;
                let sequence = i64::try_from(ack.sequence)
                    .map_err(|_| Status::invalid_argument("ack.sequence out of range"))?;
                if let Some((sent, _, _)) = self.in_flight.remove(&sequence) {
                    self.state
                        .metrics
                        .ack_latency
                        .observe(sent.elapsed().as_secs_f64());
                }
                let acked = self
                    .state
                    .store
                    .outbox_ack(&id, sequence, &ack.target, ack.generation, Utc::now())
                    .await
                    .map_err(Self::store_err)?;
                if !acked {
                    // A duplicate ack, or one for an item a newer generation
                    // superseded, is harmless; an ack for work this cluster
                    // was never sent is a protocol violation.
                    let known = self
                        .state
                        .store
                        .outbox_latest_generation(&id, &ack.target)
                        .await
                        .map_err(Self::store_err)?;
                    if known.is_none() {
                        tracing::warn!(cluster = %self.cluster.name, target = %ack.target, "link.ack_for_foreign_work");
                        return Err(Status::permission_denied(format!(
                            "ack for work {:?} that was never sent to this cluster",
                            ack.target
                        )));
                    }
                }
                if self.maybe_pending {
                    self.dispatch().await
                } else {
                    Ok(())
                }
            }
            Some(spoke_message::Body::Report(report)) => self.on_report(report).await,
            Some(spoke_message::Body::Heartbeat(beat)) => {
                if self.last_seen_written.elapsed() >= LAST_SEEN_WRITE_INTERVAL {
                    self.last_seen_written = Instant::now();
                    self.state
                        .store
                        .set_connection_state(&id, ConnectionState::Online, Utc::now(), None)
                        .await
                        .map_err(Self::store_err)?;
                }
                let aged = aged_out(&self.in_flight, Instant::now(), IN_FLIGHT_MAX_AGE);
                if !aged.is_empty() {
                    tracing::warn!(cluster = %self.cluster.name, items = aged.len(), "link.in_flight_aged_out");
                    for sequence in &aged {
                        self.in_flight.remove(sequence);
                    }
                    self.dispatch().await?;
                }
                self.compare_digest(&beat.applied_digest).await
            }
            Some(spoke_message::Body::DiagnoseResult(result)) => {
                // A late answer (its request timed out) or one for another
                // cluster's request is dropped, never handed over.
                if !self.state.diagnose.deliver(&id, result) {
                    tracing::debug!(cluster = %self.cluster.name, "link.diagnose_result_dropped");
                }
                Ok(())
            }
            Some(spoke_message::Body::Hello(_)) => Err(Status::invalid_argument(
                "Hello may only be the first message of a stream",
            )),
            None => Err(Status::invalid_argument("empty SpokeMessage")),
        }
    }

    async fn on_report(&mut self, report: pb::Report) -> Result<(), Status> {
        let id = self.cluster.id.clone();
        let known = self.sent_targets.contains(&report.target)
            || self
                .state
                .store
                .outbox_knows_target(&id, &report.target)
                .await
                .map_err(Self::store_err)?;
        if !known {
            let foreign = self
                .state
                .store
                .outbox_target_exists(&report.target)
                .await
                .map_err(Self::store_err)?;
            if foreign {
                // Another cluster's work: an attempt to speak for it.
                tracing::warn!(cluster = %self.cluster.name, target = %report.target, "link.report_for_foreign_work");
                return Err(Status::permission_denied(format!(
                    "report on work {:?} that was never sent to this cluster",
                    report.target
                )));
            }
            // Work no hub cluster was ever sent (objects a spoke found in its
            // cluster from before this enrollment): dropped, never stored.
            tracing::debug!(cluster = %self.cluster.name, target = %report.target, "link.report_for_unknown_target_dropped");
            return Ok(());
        }
        tracing::debug!(cluster = %self.cluster.name, target = %report.target, generation = report.generation, "link.report");
        let to_json = |v: serde_json::Result<serde_json::Value>| {
            v.map_err(|e| Status::internal(format!("encoding report: {e}")))
        };
        let resend = matches!(&report.body, Some(report::Body::Drift(d)) if d.resend);
        let (kind, body) = match report.body {
            Some(report::Body::WorkResult(r)) => (
                super::report::WORK_RESULT,
                to_json(serde_json::to_value(super::report::WorkResultReport::from(
                    r,
                )))?,
            ),
            Some(report::Body::Readiness(r)) => (
                super::report::READINESS,
                to_json(serde_json::to_value(super::report::ReadinessReport::from(
                    r,
                )))?,
            ),
            Some(report::Body::Drift(r)) => (
                super::report::DRIFT,
                to_json(serde_json::to_value(super::report::DriftReport::from(r)))?,
            ),
            None => return Err(Status::invalid_argument("report.body: required")),
        };
        self.state
            .store
            .put_report(
                &id,
                &report.target,
                kind,
                report.generation,
                &body,
                Utc::now(),
            )
            .await
            .map_err(Self::store_err)?;
        if let Some(event) =
            super::report::watch_event(&self.cluster.name, &report.target, kind, &body)
        {
            // Right after the report (it goes through the group commit,
            // which has no room for an event): a watcher may see the
            // verdict a moment after it is stored, never before.
            if let Err(e) = self.state.store.append_event(&event).await {
                tracing::warn!(cluster = %self.cluster.name, error = %e, "link.watch_event_failed");
            }
        }
        if let Some(listener) = &self.state.listener {
            listener.on_report(&id, &report.target, kind).await;
        }
        if resend {
            self.resend_on_request(&report.target).await?;
        }
        Ok(())
    }

    /// The spoke asked for `target`'s latest work again (drift it cannot
    /// restore alone): queued once more at its acked generation, unless a
    /// copy is still unacked. The spoke's per-object budget bounds how often
    /// it asks.
    async fn resend_on_request(&mut self, target: &str) -> Result<(), Status> {
        let resent = self
            .state
            .store
            .outbox_resend(&self.cluster.id, &[target.to_string()])
            .await
            .map_err(Self::store_err)?;
        tracing::info!(cluster = %self.cluster.name, target = %target, resent = resent.len(), "link.resend_requested");
        if resent.is_empty() {
            return Ok(());
        }
        self.dispatch().await
    }

    async fn close(self, end: End) {
        let reason = self.handle.close_reason();
        let current = self.state.registry.unregister(&self.handle);
        let why = match &end {
            End::Gone => "spoke closed the stream".to_owned(),
            End::Silent => "no heartbeat for two intervals".to_owned(),
            End::Status(s) => s.message().to_owned(),
            End::GoAway => "go-away".to_owned(),
        };
        if let End::Status(status) = end {
            let _ = self.tx.send(Err(status)).await;
        }
        // Only a live session's certificate is worth an expiry alert.
        if current {
            self.state
                .metrics
                .certificate_not_after
                .remove(&ClusterLabel {
                    cluster: self.cluster.name.clone(),
                });
        }
        // Only the newest session (compare-and-set on its epoch, whichever
        // replica holds it) marks the cluster offline: a replaced session
        // leaves the state to its successor; a revoked cluster keeps its
        // revoked state. On shutdown the lease is handed off instead: the
        // spoke reconnects (to another replica) before it lapses, or the
        // other replicas' sweep marks the cluster offline when it does.
        let epoch = self.handle.epoch.load(Ordering::Acquire);
        let handoff =
            reason == Some(CloseReason::ShuttingDown) || self.state.shutdown.is_cancelled();
        // Moved to another replica while this one runs on: no replica
        // renews the lease any more; it covers the move (the retry-after
        // and a lease), then lapses if the spoke never arrives.
        let moved = self.handle.redirect_url().is_some() && !self.state.shutdown.is_cancelled();
        if epoch > 0 && moved {
            let window =
                Duration::from_secs(REDIRECT_RETRY.1.into()) + self.state.config.lease_ttl();
            let until = self.state.store.now()
                + chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
            if let Err(e) = self
                .state
                .store
                .session_hand_off(&self.cluster.id, epoch, until)
                .await
            {
                tracing::warn!(cluster = %self.cluster.name, error = %e, "link.store_error");
            }
        }
        if epoch > 0 && !handoff {
            let last_heard = self.handle.last_heard_ms.load(Ordering::Relaxed);
            let last_seen =
                chrono::DateTime::from_timestamp_millis(last_heard).unwrap_or_else(Utc::now);
            match self
                .state
                .store
                .session_end_offline(&self.cluster.id, epoch, last_seen)
                .await
            {
                Ok(false) => {
                    tracing::debug!(cluster = %self.cluster.name, epoch, "link.session_superseded_left_state")
                }
                Ok(true) => {}
                Err(e) => {
                    tracing::warn!(cluster = %self.cluster.name, error = %e, "link.store_error")
                }
            }
        }
        if current && reason != Some(CloseReason::Revoked) {
            self.state.metrics.last_seen_age.remove(&ClusterLabel {
                cluster: self.cluster.name.clone(),
            });
        }
        tracing::info!(cluster = %self.cluster.name, session = self.handle.id, reason = %why, "link.disconnected");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 31 item 10: a control message (a tunnel open) goes ahead of
    /// the work already queued, and the stream ends with the work queue
    /// even while a control sender is still held.
    #[tokio::test]
    async fn control_messages_overtake_queued_work_and_the_stream_ends_with_the_work() {
        use futures::StreamExt;
        let (control_tx, control_rx) = mpsc::channel(4);
        let (work_tx, work_rx) = mpsc::channel(64);
        let msg = |body| Ok(hub(body));
        for _ in 0..64 {
            work_tx
                .try_send(msg(hub_message::Body::Work(pb::Work::default())))
                .expect("room");
        }
        control_tx
            .try_send(msg(
                hub_message::Body::TunnelOpen(pb::TunnelOpen::default()),
            ))
            .expect("room beside a full work queue");
        let mut stream = merged(control_rx, work_rx);
        let first = stream.next().await.expect("a message").expect("ok");
        assert!(
            matches!(first.body, Some(hub_message::Body::TunnelOpen(_))),
            "the open goes first"
        );
        drop(work_tx);
        assert_eq!(stream.by_ref().count().await, 64, "then the work");
        drop(control_tx);
    }

    #[test]
    fn only_entries_older_than_the_max_age_leave_the_window() {
        // Later than the clock (no underflow on a machine just booted).
        let now = Instant::now() + Duration::from_secs(1000);
        let sent = |ago: u64| (now - Duration::from_secs(ago), "t".to_owned(), 1);
        let in_flight = HashMap::from([(1, sent(601)), (2, sent(599)), (3, sent(0))]);
        assert_eq!(aged_out(&in_flight, now, Duration::from_secs(600)), vec![1]);
    }
}
