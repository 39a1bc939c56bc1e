//! [`Link::run`]: the connect / reconnect loop, and one session on the
//! hub's stream (Hello, Welcome, work, reports, heartbeats, tunnels,
//! diagnostics) until it ends, and how it ended ([`SessionEnd`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawfed_proto::link::close::CloseReason;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::spoke_link_client::SpokeLinkClient;
use clawfed_proto::link::v1::{hub_message, spoke_message};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::applies::{Applies, supersede, superseded_ack};
use super::identity::Identity;
use super::tls::{self, HubAddress, SwappableCert};
use super::{HubLabel, Link, LinkError};

/// How a session ended.
#[derive(Debug)]
pub(super) enum SessionEnd {
    Shutdown,
    /// A renewed certificate is installed: reconnect now with it.
    Rotated,
    /// The hub said go away: reconnect after the delay, to the address
    /// given, if any.
    GoAway(Duration, Option<String>),
    Revoked(String),
    /// A newer session of this cluster (another process with the same
    /// identity) took over.
    Replaced(String),
    Failed(String),
}

/// The shortest wait after a `replaced` close: longer than any ordinary
/// reconnect, so two spokes of one cluster (a rolling update, a copied
/// identity) do not take the session from each other in a loop.
pub(super) const REPLACED_MIN_WAIT: Duration = Duration::from_secs(10);

/// The wait after a `replaced` close: from `max(backoff_max,
/// REPLACED_MIN_WAIT)` to twice that, at `unit` in [0, 1) between (the
/// jitter). The spoke still comes back: when the newer process is gone,
/// this one is the cluster's spoke again.
pub(super) fn replaced_wait(backoff_max: Duration, unit: f64) -> Duration {
    let base = backoff_max.max(REPLACED_MIN_WAIT);
    base + base.mul_f64(unit.clamp(0.0, 1.0))
}

impl Link {
    /// Runs until `shutdown`, reconnecting as needed. Readiness and other
    /// reports from the executor arrive on `reports` and go to the hub.
    pub async fn run(
        self,
        mut reports: mpsc::Receiver<pb::Report>,
        shutdown: CancellationToken,
    ) -> Result<(), LinkError> {
        let Some(identity) = self.ensure_identity(&shutdown).await? else {
            return Ok(());
        };
        let cert = Arc::new(SwappableCert::default());
        cert.install(&identity)?;
        let mtls = tls::mtls_config(&self.config.ca_pem, cert.clone())?;
        let (identity_tx, identity_rx) = watch::channel(identity);
        let renewer = tokio::spawn(
            self.clone()
                .renew_loop(mtls.clone(), cert.clone(), identity_tx, shutdown.clone())
                .instrument(tracing::info_span!("link.renew")),
        );
        let fencer = tokio::spawn(
            super::fence::run(self.applier.clone(), self.lease.clone(), shutdown.clone())
                .instrument(tracing::info_span!("link.fence")),
        );
        let mut delays = self.reconnect();
        let mut sessions = 0u64;
        let result = loop {
            if shutdown.is_cancelled() {
                break Ok(());
            }
            if sessions > 0 {
                self.metrics.reconnects.inc();
            }
            sessions += 1;
            let mut welcomed = false;
            let hub = self.current_hub();
            self.status.send_modify(|s| {
                s.attempts += 1;
                if s.session_lost.is_some() && s.first_attempt_after_loss.is_none() {
                    s.first_attempt_after_loss = Some(tokio::time::Instant::now());
                }
            });
            let end = self
                .session(
                    &hub,
                    mtls.clone(),
                    identity_rx.clone(),
                    &mut reports,
                    &shutdown,
                    &mut welcomed,
                )
                .await;
            self.metrics.connected.set(0);
            self.metrics.connected_hub.clear();
            // A hub that answered with Welcome is back: a failure after
            // it starts again from the shortest delay, however many came
            // before. Storms are the hub's to absorb (a bounded queue of
            // handshakes, GoAway with a retry-after, honoured below).
            if welcomed {
                delays.welcomed();
            }
            let mut redirected = false;
            let wait = match &end {
                SessionEnd::Shutdown => {
                    self.status.send_modify(|s| {
                        s.connected = false;
                        s.hub = None;
                    });
                    break Ok(());
                }
                SessionEnd::Rotated => {
                    tracing::info!("link.rotated_reconnect");
                    None
                }
                SessionEnd::Revoked(message) => {
                    tracing::error!(reason = %message, "link.revoked");
                    self.status.send_modify(|s| {
                        s.connected = false;
                        s.hub = None;
                        s.failures += 1;
                        s.last_failure = Some(message.clone());
                    });
                    break Err(LinkError::Revoked(message.clone()));
                }
                SessionEnd::GoAway(retry_after, redirect) => {
                    let wait = delays.after_go_away(*retry_after, rand::random::<f64>());
                    redirected = self.follow(&hub, redirect.as_deref());
                    tracing::warn!(
                        hub = %hub.url(),
                        next = %self.current_hub().url(),
                        retryAfterMs = retry_after.as_millis() as u64,
                        retryInMs = wait.as_millis() as u64,
                        "link.go_away"
                    );
                    Some(wait)
                }
                SessionEnd::Replaced(reason) => {
                    // Another process of this cluster holds the session:
                    // coming straight back would take it from that one.
                    let wait = replaced_wait(self.config.backoff_max, rand::random::<f64>());
                    self.hubs_mut().advance();
                    tracing::warn!(hub = %hub.url(), reason = %reason, retryInMs = wait.as_millis() as u64, "link.replaced");
                    Some(wait)
                }
                SessionEnd::Failed(reason) => {
                    // A lost session is not a failed dial: every spoke of a
                    // dead replica is here at once, and spreads its first
                    // attempt over a short window; failed attempts back off.
                    let unit = rand::random::<f64>();
                    let wait = if welcomed {
                        delays.after_lost_session(unit)
                    } else {
                        delays.after_failed_attempt(unit)
                    };
                    self.hubs_mut().advance();
                    tracing::warn!(hub = %hub.url(), next = %self.current_hub().url(), reason = %reason, retryInMs = wait.as_millis() as u64, "link.disconnected");
                    Some(wait)
                }
            };
            self.status.send_modify(|s| {
                s.connected = false;
                s.hub = None;
                s.last_wait = wait;
                if redirected {
                    s.redirects += 1;
                }
                if welcomed && !matches!(end, SessionEnd::Rotated) {
                    s.session_lost = Some(tokio::time::Instant::now());
                    s.first_attempt_after_loss = None;
                }
                match &end {
                    SessionEnd::GoAway(..) => s.go_aways += 1,
                    SessionEnd::Failed(reason) | SessionEnd::Replaced(reason) => {
                        s.failures += 1;
                        s.last_failure = Some(reason.clone());
                    }
                    _ => {}
                }
            });
            let Some(wait) = wait else {
                continue;
            };
            tokio::select! {
                _ = shutdown.cancelled() => break Ok(()),
                _ = tokio::time::sleep(wait) => {}
            }
        };
        renewer.abort();
        fencer.abort();
        // Revoked or shutting down: no tunnel outlives the link.
        self.tunnels.shutdown().await;
        result
    }

    async fn session(
        &self,
        hub: &HubAddress,
        mtls: Arc<rustls::ClientConfig>,
        mut identity: watch::Receiver<Identity>,
        reports: &mut mpsc::Receiver<pb::Report>,
        shutdown: &CancellationToken,
        welcomed: &mut bool,
    ) -> SessionEnd {
        identity.mark_unchanged();
        let cluster_id = identity.borrow().cluster_id.clone();
        let alert = tls::ReceivedAlert::default();
        let channel = match tls::channel_noting_alerts(hub, mtls.clone(), alert.clone()).await {
            Ok(c) => c,
            Err(_) if alert.revoked() => {
                return SessionEnd::Revoked(REFUSED_IN_HANDSHAKE.into());
            }
            Err(e) => return SessionEnd::Failed(tls::connect_failure(&e)),
        };
        // Tunnels ride a connection of their own (made on first use): a
        // stalled tunnel never holds up this session's stream.
        let tunnel_channel =
            match tls::tunnel_channel(hub, mtls.clone(), alert.clone(), self.tunnels.max_open()) {
                Ok(c) => c,
                Err(e) => return SessionEnd::Failed(format!("tunnel channel: {e}")),
            };
        let mut applied = match self.applier.applied().await {
            Ok(a) => a,
            Err(e) => return SessionEnd::Failed(format!("cannot read applied state: {e}")),
        };
        let (out, out_rx) = mpsc::channel::<pb::SpokeMessage>(256);
        let hello = pb::Hello {
            spoke_version: self.config.version.clone(),
            capabilities: self.config.capabilities.clone(),
            applied: applied.clone(),
            claimed_cluster_id: cluster_id,
            labels: self
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let send = |body| pb::SpokeMessage { body: Some(body) };
        if out
            .send(send(spoke_message::Body::Hello(hello)))
            .await
            .is_err()
        {
            return SessionEnd::Failed("outbound stream closed".into());
        }
        let mut client = SpokeLinkClient::new(channel).max_decoding_message_size(16 * 1024 * 1024);
        let mut inbound = match client.connect(ReceiverStream::new(out_rx)).await {
            Ok(r) => r.into_inner(),
            Err(status) => return classify(status, &alert),
        };
        let heartbeat = match inbound.message().await {
            Ok(Some(pb::HubMessage {
                body: Some(hub_message::Body::Welcome(w)),
            })) => {
                tracing::info!(cluster = %w.cluster_name, hub = %hub.url(), resend = w.resend.len(), "link.connected");
                if let Some(capacity) = &self.capacity {
                    capacity.set_selector(w.node_selector.into_iter().collect());
                }
                Duration::from_secs(u64::from(w.heartbeat_interval_seconds.max(1)))
            }
            Ok(Some(pb::HubMessage {
                body: Some(hub_message::Body::GoAway(g)),
            })) => return go_away(g),
            Ok(_) => return SessionEnd::Failed("hub did not answer Hello with Welcome".into()),
            Err(status) => return classify(status, &alert),
        };
        *welcomed = true;
        self.metrics.connected.set(1);
        self.metrics
            .connected_hub
            .get_or_create(&HubLabel { hub: hub.url() })
            .set(1);
        self.status.send_modify(|s| {
            s.connected = true;
            s.hub = Some(hub.url());
            s.welcomes += 1;
            s.last_welcome = Some(tokio::time::Instant::now());
        });
        let current = self.applier.current_reports().await;
        tracing::info!(reports = current.len(), "link.reports_resent");
        for report in current {
            if out
                .send(send(spoke_message::Body::Report(report)))
                .await
                .is_err()
            {
                return SessionEnd::Failed("outbound stream closed".into());
            }
        }
        // The current capacity now (if known yet), then each change.
        let mut capacity = self.capacity.as_ref().map(|c| {
            let mut rx = c.reports();
            rx.mark_changed();
            rx
        });
        let mut beat = tokio::time::interval(heartbeat);
        let mut renew = tokio::time::interval(RENEW_CHECK);
        let mut last_heard = Instant::now();
        // Items whose apply failed, retried until applied or superseded.
        let mut failed: BTreeMap<String, pb::Work> = BTreeMap::new();
        let mut retry = tokio::time::interval(Duration::from_secs(2));
        let mut applies = Applies::new(self.apply_limit.clone());
        // The report channel closes for good when the applier has no
        // reports to send (the file ledger): a closed channel answers at
        // once, so polling it again would spin this loop.
        let mut reports_open = true;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    self.drain(&mut applies, &out, &mut applied).await;
                    return SessionEnd::Shutdown;
                }
                changed = identity.changed() => {
                    if changed.is_ok() {
                        // The old stream is drained: what is being applied
                        // is finished and acked before moving over.
                        self.drain(&mut applies, &out, &mut applied).await;
                        return SessionEnd::Rotated;
                    }
                }
                Some(joined) = applies.running.join_next(), if !applies.running.is_empty() => {
                    match joined {
                        Ok((work, result, elapsed)) => {
                            let target = work.target.clone();
                            if let Some(w) = self.finish_apply(work, result, elapsed, &out, &mut applied).await {
                                failed.insert(w.target.clone(), w);
                            }
                            applies.finished(&self.applier, &target);
                        }
                        Err(e) => tracing::error!(error = %e, "link.apply_task_failed"),
                    }
                }
                message = inbound.message() => {
                    last_heard = Instant::now();
                    match message {
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::Work(work)) })) => {
                            // A failed item waiting for its retry and the new
                            // item: the newer generation goes on, the other
                            // is acked as superseded.
                            let (work, dropped) = match failed.remove(&work.target) {
                                Some(f) => supersede(f, work),
                                None => (work, None),
                            };
                            for dropped in dropped
                                .into_iter()
                                .chain(applies.submit(&self.applier, work))
                            {
                                if out.send(superseded_ack(&dropped)).await.is_err() {
                                    return SessionEnd::Failed("outbound stream closed".into());
                                }
                            }
                        }
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::GoAway(g)) })) => {
                            return go_away(g);
                        }
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::Heartbeat(beat)) })) => {
                            if beat.renewed_sequence != 0 {
                                self.lease.renewed(beat.renewed_sequence);
                            }
                        }
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::TunnelOpen(open)) })) => {
                            self.tunnels.start(tunnel_channel.clone(), open);
                        }
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::Diagnose(req)) })) => {
                            // Answered on its own task: a slow Pod never holds
                            // up the stream. The read inside is bounded.
                            let applier = self.applier.clone();
                            let out = out.clone();
                            let span = tracing::info_span!("link.diagnose", request = %req.request_id, target = %req.target);
                            tokio::spawn(async move {
                                let result = applier.diagnose(&req).await;
                                let _ = out.send(send(spoke_message::Body::DiagnoseResult(result))).await;
                            }.instrument(span));
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => return SessionEnd::Failed("hub closed the stream".into()),
                        Err(status) => return classify(status, &alert),
                    }
                }
                report = reports.recv(), if reports_open => {
                    let Some(report) = report else {
                        reports_open = false;
                        continue;
                    };
                    if out.send(send(spoke_message::Body::Report(report))).await.is_err() {
                        return SessionEnd::Failed("outbound stream closed".into());
                    }
                }
                report = next_capacity(&mut capacity) => {
                    if let Some(c) = report
                        && out.send(send(spoke_message::Body::Capacity(c.into()))).await.is_err()
                    {
                        return SessionEnd::Failed("outbound stream closed".into());
                    }
                }
                _ = beat.tick() => {
                    if last_heard.elapsed() > heartbeat * 3 {
                        return SessionEnd::Failed("hub silent for three heartbeat intervals".into());
                    }
                    let expiry = identity.borrow().seconds_to_expiry();
                    self.metrics.certificate_expiry_seconds.set(expiry as f64);
                    let (renew_sequence, fenced) = self.lease_heartbeat(heartbeat, true).await;
                    let msg = pb::Heartbeat {
                        unix_millis: chrono::Utc::now().timestamp_millis() as u64,
                        applied_digest: match &self.applied_digest {
                            Some(source) => source().unwrap_or_default(),
                            None => clawfed_proto::digest::legacy(
                                applied.iter().map(|(t, g)| (t.as_str(), *g)),
                            ),
                        },
                        renew_sequence,
                        renewed_sequence: 0,
                        fenced,
                    };
                    if out.send(send(spoke_message::Body::Heartbeat(msg))).await.is_err() {
                        return SessionEnd::Failed("outbound stream closed".into());
                    }
                }
                _ = renew.tick() => {
                    // Between heartbeats: a renewal alone, when the
                    // shortest failover period asks for one (no digest, so
                    // the hub compares nothing).
                    let (renew_sequence, fenced) = self.lease_heartbeat(heartbeat, false).await;
                    if renew_sequence != 0 {
                        let msg = pb::Heartbeat {
                            unix_millis: chrono::Utc::now().timestamp_millis() as u64,
                            applied_digest: String::new(),
                            renew_sequence,
                            renewed_sequence: 0,
                            fenced,
                        };
                        if out.send(send(spoke_message::Body::Heartbeat(msg))).await.is_err() {
                            return SessionEnd::Failed("outbound stream closed".into());
                        }
                    }
                }
                _ = retry.tick(), if !failed.is_empty() => {
                    for (_, work) in std::mem::take(&mut failed) {
                        if let Some(dropped) = applies.submit(&self.applier, work)
                            && out.send(superseded_ack(&dropped)).await.is_err()
                        {
                            return SessionEnd::Failed("outbound stream closed".into());
                        }
                    }
                }
            }
        }
    }
}

/// How often a session looks whether a lease renewal is due between
/// heartbeats.
const RENEW_CHECK: Duration = Duration::from_secs(1);

impl Link {
    /// The lease fields of a heartbeat sent now: a renewal's sequence
    /// (0: none) and the fenced targets. A renewal goes out when
    /// failover-enabled Harnesses run and one is due, or on every regular
    /// heartbeat (`regular`) while they run.
    async fn lease_heartbeat(&self, heartbeat: Duration, regular: bool) -> (u64, Vec<String>) {
        let state = self.applier.failover().await.unwrap_or_default();
        let now = tokio::time::Instant::now();
        let renew = state.shortest().is_some_and(|f| {
            regular
                || self.lease.renewal_due(
                    now,
                    clawfed_proto::failover::periods(f).fence_after,
                    heartbeat,
                )
        });
        let sequence = if renew { self.lease.request(now) } else { 0 };
        (sequence, state.fenced)
    }
}

/// The next capacity report (never, without a capacity watch or once it
/// ended; `None` while it has none).
async fn next_capacity(
    rx: &mut Option<watch::Receiver<Option<clawfed_proto::capacity::Capacity>>>,
) -> Option<clawfed_proto::capacity::Capacity> {
    let Some(r) = rx.as_mut() else {
        return std::future::pending().await;
    };
    if r.changed().await.is_err() {
        *rx = None;
        return std::future::pending().await;
    }
    *r.borrow_and_update()
}

/// A GoAway as how the session ended.
pub(super) fn go_away(g: pb::GoAway) -> SessionEnd {
    let redirect = (!g.redirect_url.is_empty()).then_some(g.redirect_url);
    SessionEnd::GoAway(
        Duration::from_secs(u64::from(g.retry_after_seconds)),
        redirect,
    )
}

/// Why a session ended, from the status it ended with: the hub's typed
/// close reason (status metadata), or the TLS `certificate_revoked` alert
/// the hub sent on the connection when the call failed in the transport.
/// Never from the message text.
pub(super) fn classify(status: tonic::Status, alert: &tls::ReceivedAlert) -> SessionEnd {
    let message = status.message().to_owned();
    match CloseReason::of(&status) {
        Some(CloseReason::Revoked) => SessionEnd::Revoked(message),
        Some(CloseReason::Replaced) => SessionEnd::Replaced(format!("replaced: {message}")),
        Some(reason) => SessionEnd::Failed(format!("{reason}: {message}")),
        None if alert.revoked() => SessionEnd::Revoked(REFUSED_IN_HANDSHAKE.into()),
        None => SessionEnd::Failed(format!("{}: {message}", status.code())),
    }
}

/// What a revoked spoke reports when the hub refused it in the handshake.
const REFUSED_IN_HANDSHAKE: &str = "certificate refused as revoked in the TLS handshake";
