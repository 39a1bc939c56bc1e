//! The link listener and its background tasks.
//!
//! TLS handshakes run on their own tasks, at most `max_concurrent_handshakes`
//! at once and `max_handshakes_per_source` from one address, each bounded in
//! time (first bytes within the stall timeout, the whole handshake within
//! the handshake timeout). When the slots run out, stalled handshakes (no
//! bytes, a partial ClientHello, or simply too old) are shed for newcomers
//! (see `admission.rs`), so a flood of connections that never finish their
//! handshake cannot lock spokes out. Only when every slot holds a live,
//! young handshake does the accept loop stop accepting: new connections
//! wait in the kernel's backlog, so a mass reconnect after a hub restart is
//! absorbed at a steady rate instead of starving established sessions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use clawfed_proto::link::v1::enrollment_server::EnrollmentServer;
use clawfed_proto::link::v1::spoke_link_server::SpokeLinkServer;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio_rustls::LazyConfigAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::admission::{Admission, Limits, Lobby, Phase, Slots, phase_of};
use super::ca::CertificateAuthority;
use super::enroll::EnrollmentApi;
use super::handshake_io::Watched;
use super::metrics::{ClusterLabel, LinkMetrics, ResultLabel};
use super::registry::Registry;
use super::session::SpokeLinkApi;
use super::tls::{DenyList, TlsError, server_config};
use super::{LinkConfig, LinkState};
use crate::store::{Store, StoreError};

/// Errors starting the link.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The CA could not be loaded or created.
    #[error(transparent)]
    Ca(#[from] super::ca::CaError),
    /// TLS could not be configured.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The port could not be bound.
    #[error("cannot listen on {addr} (link): {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The store failed during start-up.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How the rest of the hub talks to the link.
#[derive(Debug, Clone)]
pub struct LinkHandle {
    pub addr: SocketAddr,
    pub state: Arc<LinkState>,
}

impl LinkHandle {
    /// Puts the full desired spec of `target` at `generation` into the
    /// cluster's outbox and wakes its session. Returns the sequence, or
    /// `None` when this generation (or a newer one) is already queued.
    pub async fn send(
        &self,
        cluster_id: &str,
        target: &str,
        kind: &str,
        generation: i64,
        spec: &serde_json::Value,
    ) -> Result<Option<i64>, StoreError> {
        let spec_value = spec;
        let spec = spec.to_string();
        // An item the link cannot encode would end the cluster's stream on
        // every delivery attempt and hold back everything queued after it.
        let encoded = prost::Message::encoded_len(&clawfed_proto::link::v1::HubMessage {
            body: Some(clawfed_proto::link::v1::hub_message::Body::Work(
                clawfed_proto::link::v1::Work {
                    sequence: u64::MAX,
                    target: target.to_owned(),
                    generation,
                    spec: spec.clone().into_bytes(),
                    kind: kind.to_owned(),
                },
            )),
        });
        if encoded > self.state.config.max_message_bytes {
            return Err(StoreError::FailedPrecondition(format!(
                "work for {target:?} is {encoded} bytes on the link, over link.max_message_bytes ({}); it could never be delivered",
                self.state.config.max_message_bytes
            )));
        }
        // The outbox is durable and keeps items after their ack: credential
        // values never sit there in plaintext (sealed for this cluster and
        // target; the session opens them only to send them over mTLS).
        let stored = if kind == clawfed_proto::work::WorkKind::HarnessApply.as_str() {
            let mut sealed = spec_value.clone();
            self.state
                .secrets
                .seal_work_credentials(cluster_id, target, &mut sealed)
                .map_err(|e| StoreError::FailedPrecondition(format!("work for {target:?}: {e}")))?;
            sealed.to_string()
        } else {
            spec
        };
        let seq = self
            .state
            .store
            .outbox_put(cluster_id, target, kind, generation, &stored)
            .await?;
        if seq.is_some() {
            self.state.registry.wake(cluster_id, seq);
        }
        Ok(seq)
    }

    /// The CA certificate spokes must pin.
    pub fn ca_pem(&self) -> &str {
        self.state.ca.ca_pem()
    }
}

/// The link's socket, bound by the caller (at `config.addr`, before
/// anything of the hub serves), and its settings.
#[derive(Debug)]
pub struct LinkListener {
    pub socket: TcpListener,
    pub config: LinkConfig,
}

/// Starts the link on its listener and its background tasks on `tasks`.
pub async fn start(
    listener: LinkListener,
    store: Arc<dyn Store>,
    secrets: Arc<crate::secrets::SecretBox>,
    metrics: LinkMetrics,
    report_listener: Option<Arc<dyn super::ReportListener>>,
    shutdown: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Result<LinkHandle, LinkError> {
    // Every replica on this store presents the same CA: the stored one
    // (the first replica stored it, importing the CA directory if it held
    // one).
    let (ca, origin) =
        super::ca::load_or_create_shared(store.as_ref(), &secrets, Some(&listener.config.ca_dir))
            .await?;
    tracing::info!(origin = ?origin, "link.ca_loaded");
    let keys = LinkKeys {
        ca: Arc::new(ca),
        secrets,
    };
    start_with_ca(
        listener,
        keys,
        store,
        metrics,
        report_listener,
        shutdown,
        tasks,
    )
    .await
}

/// The keys of the link: the CA that signs spoke certificates, and the key
/// that seals credentials while their work waits in the outbox.
#[derive(Debug, Clone)]
pub struct LinkKeys {
    pub ca: Arc<CertificateAuthority>,
    pub secrets: Arc<crate::secrets::SecretBox>,
}

/// As [`start`], with the CA (and the sealing key) already in hand.
pub async fn start_with_ca(
    listener: LinkListener,
    keys: LinkKeys,
    store: Arc<dyn Store>,
    metrics: LinkMetrics,
    report_listener: Option<Arc<dyn super::ReportListener>>,
    shutdown: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Result<LinkHandle, LinkError> {
    let LinkKeys { ca, secrets } = keys;
    let LinkListener {
        socket: listener,
        config,
    } = listener;
    let deny = Arc::new(DenyList::default());
    let revoked = store.revoked_after(0).await?;
    let revocations_seen = revoked.iter().map(|r| r.sequence).max().unwrap_or(0);
    deny.insert_all(revoked.into_iter().map(|r| r.serial));
    // No session survives its replica: a cluster whose session lease
    // lapsed (its replica died, e.g. this one before a restart) is offline
    // until it reconnects. Clusters whose lease another live replica
    // renews are left alone.
    let lapsed = store.offline_where_lease_expired(store.now(), true).await?;
    tracing::info!(replica = %config.replica_id, offline = lapsed.len(), "link.lapsed_sessions_offline");
    let tls = Arc::new(server_config(&ca, &config.server_names, deny.clone())?);
    let addr = listener.local_addr().map_err(|source| LinkError::Bind {
        addr: config.addr,
        source,
    })?;
    let registry = Arc::new(Registry::default());
    let tunnels = Arc::new(crate::tunnel::broker::Broker::new(
        registry.clone(),
        config.tunnel.clone(),
        metrics.tunnel.clone(),
        shutdown.clone(),
    ));
    let state = Arc::new(LinkState {
        listener: report_listener,
        store,
        ca,
        registry,
        deny,
        tunnels,
        diagnose: Arc::default(),
        metrics,
        config: config.clone(),
        shutdown: shutdown.clone(),
        secrets,
        handoff: Default::default(),
        runtime_key: Default::default(),
        tunnel_url: Default::default(),
    });

    let (conn_tx, conn_rx) = mpsc::channel(1024);
    tasks.spawn(accept_loop(listener, tls, state.clone(), conn_tx));

    let link = SpokeLinkServer::new(SpokeLinkApi::new(state.clone()))
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes);
    let enroll = EnrollmentServer::new(EnrollmentApi::new(state.clone()))
        .max_decoding_message_size(64 * 1024);
    let token = shutdown.clone();
    let registry = state.registry.clone();
    tasks.spawn(async move {
        tracing::info!(%addr, "link.listening");
        let served = tonic::transport::Server::builder()
            // Windows are credit, not memory: an idle spoke costs nothing
            // for them. Each tunneled connection is its own stream with its
            // own window, and the spoke carries tunnels on a connection of
            // their own whose window holds every tunnel the cluster may
            // open stalled: stalled tunnels (a Gateway client that stopped
            // reading) never stop the others, nor the Connect stream.
            .initial_connection_window_size(clawfed_proto::tunnel::connection_window(
                config.tunnel.max_per_cluster,
            ))
            .initial_stream_window_size(clawfed_proto::tunnel::STREAM_WINDOW)
            // What one credential can hold open: streams per connection,
            // and Tunnel messages no larger than a data frame (a stream
            // announcing more is refused before its bytes are buffered).
            .max_concurrent_streams(super::stream_limits::max_concurrent_streams(
                config.tunnel.max_per_cluster,
            ))
            .layer(tower::util::MapRequestLayer::new(
                super::stream_limits::limit_tunnel_messages,
            ))
            .add_service(link)
            .add_service(enroll)
            .serve_with_incoming_shutdown(ReceiverStream::new(conn_rx), async move {
                token.cancelled().await;
                registry.close_all();
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "link.failed");
        }
        tracing::info!("link.stopped");
    });

    tasks.spawn(revocation_watcher(state.clone(), revocations_seen));
    tasks.spawn(outbox_poller(state.clone()));
    tasks.spawn(session_keeper(state.clone()));
    if state.config.advertise_url.is_some() {
        tasks.spawn(balancer(state.clone()));
    }
    Ok(LinkHandle { addr, state })
}

type TlsConn = tokio_rustls::server::TlsStream<Watched>;

/// Handshakes in progress, each with the token that sheds it.
type HandshakeSlots = Arc<Mutex<Slots<CancellationToken>>>;

fn lock(slots: &HandshakeSlots) -> std::sync::MutexGuard<'_, Slots<CancellationToken>> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// How often the lobby is looked at while connections wait in it (a
/// handshake overrunning its budget frees no slot by itself).
const LOBBY_RECHECK: Duration = Duration::from_millis(10);

/// Starts admitted handshakes on tasks of their own.
struct Handshakes {
    slots: HandshakeSlots,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<LinkState>,
    conns: mpsc::Sender<Result<TlsConn, std::io::Error>>,
    /// Wakes the accept loop when a handshake ends and frees a slot.
    freed: Arc<Notify>,
}

impl Handshakes {
    /// Admits a connection from `peer` that got to `phase`: a slot now
    /// (shedding stalled handshakes), or the connection back.
    fn admit(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        phase: Phase,
    ) -> Result<(), tokio::net::TcpStream> {
        let cancel = CancellationToken::new();
        let admitted = lock(&self.slots).admit(peer.ip(), Instant::now(), phase, cancel.clone());
        match admitted {
            Admission::Admitted { id, shed } => {
                for stalled in shed {
                    stalled.cancel();
                }
                self.start(id, cancel, tcp, peer);
                Ok(())
            }
            Admission::Refused(_) => Err(tcp),
        }
    }

    fn start(
        &self,
        id: u64,
        cancel: CancellationToken,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
    ) {
        let config = &self.state.config;
        let task = Handshake {
            id,
            slots: self.slots.clone(),
            stall_timeout: config.handshake_stall_timeout,
            timeout: config.handshake_timeout,
        };
        let (tls, conns, state, freed) = (
            self.tls.clone(),
            self.conns.clone(),
            self.state.clone(),
            self.freed.clone(),
        );
        tokio::spawn(async move {
            let result = tokio::select! {
                _ = cancel.cancelled() => Err("shed"),
                r = task.run(tcp, peer, tls) => r,
            };
            lock(&task.slots).release(id);
            freed.notify_one();
            let outcome = match result {
                Ok(tls) => {
                    let _ = conns.send(Ok(tls)).await;
                    "ok"
                }
                Err(outcome) => outcome,
            };
            count_handshake(&state, outcome);
        });
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<LinkState>,
    conns: mpsc::Sender<Result<TlsConn, std::io::Error>>,
) {
    let config = &state.config;
    let handshakes = Handshakes {
        slots: Arc::new(Mutex::new(Slots::new(Limits {
            total: config.max_concurrent_handshakes,
            per_source: config.max_handshakes_per_source,
            stall_after: config.handshake_stall_timeout,
            answer_floor: config.handshake_answer_floor,
        }))),
        tls,
        state: state.clone(),
        conns,
        freed: Arc::new(Notify::new()),
    };
    // Connections whose ClientHello is in and that found no slot.
    let mut lobby = Lobby::new(config.max_waiting_handshakes);
    // Room for the largest TLS record: a whole ClientHello can be seen.
    let mut peeked = vec![0u8; 5 + 16 * 1024];
    loop {
        let now = Instant::now();
        // The lobby first: its connections came before any in the backlog.
        if !lobby.is_empty() {
            lobby.drain(
                now.checked_sub(config.handshake_timeout).unwrap_or(now),
                |_, (tcp, peer)| {
                    handshakes
                        .admit(tcp, peer, Phase::Hello)
                        .err()
                        .map(|t| (t, peer))
                },
                |_| count_handshake(&state, "expired"),
            );
        }
        // At the limit with every handshake live and young, stop accepting:
        // new connections wait in the backlog (a mass reconnect is absorbed
        // at a steady rate) until a slot frees or the oldest stalls.
        let paused_until = lock(&handshakes.slots).full_until(now);
        let lobby_check = (!lobby.is_empty()).then(|| now + LOBBY_RECHECK);
        let wake = paused_until.into_iter().chain(lobby_check).min();
        let (tcp, peer) = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = handshakes.freed.notified() => continue,
            _ = tokio::time::sleep_until(wake.unwrap_or(now).into()), if wake.is_some() => continue,
            accepted = listener.accept(), if paused_until.is_none() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly.
                    tracing::warn!(error = %e, "link.accept_failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let (tcp, phase) = match waiting_phase(tcp, &mut peeked) {
            Ok(Some(p)) => p,
            // Closed before a byte: nothing to do.
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "link.accept_failed");
                continue;
            }
        };
        // A client whose ClientHello is in queues behind those of its
        // source already waiting.
        let tcp = if phase == Phase::Hello && lobby.has(peer.ip()) {
            tcp
        } else {
            match handshakes.admit(tcp, peer, phase) {
                Ok(()) => continue,
                Err(tcp) => tcp,
            }
        };
        if phase == Phase::Hello && lobby.push(peer.ip(), now, (tcp, peer)).is_ok() {
            continue;
        }
        // Its source is at its limit with only live handshakes (and, with
        // its ClientHello in, the lobby is full): closed at once, the
        // client retries with backoff.
        tracing::debug!(%peer, "link.handshake_refused");
        count_handshake(&state, "refused");
    }
}

/// What is already waiting on a just-accepted connection, without
/// consuming it or waiting: `None` when the peer already closed.
fn waiting_phase(
    tcp: tokio::net::TcpStream,
    buf: &mut [u8],
) -> std::io::Result<Option<(tokio::net::TcpStream, Phase)>> {
    // tokio only peeks when its reactor saw the socket readable; the
    // std socket (still non-blocking) asks the kernel right now.
    let std = tcp.into_std()?;
    let phase = match std.peek(buf) {
        Ok(0) => return Ok(None),
        Ok(n) => phase_of(&buf[..n]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Phase::Silent,
        Err(e) => return Err(e),
    };
    Ok(Some((tokio::net::TcpStream::from_std(std)?, phase)))
}

fn count_handshake(state: &LinkState, outcome: &str) {
    state
        .metrics
        .handshakes
        .get_or_create(&ResultLabel {
            result: outcome.into(),
        })
        .inc();
}

/// One TLS handshake, bounded in time: the first bytes within the stall
/// timeout (a real client sends its ClientHello at once), the whole
/// handshake within the handshake timeout.
struct Handshake {
    id: u64,
    slots: HandshakeSlots,
    stall_timeout: Duration,
    timeout: Duration,
}

impl Handshake {
    /// The TLS stream, or the outcome label of a failure.
    async fn run(
        &self,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
    ) -> Result<TlsConn, &'static str> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout(self.stall_timeout, tcp.peek(&mut first)).await {
            Err(_) => return Err("timeout"),
            Ok(Ok(0)) | Ok(Err(_)) => return Err("failed"),
            Ok(Ok(_)) => lock(&self.slots).advance(self.id, Phase::Partial, Instant::now()),
        }
        let (slots, id) = (self.slots.clone(), self.id);
        let tcp = Watched::new(
            tcp,
            Box::new(move |phase, at| lock(&slots).advance(id, phase, at)),
        );
        let hello = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
        let start = match tokio::time::timeout_at(deadline, hello).await {
            Err(_) => return Err("timeout"),
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "link.handshake_failed");
                return Err("failed");
            }
            Ok(Ok(start)) => start,
        };
        lock(&self.slots).advance(self.id, Phase::Hello, Instant::now());
        match tokio::time::timeout_at(deadline, start.into_stream(tls)).await {
            Err(_) => Err("timeout"),
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "link.handshake_failed");
                Err("failed")
            }
            Ok(Ok(tls)) => Ok(tls),
        }
    }
}

/// Picks up revocations (also those made by `clawfed-hub cluster revoke`
/// in another process or replica): the serial joins the handshake
/// deny-list and the cluster's live stream is closed. Paged by revocation
/// sequence from `seen` (what the start-up load covered), which commits in
/// order, so no revocation is missed however late it commits or however
/// wrong its revoker's clock.
async fn revocation_watcher(state: Arc<LinkState>, mut seen: i64) {
    // A revocation committed in this process wakes the watcher at once; the
    // tick is the safety poll for revocations by other processes.
    let mut revoked_here = state.store.signals().revocations.subscribe();
    let mut tick = tokio::time::interval(state.config.poll_interval);
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tick.tick() => {}
            _ = revoked_here.notified() => {}
        }
        revoked_here.mark_seen();
        match state.store.revoked_after(seen).await {
            Ok(revoked) => {
                for r in &revoked {
                    if state.registry.revoke(&r.cluster_id) {
                        tracing::warn!(clusterId = %r.cluster_id, "link.revoked_session_closed");
                    }
                }
                seen = revoked.iter().map(|r| r.sequence).max().unwrap_or(seen);
                state.deny.insert_all(revoked.into_iter().map(|r| r.serial));
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
    }
}

/// Wakes sessions whose outbox grew from outside this process (puts in
/// this process wake their session directly): at once when the store
/// tells (another replica's put, on PostgreSQL), else on the safety poll,
/// which also keeps the per-cluster gauges current.
async fn outbox_poller(state: Arc<LinkState>) {
    use tokio::sync::broadcast::error::RecvError;
    let mut heads: HashMap<String, i64> = HashMap::new();
    let mut tick =
        tokio::time::interval(state.config.poll_interval.max(Duration::from_millis(500)));
    let mut grown = state.store.signals().outbox.subscribe();
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tick.tick() => {}
            wake = grown.recv() => match wake {
                Ok(crate::wake::OutboxWake::Cluster { id, head }) => {
                    state.registry.wake(&id, head);
                    continue;
                }
                // Maybe missed: the poll below wakes every session whose
                // outbox head moved.
                Ok(crate::wake::OutboxWake::All) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
        }
        match state.store.outbox_summary().await {
            Ok(summary) => {
                state.metrics.outbox_depth.clear();
                for s in summary {
                    state
                        .metrics
                        .outbox_depth
                        .get_or_create(&ClusterLabel {
                            cluster: s.cluster_name.clone(),
                        })
                        .set(s.depth);
                    if heads.insert(s.cluster_id.clone(), s.max_sequence) != Some(s.max_sequence) {
                        state.registry.wake(&s.cluster_id, Some(s.max_sequence));
                    }
                }
                // A connected cluster with nothing unacked shows 0, not no
                // data.
                for (cluster, _) in state.registry.last_heard() {
                    let _ = state
                        .metrics
                        .outbox_depth
                        .get_or_create(&ClusterLabel { cluster });
                }
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
        let now = Utc::now().timestamp_millis();
        for (cluster, heard) in state.registry.last_heard() {
            state
                .metrics
                .last_seen_age
                .get_or_create(&ClusterLabel { cluster })
                .set((now - heard) as f64 / 1000.0);
        }
    }
}

/// Keeps this replica's sessions fenced: renews the leases of all its
/// sessions in one statement, closes those the renewal shows a newer
/// session (on any replica) took over, and marks offline the clusters
/// whose lease lapsed (their replica died). Every replica sweeps; the
/// store marks each cluster once.
async fn session_keeper(state: Arc<LinkState>) {
    let config = &state.config;
    let mut tick = tokio::time::interval(config.lease_renew_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the last renewal that succeeded started: the leases it gave
    // last until then plus a lease.
    let mut renewed_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return hand_off_leases(&state).await,
            _ = tick.tick() => {}
        }
        let started = Instant::now();
        // Taken before the renewal: a session claimed after the snapshot
        // is not judged by a renewal that may have run before its claim.
        let claimed = state.registry.claimed();
        let lease_until = state.store.now()
            + chrono::Duration::from_std(config.lease_ttl()).unwrap_or(chrono::Duration::MAX);
        // No session claimed here, no lease to renew: an idle replica
        // costs the database its sweep only (issue 14, idle load). A claim
        // committing meanwhile carries a fresh lease until the next tick.
        let renewed = if claimed.is_empty() {
            Ok(Vec::new())
        } else {
            state
                .store
                .session_renew(&config.replica_id, lease_until)
                .await
        };
        match renewed {
            Ok(held) => {
                let held: std::collections::HashSet<(String, i64)> = held.into_iter().collect();
                for cluster in state.registry.close_superseded(&claimed, &held) {
                    tracing::info!(%cluster, replica = %config.replica_id, "link.superseded");
                }
                // Renewals stalled past the lease (a slow database, a
                // paused process): another replica's sweep may have marked
                // these clusters offline while their sessions lived on.
                let lapsed = renewed_at.is_some_and(|at| at.elapsed() >= config.lease_ttl());
                renewed_at = Some(started);
                if lapsed {
                    restore_online(&state, &claimed, &held).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "link.lease_renew_failed"),
        }
        publish_replica(&state).await;
        match state
            .store
            .offline_where_lease_expired(state.store.now(), false)
            .await
        {
            Ok(marked) => {
                for cluster_id in marked {
                    tracing::warn!(clusterId = %cluster_id, "link.lease_lapsed_offline");
                }
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
    }
}

/// Publishes this replica's advertised link address (empty: it takes no
/// redirects), its tunnel ingress and its session count, with the lease
/// renewal: the others' view of it. Nothing when it has neither address.
async fn publish_replica(state: &LinkState) {
    let tunnel_url = state.tunnel_url.get().cloned();
    if state.config.advertise_url.is_none() && tunnel_url.is_none() {
        return;
    }
    let record = crate::store::ReplicaRecord {
        replica_id: state.config.replica_id.clone(),
        advertise_url: state.config.advertise_url.clone().unwrap_or_default(),
        sessions: state.registry.len() as i64,
        heartbeat_at: state.store.now(),
        tunnel_url,
    };
    if let Err(e) = state.store.replica_heartbeat(&record).await {
        tracing::warn!(error = %e, "link.replica_publish_failed");
    }
}

/// Moves this replica's excess sessions to less loaded replicas, on a
/// jittered tick (see `balance.rs`): each moved spoke gets a GoAway
/// naming its new replica, and its lease is handed off to cover the move.
async fn balancer(state: Arc<LinkState>) {
    let config = &state.config;
    let balance = &config.balance;
    loop {
        let wait = balance.jittered(rand::random::<f64>());
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let since = state.store.now()
            - chrono::Duration::from_std(config.replica_ttl()).unwrap_or(chrono::Duration::MAX);
        let live = match state.store.replicas_live(since).await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "link.store_error");
                continue;
            }
        };
        let loads: Vec<_> = live.iter().map(super::replica_load).collect();
        let mine = state.registry.len();
        let targets = super::balance::plan_moves(
            &config.replica_id,
            mine,
            &loads,
            balance,
            rand::random::<u32>() as usize,
        );
        if targets.is_empty() {
            continue;
        }
        let moved = state.registry.redirect(&targets);
        for (cluster, target) in &moved {
            tracing::info!(%cluster, %target, "link.session_redirected");
        }
        tracing::info!(
            replica = %config.replica_id,
            sessions = mine,
            replicas = loads.len(),
            moved = moved.len(),
            "link.rebalanced"
        );
    }
}

/// Re-marks online the clusters of `claimed` this replica still holds
/// (`held`) after its leases lapsed, with a fresh lease, so they show
/// offline for the stall only, not until their next last-seen write.
async fn restore_online(
    state: &LinkState,
    claimed: &[(String, i64)],
    held: &std::collections::HashSet<(String, i64)>,
) {
    let live: Vec<(String, i64)> = claimed
        .iter()
        .filter(|c| held.contains(*c))
        .cloned()
        .collect();
    let lease_until = state.store.now()
        + chrono::Duration::from_std(state.config.lease_ttl()).unwrap_or(chrono::Duration::MAX);
    match state
        .store
        .session_restore_online(&state.config.replica_id, &live, lease_until)
        .await
    {
        Ok(marked) => {
            for cluster_id in marked {
                tracing::warn!(clusterId = %cluster_id, replica = %state.config.replica_id, "link.lease_restored_online");
            }
        }
        Err(e) => tracing::warn!(error = %e, "link.store_error"),
    }
}

/// On shutdown, the sessions are told to reconnect after a jittered
/// retry-after: their leases are extended over it (plus one lease), so
/// no replica marks a cluster offline while its spoke is on its way to
/// another; one that does not come back is marked when the lease lapses.
async fn hand_off_leases(state: &LinkState) {
    let config = &state.config;
    let window = Duration::from_secs(super::session::GO_AWAY_RETRY.1.into()) + config.lease_ttl();
    let lease_until =
        state.store.now() + chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    match state
        .store
        .session_renew(&config.replica_id, lease_until)
        .await
    {
        Ok(held) => tracing::info!(sessions = held.len(), ?window, "link.leases_handed_off"),
        Err(e) => tracing::warn!(error = %e, "link.lease_renew_failed"),
    }
    // No more redirects to a replica on its way out.
    if config.advertise_url.is_some()
        && let Err(e) = state.store.replica_remove(&config.replica_id).await
    {
        tracing::warn!(error = %e, "link.replica_remove_failed");
    }
}
