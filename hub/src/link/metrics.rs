//! Link metrics, registered in the hub's Prometheus registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A cluster label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

/// An outcome label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// Why a session was sent to another replica.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RedirectLabel {
    /// `balance` (moved to a less loaded replica) or `handoff` (this
    /// replica is shutting down).
    pub reason: String,
}

/// The link's metrics.
#[derive(Debug, Clone)]
pub struct LinkMetrics {
    pub connected_spokes: Gauge,
    pub handshakes: Family<ResultLabel, Counter>,
    pub sessions_shed: Counter,
    pub outbox_depth: Family<ClusterLabel, Gauge>,
    pub ack_latency: Histogram,
    pub last_seen_age: Family<ClusterLabel, Gauge<f64, AtomicU64>>,
    pub certificate_expiry: Family<ClusterLabel, Gauge<f64, AtomicU64>>,
    /// When each connected spoke's client certificate expires (Unix
    /// seconds): unlike `certificate_expiry`, measured at session open, it
    /// stays true while the session lasts, so `… - time()` is the time left.
    pub certificate_not_after: Family<ClusterLabel, Gauge<f64, AtomicU64>>,
    pub enrollments: Family<ResultLabel, Counter>,
    /// GoAways that named another replica, by why.
    pub redirects: Family<RedirectLabel, Counter>,
    /// Outbox reads by the sessions (a wake-up for an item already sent
    /// costs none, so this stays near one per item sent).
    pub outbox_reads: Counter,
    /// The data path's metrics.
    pub tunnel: crate::tunnel::metrics::TunnelMetrics,
}

impl LinkMetrics {
    /// Registers the link metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            connected_spokes: Gauge::default(),
            handshakes: Family::default(),
            sessions_shed: Counter::default(),
            outbox_depth: Family::default(),
            ack_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            last_seen_age: Family::default(),
            certificate_expiry: Family::default(),
            certificate_not_after: Family::default(),
            enrollments: Family::default(),
            redirects: Family::default(),
            outbox_reads: Counter::default(),
            tunnel: crate::tunnel::metrics::TunnelMetrics::register(registry),
        };
        registry.register(
            "occ_link_connected_spokes",
            "Spokes with a live link session",
            m.connected_spokes.clone(),
        );
        registry.register(
            "occ_link_handshakes",
            "TLS handshakes on the link port by result (rate = handshakes/s)",
            m.handshakes.clone(),
        );
        registry.register(
            "occ_link_sessions_shed",
            "Sessions refused with a retry-after because the hub was at capacity",
            m.sessions_shed.clone(),
        );
        registry.register(
            "occ_link_outbox_depth",
            "Unacked outbox items per cluster",
            m.outbox_depth.clone(),
        );
        registry.register(
            "occ_link_ack_latency_seconds",
            "Time from sending a work item to its ack",
            m.ack_latency.clone(),
        );
        registry.register(
            "occ_link_last_seen_age_seconds",
            "Seconds since each connected spoke was last heard",
            m.last_seen_age.clone(),
        );
        registry.register(
            "occ_link_certificate_expiry_seconds",
            "Seconds until the client certificate of each connected spoke expires",
            m.certificate_expiry.clone(),
        );
        registry.register(
            "occ_link_certificate_not_after_timestamp_seconds",
            "When the client certificate of each connected spoke expires (Unix seconds)",
            m.certificate_not_after.clone(),
        );
        registry.register(
            "occ_link_enrollments",
            "Enrollment attempts by result",
            m.enrollments.clone(),
        );
        registry.register(
            "occ_link_redirects",
            "GoAways that sent a spoke to another replica, by reason (balance, handoff)",
            m.redirects.clone(),
        );
        registry.register(
            "occ_link_outbox_reads",
            "Outbox reads by link sessions (compare with items sent)",
            m.outbox_reads.clone(),
        );
        m
    }
}
