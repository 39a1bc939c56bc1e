//! The hub's end of the data path: a Gateway in the control cluster reaches
//! its revision's Harness in an execution cluster that accepts no inbound
//! connection, through the spoke's outbound link.
//!
//! ```text
//! Gateway --CONNECT--> ingress --TunnelOpen (link)--> spoke --> Harness
//!                         ^---- Tunnel stream (one HTTP/2 stream per connection)
//! ```
//!
//! # Layout
//! - `route.rs`: which Harness a transport credential may reach (store
//!   lookups, refusals with reasons from `clawfed_proto::tunnel::reason`).
//! - `broker.rs`: asks a cluster's session to open a tunnel, pairs the
//!   spoke's `Tunnel` stream with the waiting connection, enforces the
//!   per-revision and per-cluster connection limits.
//! - `ingress.rs`: the listener Gateways dial (HTTP CONNECT).
//! - `metrics.rs`: tunnel metrics.

pub mod broker;
pub mod ingress;
pub mod metrics;
pub mod route;

use std::net::SocketAddr;
use std::time::Duration;

/// Settings of the tunnel ingress.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// Where Gateways connect.
    pub addr: SocketAddr,
    /// The URL Gateways are told (`CLAWFED_TUNNEL_PROXY`); `None` derives
    /// `http://<bound address>`.
    pub advertise_url: Option<String>,
    /// Tunneled connections open at most per revision.
    pub max_per_revision: usize,
    /// Tunneled connections open at most per execution cluster.
    pub max_per_cluster: usize,
    /// How long the spoke may take to connect the Harness.
    pub open_timeout: Duration,
    /// A connection without a byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// How long a credential's route is reused before the store is asked
    /// again (a retired revision or a revoked cluster is noticed within it).
    pub route_ttl: Duration,
}

impl Default for TunnelConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8444)),
            advertise_url: None,
            max_per_revision: 256,
            max_per_cluster: 4096,
            open_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            route_ttl: Duration::from_secs(1),
        }
    }
}

pub use clawfed_tunnel::Refusal;
