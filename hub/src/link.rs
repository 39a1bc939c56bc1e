//! The hub's side of the spoke link: spokes dial in over mTLS gRPC; the hub
//! never dials out and holds no execution-cluster credential.
//!
//! # Layout
//! - `ca.rs`: the certificate authority (rcgen) that signs spoke CSRs.
//! - `tls.rs`: TLS 1.3 server config, the revocation deny-list in the
//!   handshake, the cluster identity of a verified peer.
//! - `enroll.rs`: `Enrollment.Enroll` (bootstrap token + CSR) and
//!   `SpokeLink.Renew`.
//! - `session.rs`: one `SpokeLink.Connect` stream: Hello/Welcome, outbox
//!   delivery with acks, reports, heartbeats.
//! - `registry.rs`: live sessions per cluster (wake-ups, revocation, load
//!   shedding).
//! - `server.rs`: the listener (bounded concurrent handshakes), the
//!   revocation watcher, the outbox poller and the session keeper (lease
//!   renewal, superseded sessions, clusters of dead replicas offline).
//! - `admission.rs`: which handshakes the listener sheds when its slots
//!   run out (pure).
//! - `metrics.rs`: link metrics.
//! - `diagnose.rs`: diagnose requests to spokes and their answers.
//! - `balance.rs`: which sessions a replica redirects to which other
//!   replica (after one joins, or while it shuts down) (pure).

pub mod admission;
pub mod balance;
pub mod ca;
pub mod diagnose;
pub mod enroll;
pub mod handshake_io;
pub mod metrics;
pub mod registry;
pub mod report;
pub mod server;
pub mod session;
pub mod stream_limits;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Settings of the link.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    pub addr: SocketAddr,
    /// Where the CA key and certificate live.
    pub ca_dir: PathBuf,
    /// DNS names and IPs on the link's serving certificate.
    pub server_names: Vec<String>,
    /// Lifetime of spoke client certificates.
    pub cert_ttl: Duration,
    /// Heartbeat interval; silence for two intervals closes a session and
    /// marks the cluster offline.
    pub heartbeat: Duration,
    /// Sessions held at most; more are told to come back later.
    pub max_sessions: usize,
    /// TLS handshakes in progress at most; when all are live and young,
    /// more wait in the accept queue (stalled ones are shed first).
    pub max_concurrent_handshakes: usize,
    /// TLS handshakes in progress at most from one source address; a
    /// newcomer sheds that source's oldest stalled handshake.
    pub max_handshakes_per_source: usize,
    /// A connection must send its first TLS bytes within this; a handshake
    /// older than this may be shed when the slots run out.
    pub handshake_stall_timeout: Duration,
    /// A TLS handshake must complete within this.
    pub handshake_timeout: Duration,
    /// The least a server flight may wait for the client's answer before
    /// a newcomer may take its handshake's slot (see `admission.rs`: the
    /// budget grows with how long clients take to answer).
    pub handshake_answer_floor: Duration,
    /// Connections whose ClientHello is in that may wait for a handshake
    /// slot (each a socket); beyond, newcomers are closed at once.
    pub max_waiting_handshakes: usize,
    /// Largest message accepted from a spoke.
    pub max_message_bytes: usize,
    /// Unacked items sent ahead of acks on one stream.
    pub send_window: usize,
    /// The safety poll: how often revocations and outbox changes made by
    /// other processes are picked up from the store. Those made in this
    /// process wake the watcher and the sessions at once.
    pub poll_interval: Duration,
    /// Limits and timeouts of tunneled connections (the data path).
    pub tunnel: crate::tunnel::TunnelConfig,
    /// This hub process among the replicas on one store: the owner of
    /// the sessions it records (a new uuid per process).
    pub replica_id: String,
    /// The link address spokes reach this replica at (`https://host:port`).
    /// Set, the replica publishes it with its session count, takes
    /// sessions other replicas redirect, and redirects its own (balancing,
    /// shutdown); `None`: no redirects to or from it.
    pub advertise_url: Option<String>,
    /// How this replica balances sessions with the others.
    pub balance: balance::BalanceConfig,
    /// The installation's `runtime.nodeSelector`, sent in Welcome: the
    /// nodes whose capacity a spoke reports.
    pub node_selector: std::collections::BTreeMap<String, String>,
}

impl LinkConfig {
    /// How often a replica renews the leases of its sessions (one
    /// statement for all of them) and sweeps for lapsed ones.
    pub fn lease_renew_interval(&self) -> Duration {
        self.heartbeat / 2
    }

    /// How long a session's lease lasts unless renewed: three renewals,
    /// so one slow renewal does not lose it, and a dead replica's clusters
    /// are offline within two heartbeats (lease plus one sweep interval).
    pub fn lease_ttl(&self) -> Duration {
        self.heartbeat * 3 / 2
    }

    /// A replica whose published heartbeat is older than this is dead:
    /// it publishes with every lease renewal, so as long as a lease.
    pub fn replica_ttl(&self) -> Duration {
        self.lease_ttl()
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8443)),
            ca_dir: PathBuf::from("./clawfed-ca"),
            server_names: vec!["localhost".into(), "127.0.0.1".into()],
            cert_ttl: Duration::from_secs(24 * 3600),
            heartbeat: Duration::from_secs(10),
            max_sessions: 20_000,
            max_concurrent_handshakes: 256,
            // Several spokes may share one egress address (NAT); a flood
            // from one address still leaves the other slots to the rest.
            max_handshakes_per_source: 128,
            handshake_stall_timeout: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(5),
            handshake_answer_floor: Duration::from_millis(50),
            max_waiting_handshakes: 8192,
            max_message_bytes: 4 * 1024 * 1024,
            send_window: 256,
            poll_interval: Duration::from_secs(2),
            tunnel: crate::tunnel::TunnelConfig::default(),
            replica_id: uuid::Uuid::new_v4().to_string(),
            advertise_url: None,
            balance: balance::BalanceConfig::default(),
            node_selector: Default::default(),
        }
    }
}

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// Told about every report a spoke sends (after it is stored), so the
/// pipeline reacts to reports instead of polling for them.
#[async_trait::async_trait]
pub trait ReportListener: Send + Sync + 'static {
    async fn on_report(&self, cluster_id: &str, target: &str, kind: &str);
}

/// What every part of the link shares.
pub struct LinkState {
    pub listener: Option<Arc<dyn ReportListener>>,
    pub store: Arc<dyn Store>,
    pub ca: Arc<ca::CertificateAuthority>,
    pub registry: Arc<registry::Registry>,
    pub deny: Arc<tls::DenyList>,
    pub metrics: metrics::LinkMetrics,
    /// Tunnel opens waiting for their spoke stream.
    pub tunnels: Arc<crate::tunnel::broker::Broker>,
    /// Diagnose requests waiting for their spoke's answer.
    pub diagnose: Arc<diagnose::DiagnoseBroker>,
    pub config: LinkConfig,
    pub shutdown: CancellationToken,
    /// Seals credential values while Harness work waits in the durable
    /// outbox; a session opens them only to send them over mTLS.
    pub secrets: Arc<crate::secrets::SecretBox>,
    /// Where this replica's sessions go when it shuts down: planned once,
    /// by the first session that asks (see [`LinkState::handoff_redirect`]).
    pub handoff: tokio::sync::OnceCell<Handoff>,
    /// The installation's transport key, loaded once: it derives each
    /// OpenClaw Harness' gateway token ([`LinkState::runtime_token`]).
    pub runtime_key: tokio::sync::OnceCell<crate::gateway::TransportKey>,
    /// Where this replica's tunnel ingress is reached (set once it
    /// listens): published, so other replicas forward CONNECTs for the
    /// clusters whose sessions this one holds.
    pub tunnel_url: std::sync::OnceLock<String>,
}

/// The redirects of a replica's sessions while it shuts down, handed out
/// one per session.
#[derive(Debug, Default)]
pub struct Handoff {
    targets: Vec<String>,
    next: std::sync::atomic::AtomicUsize,
}

impl Handoff {
    /// The next session's redirect; `None` when there is none (no other
    /// replica advertises an address) or every planned one is taken.
    fn next(&self) -> Option<String> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.targets.get(i).cloned()
    }
}

/// How long the shutdown plan may wait for the store: the sessions'
/// GoAways wait for it.
const HANDOFF_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

impl LinkState {
    /// The OpenClaw gateway token of revision `revision_id`, which the hub
    /// sends with its own requests to that runtime (the activation turn,
    /// `agents chat`).
    pub async fn runtime_token(
        &self,
        store: &dyn Store,
        revision_id: &str,
    ) -> Result<String, crate::gateway::transport::TransportKeyError> {
        Ok(self.transport_key(store).await?.runtime_token(revision_id))
    }

    /// The installation's transport key, loaded once.
    pub async fn transport_key(
        &self,
        store: &dyn Store,
    ) -> Result<&crate::gateway::TransportKey, crate::gateway::transport::TransportKeyError> {
        self.runtime_key
            .get_or_try_init(|| crate::gateway::TransportKey::load_or_create(store, &self.secrets))
            .await
    }

    /// The revision's runtime token and transport credential, for the
    /// hub's own requests to its Harness (both from the transport key).
    pub async fn revision_tokens(
        &self,
        store: &dyn Store,
        revision_id: &str,
    ) -> Result<(String, String), crate::gateway::transport::TransportKeyError> {
        let key = self.transport_key(store).await?;
        Ok((key.runtime_token(revision_id), key.token(revision_id)))
    }

    /// Where a session of this replica, shutting down, should reconnect:
    /// the least loaded other replicas, spread (`None` without an
    /// advertised address, or when no other replica takes redirects).
    pub async fn handoff_redirect(&self) -> Option<String> {
        self.config.advertise_url.as_ref()?;
        let plan = self
            .handoff
            .get_or_init(|| async {
                let since = self.store.now()
                    - chrono::Duration::from_std(self.config.replica_ttl())
                        .unwrap_or(chrono::Duration::MAX);
                let live = match tokio::time::timeout(
                    HANDOFF_LOOKUP_TIMEOUT,
                    self.store.replicas_live(since),
                )
                .await
                {
                    Ok(Ok(live)) => live,
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "link.handoff_lookup_failed");
                        Vec::new()
                    }
                    Err(_) => {
                        tracing::warn!("link.handoff_lookup_timed_out");
                        Vec::new()
                    }
                };
                let loads: Vec<balance::ReplicaLoad> = live.iter().map(replica_load).collect();
                let targets = balance::plan_handoff(
                    &self.config.replica_id,
                    self.registry.len(),
                    &loads,
                    rand::random::<u32>() as usize,
                );
                tracing::info!(
                    sessions = self.registry.len(),
                    redirects = targets.len(),
                    "link.handoff_planned"
                );
                Handoff {
                    targets,
                    next: Default::default(),
                }
            })
            .await;
        plan.next()
    }
}

/// A published replica as the balancing rule sees it.
pub(crate) fn replica_load(r: &crate::store::ReplicaRecord) -> balance::ReplicaLoad {
    balance::ReplicaLoad {
        replica_id: r.replica_id.clone(),
        advertise_url: r.advertise_url.clone(),
        sessions: usize::try_from(r.sessions).unwrap_or(0),
    }
}

impl std::fmt::Debug for LinkState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkState")
            .field("config", &self.config)
            .field("sessions", &self.registry.len())
            .finish_non_exhaustive()
    }
}
