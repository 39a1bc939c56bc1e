//! Prometheus metrics and the ops endpoints (`/metrics`, `/healthz`,
//! `/readyz`). Gauges that describe stored state are read from the store at
//! scrape time, so they are never stale and cost nothing between scrapes.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::link::metrics::ClusterLabel;
use crate::model::{ConnectionState, RevisionPhase};
use crate::store::Store;

mod process;

/// A revision phase label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

type HistogramFamily = Family<RouteLabels, Histogram, fn() -> Histogram>;

/// The hub's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    http_requests: Family<RequestLabels, Counter>,
    http_duration: HistogramFamily,
    agents: Gauge,
    work_pending: Gauge,
    work_oldest_age: Gauge<f64, AtomicU64>,
    /// Store-backed fleet gauges, for dashboards and alerts.
    fleet: FleetGauges,
    /// This process as one of the hub's replicas (`/readyz`).
    replica: ReplicaStatus,
}

/// This process as a hub replica: its id, and whether it holds what it
/// needs to serve (the store connection and the link CA). Until then
/// `/readyz` says no, so a load balancer sends it nothing.
#[derive(Debug, Default)]
struct ReplicaStatus {
    id: std::sync::OnceLock<String>,
    ready: std::sync::atomic::AtomicBool,
}

/// Gauges read from the store at scrape time (clusters, revisions, failed
/// work) plus the pipeline deadlines they are judged against.
#[derive(Debug, Default)]
struct FleetGauges {
    cluster_online: Family<ClusterLabel, Gauge>,
    revisions: Family<PhaseLabel, Gauge>,
    revision_stale: Family<PhaseLabel, Gauge<f64, AtomicU64>>,
    phase_deadline: Family<PhaseLabel, Gauge<f64, AtomicU64>>,
    work_failed: Gauge,
}

impl FleetGauges {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "occ_cluster_online",
            "1 while an enrolled, unrevoked cluster's spoke is connected, 0 while it is pending or offline",
            self.cluster_online.clone(),
        );
        registry.register(
            "occ_revisions",
            "Agent revisions in the store by phase",
            self.revisions.clone(),
        );
        registry.register(
            "occ_revision_oldest_update_age_seconds",
            "Per in-progress phase, seconds since its least recently updated revision was last updated",
            self.revision_stale.clone(),
        );
        registry.register(
            "occ_revision_phase_deadline_seconds",
            "The pipeline's deadline for each phase that has one (a pass past it fails the revision)",
            self.phase_deadline.clone(),
        );
        registry.register(
            "occ_work_failed",
            "Work items in the store that used their last attempt and failed",
            self.work_failed.clone(),
        );
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The registry, for other rooms to register their metrics in before
    /// the hub starts serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let http_requests = Family::<RequestLabels, Counter>::default();
        let http_duration: HistogramFamily =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16)));
        let agents = Gauge::default();
        let work_pending = Gauge::default();
        let work_oldest_age = Gauge::<f64, AtomicU64>::default();
        let fleet = FleetGauges::default();
        fleet.register(&mut registry);
        registry.register_collector(Box::new(process::ProcessCollector));
        registry.register(
            "occ_http_requests",
            "HTTP requests by method, route and status",
            http_requests.clone(),
        );
        registry.register(
            "occ_http_request_duration_seconds",
            "HTTP request latency by method and route",
            http_duration.clone(),
        );
        registry.register("occ_agents", "Agents in the store", agents.clone());
        registry.register(
            "occ_work_pending",
            "Work items pending or claimed",
            work_pending.clone(),
        );
        registry.register(
            "occ_work_oldest_pending_age_seconds",
            "How long the longest-waiting due work item (pending or claimed) has been due; items scheduled for later are not counted",
            work_oldest_age.clone(),
        );
        Self {
            registry,
            http_requests,
            http_duration,
            agents,
            work_pending,
            work_oldest_age,
            fleet,
            replica: ReplicaStatus::default(),
        }
    }

    /// Marks this replica ready to serve (the store is open and the link
    /// CA loaded): `/readyz` answers ok, naming `replica_id`.
    pub fn set_replica_ready(&self, replica_id: &str) {
        let _ = self.replica.id.set(replica_id.to_owned());
        self.replica
            .ready
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Publishes the pipeline's phase deadlines (`pipeline.phaseDeadlineSeconds`
    /// for pending, provisioning and preparing; `pipeline.readyDeadlineSeconds`
    /// for waiting-ready), so an alert compares a revision's staleness with
    /// the deadline this hub really applies.
    pub fn set_phase_deadlines(&self, phase: std::time::Duration, ready: std::time::Duration) {
        for (p, d) in [
            (RevisionPhase::Pending, phase),
            (RevisionPhase::Provisioning, phase),
            (RevisionPhase::Preparing, phase),
            (RevisionPhase::WaitingReady, ready),
        ] {
            self.fleet
                .phase_deadline
                .get_or_create(&PhaseLabel {
                    phase: p.as_str().to_owned(),
                })
                .set(d.as_secs_f64());
        }
    }

    fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.http_requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                method: method.to_owned(),
                route: route.to_owned(),
            })
            .observe(seconds);
    }

    /// Refreshes the store-backed gauges and renders the text format.
    pub async fn render(&self, store: &dyn Store) -> Result<String, crate::store::StoreError> {
        let fleet = store.fleet_summary(None).await?;
        let work = store.work_stats(Utc::now()).await?;
        self.agents.set(fleet.agents);
        self.work_pending.set(work.pending);
        self.work_oldest_age
            .set(work.oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()));
        self.refresh_fleet(store, &fleet).await?;
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).map_err(|e| {
            crate::store::StoreError::Corrupt {
                what: "metrics",
                detail: e.to_string(),
            }
        })?;
        Ok(out)
    }
}

impl Metrics {
    /// Refreshes the store-backed fleet gauges. Families are cleared first
    /// so a deleted cluster or an emptied phase leaves no stale series.
    async fn refresh_fleet(
        &self,
        store: &dyn Store,
        fleet: &crate::model::FleetSummary,
    ) -> Result<(), crate::store::StoreError> {
        let clusters = store.list_clusters().await?;
        let stale = store.revision_staleness(Utc::now()).await?;
        let g = &self.fleet;
        g.work_failed.set(fleet.work_failed);
        g.cluster_online.clear();
        for c in clusters {
            if c.connection_state == ConnectionState::Revoked {
                continue;
            }
            g.cluster_online
                .get_or_create(&ClusterLabel { cluster: c.name })
                .set(i64::from(c.connection_state == ConnectionState::Online));
        }
        // Every phase, 0 when it has no revision.
        for phase in RevisionPhase::ALL {
            let n = fleet.revisions_by_phase.get(phase.as_str()).copied();
            g.revisions
                .get_or_create(&PhaseLabel {
                    phase: phase.as_str().to_owned(),
                })
                .set(n.unwrap_or(0));
        }
        g.revision_stale.clear();
        for s in stale {
            g.revision_stale
                .get_or_create(&PhaseLabel { phase: s.phase })
                .set(s.oldest_update_age.as_secs_f64());
        }
        Ok(())
    }
}

/// Middleware recording `occ_http_requests_total` and the latency
/// histogram, labelled by route template (bounded cardinality).
pub async fn track(State(metrics): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(req).await;
    metrics.observe(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[derive(Clone)]
struct OpsState {
    metrics: Arc<Metrics>,
    store: Arc<dyn Store>,
}

/// The ops router: `/metrics`, `/healthz`, `/readyz`.
pub fn ops_router(metrics: Arc<Metrics>, store: Arc<dyn Store>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz_ops))
        .with_state(OpsState { metrics, store })
}

async fn metrics_handler(State(s): State<OpsState>) -> Response {
    match s.metrics.render(s.store.as_ref()).await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "metrics.render_failed");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
        }
    }
}

/// Liveness: the process answers.
pub async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz_ops(State(s): State<OpsState>) -> Response {
    readiness(s.store.as_ref(), &s.metrics).await
}

/// The header naming the replica that answered `/readyz`.
pub const REPLICA_HEADER: &str = "clawfed-replica";

/// Readiness: start-up finished (store open, link CA loaded) and the store
/// answers. The answer names this replica.
pub async fn readiness(store: &dyn Store, metrics: &Metrics) -> Response {
    if !metrics
        .replica
        .ready
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response();
    }
    let replica = metrics.replica.id.get().cloned().unwrap_or_default();
    match store.ping().await {
        Ok(()) => (StatusCode::OK, [(REPLICA_HEADER, replica)], "ok\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readyz.store_unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
        }
    }
}
