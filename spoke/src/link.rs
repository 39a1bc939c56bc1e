//! The spoke's side of the link: it dials OUT to the hub (the execution
//! cluster needs no inbound port), enrolls once with a bootstrap token,
//! then keeps one mTLS stream open, applies work in order, acks only after
//! the applier recorded it durably, and renews its certificate at two
//! thirds of its lifetime without dropping work.
//!
//! # Layout
//! - this file: [`Link`], the connect / reconnect loop and one session.
//! - `identity.rs`: key, CSR, certificate; file, Secret or memory storage.
//! - `tls.rs`: TLS 1.3 client configs, the swappable client certificate.
//! - `hubs.rs`: which of several hub addresses is dialed next (rotation on
//!   failure, the hub's redirects).
//! - `reconnect.rs`: how long to wait before the next attempt (after a
//!   lost session, a failed attempt, a GoAway).
//! - `ledger.rs`: a file-backed [`WorkApplier`] for runs without Kubernetes.
//! - `proxy.rs`: the HTTP CONNECT proxy every connection to the hub may
//!   go through (air-gapped clusters), with `HTTPS_PROXY` / `NO_PROXY`.
//!
//! Autonomy: losing the hub never changes a running workload. The loop
//! only reconnects; nothing here deletes or rolls back anything.

pub mod hubs;
pub mod identity;
pub mod ledger;
pub mod proxy;
pub mod reconnect;
pub mod tls;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clawfed_proto::link::close::CloseReason;
use clawfed_proto::link::v1 as pb;
use clawfed_proto::link::v1::enrollment_client::EnrollmentClient;
use clawfed_proto::link::v1::spoke_link_client::SpokeLinkClient;
use clawfed_proto::link::v1::{hub_message, spoke_message};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use std::sync::atomic::AtomicU64;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use hubs::Hubs;
use identity::{Identity, IdentityError, IdentityStore, new_key_and_csr};
use reconnect::Reconnect;
use tls::{HubAddress, SwappableCert};

use crate::pressure::ApplyLimit;
use crate::tunnel::{HarnessDialer, Refusal, TunnelSettings, Tunnels};

/// An applier failed; the item is not acked and is retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ApplyError(pub String);

/// What applies work in the execution cluster.
#[async_trait]
pub trait WorkApplier: Send + Sync + 'static {
    /// Applies `work` idempotently and records its generation durably
    /// before returning, because the link acks when this returns Ok.
    async fn apply(&self, work: &pb::Work) -> Result<pb::WorkResult, ApplyError>;
    /// What is applied (target → generation), rebuilt from durable state.
    async fn applied(&self) -> Result<HashMap<String, i64>, ApplyError>;

    /// The current result of every target it holds and every current
    /// readiness verdict. The link sends them after each (re)connect,
    /// because reports in flight when a stream broke are lost, and the work
    /// they answer is acked and will not come again (reports are level
    /// based: the latest state, not a log).
    async fn current_reports(&self) -> Vec<pb::Report> {
        Vec::new()
    }

    /// True when the applier sends its own work results on the report
    /// channel (the Kubernetes executor does); the link then does not
    /// report them a second time.
    fn reports_results(&self) -> bool {
        false
    }

    /// The diagnostics of the Harness of a target it manages
    /// (`DiagnoseRequest`); an applier without Pods knows nothing.
    async fn diagnose(&self, req: &pb::DiagnoseRequest) -> pb::DiagnoseResult {
        pb::DiagnoseResult {
            request_id: req.request_id.clone(),
            checks: vec![pb::DiagnosticCheck {
                name: "harness".into(),
                status: "unknown".into(),
                detail: "this spoke runs no Harness Pods".into(),
            }],
            pod: String::new(),
        }
    }
}

/// Errors that end the link for good.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// No identity and no bootstrap token to enroll with.
    #[error("not enrolled and no bootstrap token given")]
    NoBootstrapToken,
    /// The hub refused enrollment for a reason retrying cannot fix.
    #[error("enrollment refused: {0}")]
    EnrollmentRefused(String),
    /// The hub revoked this cluster; it must be re-enrolled.
    #[error("the hub revoked this cluster: {0}")]
    Revoked(String),
    /// Identity storage failed.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// TLS could not be configured.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// Settings of the link.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// The hub's link address; several replicas: see [`Link::with_hubs`].
    pub hub: HubAddress,
    /// The hub CA (PEM) the spoke pins.
    pub ca_pem: String,
    pub cluster_name: String,
    /// Single-use token for the first start.
    pub bootstrap_token: Option<String>,
    pub version: String,
    pub capabilities: Vec<String>,
    /// Reconnect backoff: first delay and cap (full jitter in between);
    /// see `reconnect.rs` for when it grows.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

/// The spoke's link metrics.
#[derive(Debug, Clone, Default)]
pub struct SpokeMetrics {
    pub certificate_expiry_seconds: Gauge<f64, AtomicU64>,
    pub connected: Gauge,
    pub reconnects: Counter,
    pub work_applied: Counter,
    pub work_failed: Counter,
    /// 1 for the hub address of the open session (none while offline).
    pub connected_hub: Family<HubLabel, Gauge>,
}

/// The hub address a session is open to.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HubLabel {
    pub hub: String,
}

impl SpokeMetrics {
    /// Registers the metrics.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "clawfed_spoke_certificate_expiry_seconds",
            "Seconds until the spoke's client certificate expires",
            m.certificate_expiry_seconds.clone(),
        );
        registry.register(
            "clawfed_spoke_link_connected",
            "1 while a link session is open",
            m.connected.clone(),
        );
        registry.register(
            "clawfed_spoke_link_reconnects",
            "Link sessions started after the first",
            m.reconnects.clone(),
        );
        registry.register(
            "clawfed_spoke_work_applied",
            "Work items applied and acked",
            m.work_applied.clone(),
        );
        registry.register(
            "clawfed_spoke_work_failed",
            "Work items whose apply failed (retried)",
            m.work_failed.clone(),
        );
        registry.register(
            "clawfed_spoke_link_hub",
            "1 for the hub address (replica) the open link session is on",
            m.connected_hub.clone(),
        );
        m
    }
}

/// What the link's sessions have done so far, for whoever watches it
/// ([`Link::status`]): a health check, a test, a load generator timing
/// each spoke's reconnect after a hub restart. Counts start at zero when
/// the [`Link`] is built and only grow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStatus {
    /// A session is open: the hub answered Hello with Welcome and the
    /// session has not ended since.
    pub connected: bool,
    /// Sessions the hub welcomed.
    pub welcomes: u64,
    /// When the latest Welcome arrived.
    pub last_welcome: Option<tokio::time::Instant>,
    /// GoAways received, before or after a Welcome.
    pub go_aways: u64,
    /// Attempts and sessions that ended in failure (the hub unreachable,
    /// the stream broken, the hub silent, a revocation).
    pub failures: u64,
    /// Why the latest of them failed.
    pub last_failure: Option<String>,
    /// The hub address (`https://host:port`) of the open session.
    pub hub: Option<String>,
    /// Redirects the hub sent that the link followed.
    pub redirects: u64,
    /// How long the link waited (or waits) before its latest reconnect.
    pub last_wait: Option<Duration>,
    /// Session attempts started (dials), the first included.
    pub attempts: u64,
    /// When the latest welcomed session ended (not at shutdown).
    pub session_lost: Option<tokio::time::Instant>,
    /// When the first attempt after `session_lost` started (`None` until
    /// it has): how soon a spoke comes back after losing its hub.
    pub first_attempt_after_loss: Option<tokio::time::Instant>,
}

/// How a session ended.
#[derive(Debug)]
enum SessionEnd {
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
const REPLACED_MIN_WAIT: Duration = Duration::from_secs(10);

/// The wait after a `replaced` close: from `max(backoff_max,
/// REPLACED_MIN_WAIT)` to twice that, at `unit` in [0, 1) between (the
/// jitter). The spoke still comes back: when the newer process is gone,
/// this one is the cluster's spoke again.
fn replaced_wait(backoff_max: Duration, unit: f64) -> Duration {
    let base = backoff_max.max(REPLACED_MIN_WAIT);
    base + base.mul_f64(unit.clamp(0.0, 1.0))
}

/// The link.
#[derive(Clone)]
pub struct Link {
    config: LinkConfig,
    identities: Arc<dyn IdentityStore>,
    applier: Arc<dyn WorkApplier>,
    metrics: SpokeMetrics,
    status: watch::Sender<LinkStatus>,
    /// Tunneled connections the hub asks for (the data path).
    tunnels: Arc<Tunnels>,
    /// The heartbeat's applied digest from durable records (see
    /// [`Link::with_applied_digest`]); without one, the digest of what
    /// this process acked.
    applied_digest: Option<AppliedDigestSource>,
    /// How many targets are applied at once (see [`Link::with_apply_limit`]).
    apply_limit: Arc<ApplyLimit>,
    /// The hub addresses and which one is dialed next.
    hubs: Arc<std::sync::Mutex<Hubs>>,
    /// The window the first attempt after a lost session is spread over.
    reconnect_spread: Duration,
    /// What enrolment says about the cluster (see [`Link::with_cluster`]).
    cluster: ClusterIdentity,
}

/// Which Kubernetes cluster the spoke runs in, as enrolment reports it: the
/// hub refuses a second spoke in a cluster another name has (shared
/// clusters are unsupported) unless the operator forced it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// The UID of the cluster's kube-system namespace.
    pub kubernetes_uid: Option<String>,
    /// `--allow-shared-cluster`.
    pub allow_shared: bool,
}

/// Computes `Heartbeat.applied_digest` (`None` while not known yet).
pub type AppliedDigestSource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// The dialer of a spoke that serves no Harness (the file ledger in link
/// tests): every tunnel is refused, with the reason, at once.
struct NoHarness;

#[async_trait]
impl HarnessDialer for NoHarness {
    async fn dial(&self, open: &pb::TunnelOpen) -> Result<tokio::net::TcpStream, Refusal> {
        Err(Refusal::new(
            clawfed_proto::tunnel::reason::NOT_MANAGED,
            format!("this spoke runs no Harness ({})", open.target),
        ))
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("cluster", &self.config.cluster_name)
            .finish_non_exhaustive()
    }
}

fn digest(applied: &HashMap<String, i64>) -> String {
    let sorted: BTreeMap<_, _> = applied.iter().collect();
    let mut h = Sha256::new();
    for (t, g) in sorted {
        h.update(t.as_bytes());
        h.update(b"=");
        h.update(g.to_string().as_bytes());
        h.update(b"\n");
    }
    hex::encode(&h.finalize()[..16])
}

/// How long a closing session waits for applies in flight to finish (and
/// be acked) before it goes.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

type AppliedItem = (pb::Work, Result<pb::WorkResult, ApplyError>, Duration);

/// Applies in flight on a session: one per target at a time, so a target's
/// generations apply in order, and up to the [`ApplyLimit`] targets at
/// once, so one slow Harness does not hold up the others (or the readiness
/// reports behind them), and a throttling apiserver gets fewer.
struct Applies {
    limit: Arc<ApplyLimit>,
    running: tokio::task::JoinSet<AppliedItem>,
    busy: std::collections::HashSet<String>,
    /// The newest item waiting per target.
    queued: BTreeMap<String, pb::Work>,
}

/// Of two items of one target, the one to apply and the one it supersedes
/// (never applied, to be acked: work is level-based, so the newer
/// generation carries the other's intent). The same item delivered twice
/// supersedes nothing.
fn supersede(kept: pb::Work, incoming: pb::Work) -> (pb::Work, Option<pb::Work>) {
    if kept.generation > incoming.generation {
        (kept, Some(incoming))
    } else if kept.sequence == incoming.sequence {
        (incoming, None)
    } else {
        (incoming, Some(kept))
    }
}

/// Keeps the newest generation waiting per target; returns the one left
/// behind ([`supersede`]).
fn enqueue(queued: &mut BTreeMap<String, pb::Work>, work: pb::Work) -> Option<pb::Work> {
    let (kept, dropped) = match queued.remove(&work.target) {
        Some(waiting) => supersede(waiting, work),
        None => (work, None),
    };
    queued.insert(kept.target.clone(), kept);
    dropped
}

/// The ack of `work`: applied, or superseded before it was applied.
fn ack(work: &pb::Work) -> pb::SpokeMessage {
    pb::SpokeMessage {
        body: Some(spoke_message::Body::Ack(pb::Ack {
            sequence: work.sequence,
            target: work.target.clone(),
            generation: work.generation,
        })),
    }
}

/// The ack of an item a newer generation of its target superseded.
fn superseded_ack(work: &pb::Work) -> pb::SpokeMessage {
    tracing::debug!(target = %work.target, generation = work.generation, sequence = work.sequence, "link.superseded_acked");
    ack(work)
}

impl Applies {
    fn new(limit: Arc<ApplyLimit>) -> Self {
        Self {
            limit,
            running: tokio::task::JoinSet::new(),
            busy: Default::default(),
            queued: BTreeMap::new(),
        }
    }

    /// Starts `work`, or queues it behind its target. Returns the item it
    /// supersedes without applying it (an older generation of the target
    /// that was waiting, or `work` itself when a newer one waits): the
    /// caller acks it, or the hub would keep a send slot for it until the
    /// session ends.
    fn submit(&mut self, applier: &Arc<dyn WorkApplier>, work: pb::Work) -> Option<pb::Work> {
        if self.busy.contains(&work.target) || self.busy.len() >= self.limit.current() {
            return enqueue(&mut self.queued, work);
        }
        self.start(applier, work);
        None
    }

    fn start(&mut self, applier: &Arc<dyn WorkApplier>, work: pb::Work) {
        self.busy.insert(work.target.clone());
        let applier = applier.clone();
        self.running.spawn(async move {
            let started = Instant::now();
            let result = applier.apply(&work).await;
            (work, result, started.elapsed())
        });
    }

    /// `target` finished: start what waits, targets not already running.
    fn finished(&mut self, applier: &Arc<dyn WorkApplier>, target: &str) {
        self.busy.remove(target);
        let room = self.limit.current().saturating_sub(self.busy.len());
        let next: Vec<String> = self
            .queued
            .keys()
            .filter(|t| !self.busy.contains(*t))
            .take(room)
            .cloned()
            .collect();
        for t in next {
            if let Some(work) = self.queued.remove(&t) {
                self.start(applier, work);
            }
        }
    }
}

impl Link {
    /// A link that applies work with `applier` and keeps its identity in
    /// `identities`.
    pub fn new(
        config: LinkConfig,
        identities: Arc<dyn IdentityStore>,
        applier: Arc<dyn WorkApplier>,
        metrics: SpokeMetrics,
    ) -> Self {
        Self {
            identities,
            applier,
            metrics,
            status: watch::Sender::new(LinkStatus::default()),
            tunnels: Arc::new(Tunnels::new(Arc::new(NoHarness), TunnelSettings::default())),
            applied_digest: None,
            apply_limit: Arc::new(ApplyLimit::default()),
            hubs: Arc::new(std::sync::Mutex::new(Hubs::new(
                vec![config.hub.clone()],
                0,
            ))),
            reconnect_spread: reconnect::DEFAULT_SPREAD,
            cluster: ClusterIdentity::default(),
            config,
        }
    }

    /// Spreads the first attempt after a lost session over `spread`
    /// (bounded by the backoff cap; default [`reconnect::DEFAULT_SPREAD`]).
    pub fn with_reconnect_spread(mut self, spread: Duration) -> Self {
        self.reconnect_spread = spread;
        self
    }

    /// Dials any of `hubs` (hub replicas): a random one first, the next
    /// after each failed dial or lost session, and where a hub redirects.
    /// `hubs` replaces [`LinkConfig::hub`].
    pub fn with_hubs(self, hubs: Hubs) -> Self {
        *self.hubs.lock().unwrap_or_else(|p| p.into_inner()) = hubs;
        self
    }

    /// The address to dial now.
    fn current_hub(&self) -> HubAddress {
        self.hubs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .current()
            .clone()
    }

    fn hubs_mut(&self) -> std::sync::MutexGuard<'_, Hubs> {
        self.hubs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies up to `limit` targets at once; share it with the
    /// Kubernetes client's [`crate::pressure::PressureLayer`] so the
    /// apiserver's throttling sets it.
    pub fn with_apply_limit(mut self, limit: Arc<ApplyLimit>) -> Self {
        self.apply_limit = limit;
        self
    }

    /// Enrolment reports `cluster` (without it: nothing, and the hub does
    /// not check).
    pub fn with_cluster(mut self, cluster: ClusterIdentity) -> Self {
        self.cluster = cluster;
        self
    }

    /// Heartbeats carry `source`'s digest (`clawfed_proto::digest`) of
    /// the durable applied records; advertise
    /// `clawfed_proto::digest::CAPABILITY` with it so the hub compares.
    pub fn with_applied_digest(mut self, source: AppliedDigestSource) -> Self {
        self.applied_digest = Some(source);
        self
    }

    /// Serves the hub's tunnel opens with `tunnels`.
    pub fn with_tunnels(mut self, tunnels: Arc<Tunnels>) -> Self {
        self.tunnels = tunnels;
        self
    }

    /// Follows what the sessions do (Welcome, GoAway, failures). Updated
    /// in place, so a watcher that looks rarely costs the link nothing.
    pub fn status(&self) -> watch::Receiver<LinkStatus> {
        self.status.subscribe()
    }

    /// Takes the hub's redirect for the next attempt; without one (or
    /// with one that is not a link address) the next configured address.
    /// Returns whether a redirect is followed.
    fn follow(&self, from: &HubAddress, redirect: Option<&str>) -> bool {
        let Some(url) = redirect.filter(|u| !u.is_empty()) else {
            self.hubs_mut().advance();
            return false;
        };
        let taken = self.hubs_mut().redirect(url);
        match taken {
            Ok(kind) => {
                let known = matches!(kind, hubs::Redirect::Known(_));
                tracing::info!(hub = %from.url(), redirect = %url, known, "link.redirected");
                true
            }
            Err(error) => {
                tracing::warn!(hub = %from.url(), redirect = %url, %error, "link.redirect_refused");
                self.hubs_mut().advance();
                false
            }
        }
    }

    /// The reconnect rules over this link's hub addresses.
    fn reconnect(&self) -> Reconnect {
        Reconnect::new(
            self.config.backoff_min,
            self.config.backoff_max,
            self.reconnect_spread,
            self.hubs_mut().list().len(),
        )
    }

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
        let renewer = tokio::spawn(self.clone().renew_loop(
            mtls.clone(),
            cert.clone(),
            identity_tx,
            shutdown.clone(),
        ));
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
        // Revoked or shutting down: no tunnel outlives the link.
        self.tunnels.shutdown().await;
        result
    }

    /// The stored identity, or a new one from enrollment. `None` on shutdown.
    async fn ensure_identity(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Identity>, LinkError> {
        if let Some(identity) = self.identities.load().await? {
            tracing::info!(clusterId = %identity.cluster_id, notAfter = %identity.not_after, "link.identity_loaded");
            return Ok(Some(identity));
        }
        let token = self
            .config
            .bootstrap_token
            .clone()
            .ok_or(LinkError::NoBootstrapToken)?;
        let tls = tls::enroll_config(&self.config.ca_pem)?;
        let mut delays = self.reconnect();
        loop {
            match self.enroll(tls.clone(), &token).await {
                Ok(identity) => {
                    self.identities.save(&identity).await?;
                    tracing::info!(clusterId = %identity.cluster_id, "link.enrolled");
                    return Ok(Some(identity));
                }
                Err(Err(fatal)) => return Err(fatal),
                Err(Ok(transient)) => {
                    let wait = delays.after_failed_attempt(rand::random::<f64>());
                    let hub = self.current_hub().url();
                    self.hubs_mut().advance();
                    tracing::warn!(%hub, reason = %transient, retryInMs = wait.as_millis() as u64, "link.enroll_retry");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(None),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// One enrollment attempt: `Err(Ok(_))` may be retried, `Err(Err(_))`
    /// may not.
    async fn enroll(
        &self,
        tls: Arc<rustls::ClientConfig>,
        token: &str,
    ) -> Result<Identity, Result<String, LinkError>> {
        let (key_pem, csr_pem) = new_key_and_csr().map_err(|e| Err(e.into()))?;
        let channel = tls::channel(&self.current_hub(), tls)
            .await
            .map_err(|e| Ok(tls::connect_failure(&e)))?;
        let response = EnrollmentClient::new(channel)
            .enroll(pb::EnrollRequest {
                bootstrap_token: token.to_owned(),
                cluster_name: self.config.cluster_name.clone(),
                csr_pem,
                spoke_version: self.config.version.clone(),
                kubernetes_uid: self.cluster.kubernetes_uid.clone().unwrap_or_default(),
                allow_shared_cluster: self.cluster.allow_shared,
            })
            .await;
        let response = match response {
            Ok(r) => r.into_inner(),
            Err(status) => {
                return Err(if enroll_retryable(status.code()) {
                    Ok(status.message().to_owned())
                } else {
                    Err(LinkError::EnrollmentRefused(status.message().to_owned()))
                });
            }
        };
        Identity::new(response.cluster_id, key_pem, response.certificate_pem)
            .map_err(|e| Err(e.into()))
    }

    /// Renews at two thirds of the lifetime, stores the new identity,
    /// installs it for new connections and tells the session to move over.
    async fn renew_loop(
        self,
        mtls: Arc<rustls::ClientConfig>,
        cert: Arc<SwappableCert>,
        identity_tx: watch::Sender<Identity>,
        shutdown: CancellationToken,
    ) {
        loop {
            let current = identity_tx.borrow().clone();
            let wait = (current.renew_at() - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            // Each attempt gets a deadline well inside the remaining
            // lifetime: one call hanging through a hub stall must not
            // outlive the certificate (fault run finding 3).
            let left = (current.not_after - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            let attempt = renew_attempt_timeout(left);
            let outcome =
                match tokio::time::timeout(attempt, self.renew(mtls.clone(), &current)).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {attempt:?}")),
                };
            match outcome {
                Ok(renewed) => {
                    if let Err(e) = self.identities.save(&renewed).await {
                        tracing::error!(error = %e, "link.renew_store_failed");
                    } else if let Err(e) = cert.install(&renewed) {
                        tracing::error!(error = %e, "link.renew_install_failed");
                    } else {
                        tracing::info!(notAfter = %renewed.not_after, "link.renewed");
                        let _ = identity_tx.send(renewed);
                        continue;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "link.renew_failed"),
            }
            // Retry well before expiry.
            let left = (current.not_after - chrono::Utc::now())
                .to_std()
                .unwrap_or(Duration::ZERO);
            let retry = (left / 10).clamp(Duration::from_millis(500), Duration::from_secs(60));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(retry) => {}
            }
        }
    }

    async fn renew(
        &self,
        mtls: Arc<rustls::ClientConfig>,
        current: &Identity,
    ) -> Result<Identity, String> {
        let (key_pem, csr_pem) = new_key_and_csr().map_err(|e| e.to_string())?;
        // The replica the session is on (or will be next).
        let channel = tls::channel(&self.current_hub(), mtls)
            .await
            .map_err(|e| tls::connect_failure(&e))?;
        let response = SpokeLinkClient::new(channel)
            .renew(pb::RenewRequest { csr_pem })
            .await
            .map_err(|s| s.message().to_owned())?
            .into_inner();
        Identity::new(
            current.cluster_id.clone(),
            key_pem,
            response.certificate_pem,
        )
        .map_err(|e| e.to_string())
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
        let mut beat = tokio::time::interval(heartbeat);
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
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::TunnelOpen(open)) })) => {
                            self.tunnels.start(tunnel_channel.clone(), open);
                        }
                        Ok(Some(pb::HubMessage { body: Some(hub_message::Body::Diagnose(req)) })) => {
                            // Answered on its own task: a slow Pod never holds
                            // up the stream. The read inside is bounded.
                            let applier = self.applier.clone();
                            let out = out.clone();
                            tokio::spawn(async move {
                                let result = applier.diagnose(&req).await;
                                let _ = out.send(send(spoke_message::Body::DiagnoseResult(result))).await;
                            });
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
                _ = beat.tick() => {
                    if last_heard.elapsed() > heartbeat * 3 {
                        return SessionEnd::Failed("hub silent for three heartbeat intervals".into());
                    }
                    let expiry = identity.borrow().seconds_to_expiry();
                    self.metrics.certificate_expiry_seconds.set(expiry as f64);
                    let msg = pb::Heartbeat {
                        unix_millis: chrono::Utc::now().timestamp_millis() as u64,
                        applied_digest: match &self.applied_digest {
                            Some(source) => source().unwrap_or_default(),
                            None => digest(&applied),
                        },
                    };
                    if out.send(send(spoke_message::Body::Heartbeat(msg))).await.is_err() {
                        return SessionEnd::Failed("outbound stream closed".into());
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

    /// Waits (bounded) for applies in flight and acks those that finish.
    async fn drain(
        &self,
        applies: &mut Applies,
        out: &mpsc::Sender<pb::SpokeMessage>,
        applied: &mut HashMap<String, i64>,
    ) {
        let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
        while let Ok(Some(joined)) =
            tokio::time::timeout_at(deadline, applies.running.join_next()).await
        {
            if let Ok((work, result, elapsed)) = joined {
                self.finish_apply(work, result, elapsed, out, applied).await;
            }
        }
    }

    /// Acks and reports an applied item. Returns the item back when the
    /// apply failed (it is retried, never acked).
    async fn finish_apply(
        &self,
        work: pb::Work,
        result: Result<pb::WorkResult, ApplyError>,
        elapsed: Duration,
        out: &mpsc::Sender<pb::SpokeMessage>,
        applied: &mut HashMap<String, i64>,
    ) -> Option<pb::Work> {
        let send = |body| pb::SpokeMessage { body: Some(body) };
        match result {
            Ok(result) => {
                self.metrics.work_applied.inc();
                let entry = applied.entry(work.target.clone()).or_insert(0);
                *entry = (*entry).max(work.generation);
                tracing::info!(target = %work.target, generation = work.generation, sequence = work.sequence, durationMs = elapsed.as_millis() as u64, "link.applied");
                let _ = out.send(ack(&work)).await;
                if !self.applier.reports_results() {
                    let report = pb::Report {
                        target: work.target,
                        generation: work.generation,
                        body: Some(pb::report::Body::WorkResult(result)),
                    };
                    let _ = out.send(send(spoke_message::Body::Report(report))).await;
                }
                None
            }
            Err(e) => {
                // A transient failure: not acked, retried here and
                // re-delivered after a reconnect. Only a refusal (Ok with
                // applied = false) is a result the hub acts on.
                self.metrics.work_failed.inc();
                tracing::warn!(target = %work.target, generation = work.generation, error = %e, "link.apply_failed");
                Some(work)
            }
        }
    }
}

/// Whether an enrollment that failed with `code` may be tried again. The
/// hub refuses with a definite code (invalid, unauthenticated, already
/// enrolled); a connection that broke on the way (the hub shed it under
/// load, a replica died) fails in the transport with `Unknown` or
/// `Cancelled`, and the token is still good for another attempt.
fn enroll_retryable(code: tonic::Code) -> bool {
    use tonic::Code;
    matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted
    )
}

/// How long one renewal attempt may take: a quarter of the certificate's
/// remaining lifetime, between 1 s and 30 s, so several attempts fit in
/// the renewal window (a third of the lifetime).
fn renew_attempt_timeout(left: Duration) -> Duration {
    (left / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
}

/// A GoAway as how the session ended.
fn go_away(g: pb::GoAway) -> SessionEnd {
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
fn classify(status: tonic::Status, alert: &tls::ReceivedAlert) -> SessionEnd {
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

/// The Kubernetes executor as the link's applier.
#[async_trait]
impl WorkApplier for crate::exec::Executor {
    async fn apply(&self, work: &pb::Work) -> Result<pb::WorkResult, ApplyError> {
        crate::exec::Executor::apply(self, work)
            .await
            .map_err(|e| ApplyError(e.to_string()))
    }

    async fn applied(&self) -> Result<HashMap<String, i64>, ApplyError> {
        crate::exec::Executor::applied(self)
            .await
            .map_err(|e| ApplyError(e.to_string()))
    }

    fn reports_results(&self) -> bool {
        true
    }

    async fn current_reports(&self) -> Vec<pb::Report> {
        crate::exec::Executor::current_reports(self)
    }

    async fn diagnose(&self, req: &pb::DiagnoseRequest) -> pb::DiagnoseResult {
        crate::exec::Executor::diagnose(self, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(target: &str, generation: i64, sequence: u64) -> pb::Work {
        pb::Work {
            sequence,
            target: target.into(),
            generation,
            kind: "harness.apply".into(),
            spec: Vec::new(),
        }
    }

    /// Issue 31 item 3: an item left behind in the queue is handed back
    /// (for its ack), never silently dropped: the hub frees its send slot
    /// only on an ack.
    #[test]
    fn a_queued_item_a_newer_generation_replaces_is_handed_back() {
        let mut q = BTreeMap::new();
        assert!(enqueue(&mut q, work("t", 1, 10)).is_none());
        let dropped = enqueue(&mut q, work("t", 2, 11)).expect("gen 1 replaced");
        assert_eq!((dropped.generation, dropped.sequence), (1, 10));
        // An older one arriving after a newer waits is handed back itself.
        let dropped = enqueue(&mut q, work("t", 1, 12)).expect("older refused");
        assert_eq!(dropped.sequence, 12);
        assert!(enqueue(&mut q, work("other", 1, 13)).is_none());
        assert_eq!(q["t"].sequence, 11);
        // The same item again supersedes nothing (it would be acked unapplied).
        assert!(enqueue(&mut q, work("t", 2, 11)).is_none());
        let ack = superseded_ack(&dropped);
        assert!(matches!(
            ack.body,
            Some(spoke_message::Body::Ack(pb::Ack {
                sequence: 12,
                generation: 1,
                ..
            }))
        ));
    }

    #[test]
    fn digest_ignores_order() {
        let a: HashMap<_, _> = [("x".to_string(), 1), ("y".to_string(), 2)].into();
        let b: HashMap<_, _> = [("y".to_string(), 2), ("x".to_string(), 1)].into();
        assert_eq!(digest(&a), digest(&b));
        let c: HashMap<_, _> = [("y".to_string(), 3), ("x".to_string(), 1)].into();
        assert_ne!(digest(&a), digest(&c));
    }

    #[test]
    fn enrollment_retries_transport_failures_but_not_refusals() {
        use tonic::Code;
        for code in [
            Code::Unavailable,
            Code::Unknown,
            Code::Cancelled,
            Code::DeadlineExceeded,
        ] {
            assert!(enroll_retryable(code), "{code:?}");
        }
        for code in [
            Code::Unauthenticated,
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::PermissionDenied,
        ] {
            assert!(!enroll_retryable(code), "{code:?}");
        }
    }

    #[test]
    fn renewal_attempts_fit_several_times_in_the_renewal_window() {
        // A 45 s certificate renews with 15 s left: each attempt gets 3.75 s.
        let left = Duration::from_secs(15);
        assert!(renew_attempt_timeout(left) * 3 < left);
        // A day's certificate (8 h window): 30 s attempts.
        assert_eq!(
            renew_attempt_timeout(Duration::from_secs(8 * 3600)),
            Duration::from_secs(30)
        );
        assert_eq!(
            renew_attempt_timeout(Duration::ZERO),
            Duration::from_secs(1)
        );
    }

    fn classify_alone(status: tonic::Status) -> SessionEnd {
        classify(status, &tls::ReceivedAlert::default())
    }

    #[test]
    fn a_revoked_close_reason_is_a_revocation() {
        assert!(matches!(
            classify_alone(CloseReason::Revoked.status("cluster revoked")),
            SessionEnd::Revoked(m) if m == "cluster revoked"
        ));
    }

    #[test]
    fn the_word_revoked_without_a_reason_is_not_a_revocation() {
        for status in [
            tonic::Status::permission_denied("cluster revoked"),
            tonic::Status::unknown("transport error: received fatal alert: CertificateRevoked"),
        ] {
            assert!(matches!(classify_alone(status), SessionEnd::Failed(_)));
        }
    }

    #[test]
    fn a_replaced_close_is_told_apart() {
        assert!(matches!(
            classify_alone(CloseReason::Replaced.status("newer session")),
            SessionEnd::Replaced(m) if m == "replaced: newer session"
        ));
    }

    #[test]
    fn after_a_replaced_close_the_spoke_waits_long_with_jitter() {
        let short = Duration::from_millis(500);
        assert_eq!(replaced_wait(short, 0.0), REPLACED_MIN_WAIT);
        assert_eq!(replaced_wait(short, 0.5), REPLACED_MIN_WAIT * 3 / 2);
        assert_eq!(replaced_wait(short, 7.0), REPLACED_MIN_WAIT * 2);
        // The production cap (30 s) is longer: from there.
        let cap = Duration::from_secs(30);
        assert_eq!(replaced_wait(cap, 0.0), cap);
        assert!(replaced_wait(cap, 0.999) < cap * 2);
        // Far longer than any ordinary reconnect (full jitter under the cap).
        assert!(replaced_wait(short, 0.0) > short * 10);
    }

    #[test]
    fn a_go_away_carries_its_redirect() {
        let g = |url: &str| pb::GoAway {
            reason: "x".into(),
            retry_after_seconds: 2,
            redirect_url: url.into(),
        };
        assert!(matches!(
            go_away(g("https://b:2")),
            SessionEnd::GoAway(d, Some(u)) if d == Duration::from_secs(2) && u == "https://b:2"
        ));
        assert!(matches!(go_away(g("")), SessionEnd::GoAway(_, None)));
    }

    #[test]
    fn other_close_reasons_are_retried() {
        for reason in [CloseReason::ShuttingDown, CloseReason::CertificateExpired] {
            assert!(matches!(
                classify_alone(reason.status("x")),
                SessionEnd::Failed(m) if m.starts_with(reason.as_str())
            ));
        }
        assert!(matches!(
            classify_alone(tonic::Status::unavailable("down")),
            SessionEnd::Failed(_)
        ));
    }

    #[test]
    fn a_revoked_alert_on_the_connection_is_a_revocation() {
        // A call over a connection the hub refused fails in the transport
        // with a status that says so only in words; the alert itself was
        // noted by type on the connection.
        let alert = |description| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::AlertReceived(description),
            )
        };
        let transport = || tonic::Status::unknown("transport error");
        let revoked = tls::ReceivedAlert::default();
        revoked.note(&alert(rustls::AlertDescription::CertificateRevoked));
        assert!(matches!(
            classify(transport(), &revoked),
            SessionEnd::Revoked(_)
        ));
        let unknown_ca = tls::ReceivedAlert::default();
        unknown_ca.note(&alert(rustls::AlertDescription::UnknownCA));
        assert!(matches!(
            classify(transport(), &unknown_ca),
            SessionEnd::Failed(_)
        ));
        // A typed reason wins over what the connection saw.
        assert!(matches!(
            classify(CloseReason::ShuttingDown.status("x"), &revoked),
            SessionEnd::Failed(_)
        ));
    }
}
