//! One `SpokeLink.Connect` stream.
//!
//! The first message must be Hello; the cluster is the one the verified
//! certificate names. The hub answers Welcome, acks what the spoke already
//! applied, then sends every unacked outbox item in sequence order, keeping
//! at most `send_window` unacked on the wire. Acks, reports and heartbeats
//! flow back on the same stream. Silence for two heartbeat intervals, a
//! revocation, a newer session of the same cluster, certificate expiry or
//! hub shutdown end the stream.
//!
//! The `SpokeLink` service is in `api`; outbox delivery (the send window)
//! in `delivery`; the spoke's messages (acks, reports, heartbeats) in
//! `inbound`; the applied-digest comparison in `digest_check`.

mod api;
mod delivery;
mod digest_check;
mod inbound;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::{hub_message, spoke_message};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

pub use self::api::SpokeLinkApi;
use self::digest_check::DigestCheck;
use super::LinkState;
use super::metrics::ClusterLabel;
use super::registry::{CloseReason, Outbound, SessionHandle};
use super::tls::PeerIdentity;
use crate::model::{Cluster, ConnectionState};

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
    /// The fenced targets the spoke last reported on this session (as
    /// written to the store).
    fenced: Option<Vec<String>>,
}

/// Bound of [`Session::sent_targets`].
const SENT_TARGETS_MAX: usize = 4096;

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
    // Labels placement matches must be Kubernetes labels: refused before
    // anything is recorded.
    let labels: std::collections::BTreeMap<String, String> = hello
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Err(why) = clawfed_proto::capacity::check_labels(&labels) {
        tracing::warn!(cluster = %cluster.name, error = %why, "link.hello_labels_refused");
        let _ = tx
            .send(Err(Status::invalid_argument(format!(
                "Hello.labels: {why}"
            ))))
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
        fenced: None,
        digest: DigestCheck {
            enabled: hello
                .capabilities
                .iter()
                .any(|c| c == clawfed_proto::digest::CAPABILITY),
            ..Default::default()
        },
    };
    let end = match session.open(&hello, &labels).await {
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

    /// Marks the cluster online, acks what the spoke already applied and
    /// sends Welcome.
    async fn open(
        &mut self,
        hello: &pb::Hello,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), Status> {
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
                Some(crate::store::SpokeHello {
                    version: &hello.spoke_version,
                    capabilities: &hello.capabilities,
                    labels,
                }),
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
            node_selector: config
                .node_selector
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
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
                    let beat_msg = pb::Heartbeat { unix_millis: now_ms() as u64, ..Default::default() };
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
