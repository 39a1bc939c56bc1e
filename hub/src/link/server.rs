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
//!
//! The accept loop and its handshakes are in `accept`; the revocation
//! watcher and the outbox poller in `watchers`; the session keeper (lease
//! renewal, superseded sessions, lapsed clusters, the hand-off on
//! shutdown) in `leases`; this replica's published record and the
//! balancer in `replicas`.

mod accept;
mod leases;
mod replicas;
mod watchers;

use std::net::SocketAddr;
use std::sync::Arc;

use clawfed_proto::link::v1::enrollment_server::EnrollmentServer;
use clawfed_proto::link::v1::spoke_link_server::SpokeLinkServer;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use self::accept::accept_loop;
use self::leases::session_keeper;
use self::replicas::balancer;
use self::watchers::{outbox_poller, revocation_watcher};
use super::ca::CertificateAuthority;
use super::enroll::EnrollmentApi;
use super::metrics::LinkMetrics;
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
    tasks.spawn(
        accept_loop(listener, tls, state.clone(), conn_tx)
            .instrument(tracing::info_span!("link.accept", %addr)),
    );

    let link = SpokeLinkServer::new(SpokeLinkApi::new(state.clone()))
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes);
    let enroll = EnrollmentServer::new(EnrollmentApi::new(state.clone()))
        .max_decoding_message_size(64 * 1024);
    let token = shutdown.clone();
    let registry = state.registry.clone();
    tasks.spawn(
        async move {
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
        }
        .instrument(tracing::info_span!("link.serve", %addr)),
    );

    tasks.spawn(
        revocation_watcher(state.clone(), revocations_seen)
            .instrument(tracing::info_span!("link.revocations")),
    );
    tasks.spawn(outbox_poller(state.clone()).instrument(tracing::info_span!("link.outbox")));
    tasks.spawn(session_keeper(state.clone()).instrument(tracing::info_span!("link.leases")));
    if state.config.advertise_url.is_some() {
        tasks.spawn(balancer(state.clone()).instrument(tracing::info_span!("link.balancer")));
    }
    Ok(LinkHandle { addr, state })
}
