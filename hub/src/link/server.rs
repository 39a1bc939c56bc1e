//! The link listener and its background tasks.
//!
//! TLS handshakes run on their own tasks, at most `max_concurrent_handshakes`
//! at once: beyond that the accept loop stops accepting and new connections
//! wait in the kernel's backlog, so a mass reconnect after a hub restart is
//! absorbed at a steady rate instead of starving established sessions.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use clawfed_proto::link::v1::enrollment_server::EnrollmentServer;
use clawfed_proto::link::v1::spoke_link_server::SpokeLinkServer;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::ca::CertificateAuthority;
use super::enroll::EnrollmentApi;
use super::metrics::{ClusterLabel, LinkMetrics, ResultLabel};
use super::registry::{CloseReason, Registry};
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
        let seq = self
            .state
            .store
            .outbox_put(cluster_id, target, kind, generation, &spec)
            .await?;
        if seq.is_some() {
            self.state.registry.wake(cluster_id);
        }
        Ok(seq)
    }

    /// The CA certificate spokes must pin.
    pub fn ca_pem(&self) -> &str {
        self.state.ca.ca_pem()
    }
}

/// Starts the link listener and its background tasks on `tasks`.
pub async fn start(
    config: LinkConfig,
    store: Arc<dyn Store>,
    metrics: LinkMetrics,
    report_listener: Option<Arc<dyn super::ReportListener>>,
    shutdown: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Result<LinkHandle, LinkError> {
    let ca = Arc::new(CertificateAuthority::load_or_create(&config.ca_dir)?);
    start_with_ca(config, ca, store, metrics, report_listener, shutdown, tasks).await
}

/// As [`start`], with a CA already in hand.
pub async fn start_with_ca(
    config: LinkConfig,
    ca: Arc<CertificateAuthority>,
    store: Arc<dyn Store>,
    metrics: LinkMetrics,
    report_listener: Option<Arc<dyn super::ReportListener>>,
    shutdown: CancellationToken,
    tasks: &mut JoinSet<()>,
) -> Result<LinkHandle, LinkError> {
    let deny = Arc::new(DenyList::default());
    deny.insert_all(
        store
            .revoked_since(None)
            .await?
            .into_iter()
            .map(|r| r.serial),
    );
    // No session survives a hub restart: whatever was online is offline
    // until it reconnects.
    store.mark_stale_offline(Utc::now()).await?;
    let tls = Arc::new(server_config(&ca, &config.server_names, deny.clone())?);
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(|source| LinkError::Bind {
            addr: config.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| LinkError::Bind {
        addr: config.addr,
        source,
    })?;
    let state = Arc::new(LinkState {
        listener: report_listener,
        store,
        ca,
        registry: Arc::new(Registry::default()),
        deny,
        metrics,
        config: config.clone(),
        shutdown: shutdown.clone(),
    });

    let (conn_tx, conn_rx) = mpsc::channel(1024);
    tasks.spawn(accept_loop(
        listener,
        TlsAcceptor::from(tls),
        state.clone(),
        conn_tx,
    ));

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
            // Small per-connection windows keep idle spokes cheap; work
            // items are small and acked one by one.
            .initial_connection_window_size(256 * 1024)
            .initial_stream_window_size(128 * 1024)
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

    tasks.spawn(revocation_watcher(state.clone()));
    tasks.spawn(outbox_poller(state.clone()));
    Ok(LinkHandle { addr, state })
}

type TlsConn = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    state: Arc<LinkState>,
    conns: mpsc::Sender<Result<TlsConn, std::io::Error>>,
) {
    let permits = Arc::new(Semaphore::new(state.config.max_concurrent_handshakes));
    loop {
        // Take a handshake slot before accepting: at the limit, new
        // connections queue in the backlog.
        let permit = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let (tcp, peer) = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
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
        let acceptor = acceptor.clone();
        let conns = conns.clone();
        let metrics = state.metrics.clone();
        tokio::spawn(async move {
            let result = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await;
            drop(permit);
            let outcome = match result {
                Ok(Ok(tls)) => {
                    let _ = conns.send(Ok(tls)).await;
                    "ok"
                }
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "link.handshake_failed");
                    "failed"
                }
                Err(_) => "timeout",
            };
            metrics
                .handshakes
                .get_or_create(&ResultLabel {
                    result: outcome.into(),
                })
                .inc();
        });
    }
}

/// Picks up revocations (also those made by `clawfed-hub cluster revoke`
/// in another process): the serial joins the handshake deny-list and the
/// cluster's live stream is closed.
async fn revocation_watcher(state: Arc<LinkState>) {
    let mut since = Utc::now() - chrono::Duration::seconds(5);
    let mut tick = tokio::time::interval(state.config.poll_interval);
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let checked_at = Utc::now();
        match state.store.revoked_since(Some(since)).await {
            Ok(revoked) => {
                for r in &revoked {
                    if state.registry.close(&r.cluster_id, CloseReason::Revoked) {
                        tracing::warn!(clusterId = %r.cluster_id, "link.revoked_session_closed");
                    }
                }
                state.deny.insert_all(revoked.into_iter().map(|r| r.serial));
                // Overlap the windows so a revocation committed during the
                // query is not missed.
                since = checked_at - chrono::Duration::seconds(2);
            }
            Err(e) => tracing::warn!(error = %e, "link.store_error"),
        }
    }
}

/// Wakes sessions whose outbox grew from outside this process, and keeps
/// the per-cluster gauges current.
async fn outbox_poller(state: Arc<LinkState>) {
    let mut heads: HashMap<String, i64> = HashMap::new();
    let mut tick =
        tokio::time::interval(state.config.poll_interval.max(Duration::from_millis(500)));
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tick.tick() => {}
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
                        state.registry.wake(&s.cluster_id);
                    }
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
