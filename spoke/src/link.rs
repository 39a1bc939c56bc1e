//! The spoke's side of the link: it dials OUT to the hub (the execution
//! cluster needs no inbound port), enrolls once with a bootstrap token,
//! then keeps one mTLS stream open, applies work in order, acks only after
//! the applier recorded it durably, and renews its certificate at two
//! thirds of its lifetime without dropping work.
//!
//! # Layout
//! - this file: [`Link`], its settings, status and metrics, and the
//!   [`WorkApplier`] it applies work with.
//! - `session.rs`: the connect / reconnect loop and one session.
//! - `enroll.rs`: enrolment and the certificate's renewal.
//! - `applies.rs`: the applies in flight on a session and their acks.
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

mod applies;
mod enroll;
mod fence;
pub mod hubs;
pub mod identity;
pub mod ledger;
pub mod proxy;
pub mod reconnect;
mod session;
pub mod tls;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawfed_proto::link::v1 as pb;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use tokio::sync::watch;

use hubs::Hubs;
use identity::{IdentityError, IdentityStore};
use reconnect::Reconnect;
use tls::HubAddress;

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
    /// The failover-enabled Harnesses it runs and those it fenced (an
    /// applier without Pods has none).
    async fn failover(&self) -> Result<crate::failover::FailoverState, ApplyError> {
        Ok(Default::default())
    }

    /// Fences `target` (its execution lease lapsed); false when there was
    /// nothing to fence.
    async fn fence(&self, _target: &str) -> Result<bool, ApplyError> {
        Ok(false)
    }

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
    /// The cluster's labels, sent in every Hello (see [`Link::with_labels`]).
    labels: std::collections::BTreeMap<String, String>,
    /// Capacity reports (see [`Link::with_capacity`]).
    capacity: Option<crate::capacity::CapacityWatch>,
    /// The execution lease failover-enabled Harnesses run under.
    lease: Arc<crate::failover::ExecutionLease>,
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
            labels: Default::default(),
            capacity: None,
            lease: Arc::new(crate::failover::ExecutionLease::new(
                tokio::time::Instant::now(),
            )),
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

    /// Every Hello reports `labels` as the cluster's labels (the hub
    /// replaces what it held); checked with
    /// `clawfed_proto::capacity::check_labels` when the flags are read.
    pub fn with_labels(mut self, labels: std::collections::BTreeMap<String, String>) -> Self {
        self.labels = labels;
        self
    }

    /// Hands each Welcome's node selector to `capacity` and sends its
    /// reports: the current one after Welcome, then each change.
    pub fn with_capacity(mut self, capacity: crate::capacity::CapacityWatch) -> Self {
        self.capacity = Some(capacity);
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
}

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

    async fn failover(&self) -> Result<crate::failover::FailoverState, ApplyError> {
        self.failover_state()
            .await
            .map_err(|e| ApplyError(e.to_string()))
    }

    async fn fence(&self, target: &str) -> Result<bool, ApplyError> {
        crate::exec::Executor::fence(self, target)
            .await
            .map_err(|e| ApplyError(e.to_string()))
    }
}

#[cfg(test)]
mod tests;
