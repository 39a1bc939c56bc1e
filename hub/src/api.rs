//! The hub's API surfaces, all thin adapters over [`crate::service::Service`].
//!
//! # Layout
//! - `error.rs`: the ONE mapping of service errors to HTTP statuses and gRPC
//!   codes.
//! - `rest.rs`: REST under `/api/v1` (axum) and its OpenAPI document.
//! - `grpc.rs`: the `clawfed.admin.v1` gRPC service (tonic).
//! - `metrics.rs`: Prometheus metrics and the ops listener (`/metrics`,
//!   `/healthz`, `/readyz`).
//! - `tls.rs`: TLS for REST and gRPC from certificate files reloaded on
//!   change, and client-certificate authentication.
//! - `ui.rs`: the web fleet view's embedded assets at `/ui` (the page uses
//!   the REST API and the SSE watch like any client).

pub mod detach;
pub mod error;
pub mod grpc;
pub mod metrics;
pub mod rest;
pub mod tls;
pub mod ui;

use std::sync::Arc;

use crate::service::Service;

/// Shared state of the API handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    pub service: Service,
    pub metrics: Arc<metrics::Metrics>,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
}
