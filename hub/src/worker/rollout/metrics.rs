//! `occ_agent_operation_duration_seconds`: deploy (request to Active or
//! Failed), stop, and Gateway ensure (one apply of a revision's Gateway
//! objects in the control cluster) durations.

/// Labels of `occ_agent_operation_duration_seconds`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct OperationLabels {
    /// `deploy` (deploy request to Active), `stop` or `gateway_ensure`.
    pub operation: String,
    /// `ok` or `failed`.
    pub result: String,
}

type OperationHistogram = prometheus_client::metrics::family::Family<
    OperationLabels,
    prometheus_client::metrics::histogram::Histogram,
    fn() -> prometheus_client::metrics::histogram::Histogram,
>;

/// Pipeline metrics.
#[derive(Debug, Clone)]
pub struct PipelineMetrics {
    pub operation_duration: OperationHistogram,
}

impl PipelineMetrics {
    /// Registers `occ_agent_operation_duration_seconds`.
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Self {
        let operation_duration: OperationHistogram =
            prometheus_client::metrics::family::Family::new_with_constructor(|| {
                prometheus_client::metrics::histogram::Histogram::new(
                    prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 16),
                )
            });
        // Every series from the start (empty histograms), so rates and
        // quantiles have a series before the first operation ends.
        for operation in ["deploy", "stop", "gateway_ensure"] {
            for result in ["ok", "failed"] {
                let _ = operation_duration.get_or_create(&OperationLabels {
                    operation: operation.to_owned(),
                    result: result.to_owned(),
                });
            }
        }
        registry.register(
            "occ_agent_operation_duration_seconds",
            "Agent operations: deploy (request to Active or Failed), stop, gateway_ensure (one apply of a Gateway's objects)",
            operation_duration.clone(),
        );
        Self { operation_duration }
    }

    pub(super) fn observe(&self, operation: &str, result: &str, seconds: f64) {
        self.operation_duration
            .get_or_create(&OperationLabels {
                operation: operation.to_owned(),
                result: result.to_owned(),
            })
            .observe(seconds);
    }
}
