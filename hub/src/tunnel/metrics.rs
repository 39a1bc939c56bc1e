//! Tunnel metrics, registered in the hub's Prometheus registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A refusal or failure reason.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// A direction: `to-harness` or `to-gateway`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabel {
    pub direction: &'static str,
}

/// The tunnel's metrics.
#[derive(Debug, Clone)]
pub struct TunnelMetrics {
    pub open: Gauge,
    pub bytes: Family<DirectionLabel, Counter>,
    pub failures: Family<ReasonLabel, Counter>,
    pub setup: Histogram,
    /// `Tunnel` streams refused because no open of their cluster waited.
    pub unpaired_refused: Counter,
    /// CONNECTs relayed to the replica holding their cluster's session.
    pub forwarded: Counter,
}

impl TunnelMetrics {
    /// Registers the tunnel metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            open: Gauge::default(),
            bytes: Family::default(),
            failures: Family::default(),
            setup: Histogram::new(exponential_buckets(0.0002, 2.0, 16)),
            unpaired_refused: Counter::default(),
            forwarded: Counter::default(),
        };
        // Every series at zero from the start, so `increase()` sees the first
        // failure and dashboards show 0 rather than no data.
        for reason in clawfed_proto::tunnel::reason::ALL {
            let _ = m.failures.get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            });
        }
        for direction in ["to-harness", "to-gateway"] {
            let _ = m.bytes.get_or_create(&DirectionLabel { direction });
        }
        registry.register(
            "occ_tunnel_open_connections",
            "Tunneled Gateway-to-Harness connections open now",
            m.open.clone(),
        );
        registry.register(
            "occ_tunnel_bytes",
            "Bytes moved through tunneled connections, by direction",
            m.bytes.clone(),
        );
        registry.register(
            "occ_tunnel_failures",
            "Tunnels refused or failed, by reason (clawfed_proto::tunnel::reason, or how a pump ended)",
            m.failures.clone(),
        );
        registry.register(
            "occ_tunnel_setup_seconds",
            "From a Gateway's CONNECT to the spoke's accept",
            m.setup.clone(),
        );
        registry.register(
            "occ_tunnel_unpaired_streams_refused",
            "Spoke Tunnel streams refused because no open of their cluster was waiting for one",
            m.unpaired_refused.clone(),
        );
        registry.register(
            "occ_tunnel_forwarded",
            "Gateway CONNECTs relayed to the replica holding their cluster's session",
            m.forwarded.clone(),
        );
        m
    }

    /// Counts a failure by reason.
    pub fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }
}
