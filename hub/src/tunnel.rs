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
//! - `forward.rs`: a CONNECT for a cluster whose session another replica
//!   holds goes to that replica's ingress.
//! - `harness_stream.rs`: the hub's own connection to a Harness (probes,
//!   chat), through its session or the holder's ingress.
//! - `replica_diagnose.rs`: `agents diagnose` on a replica without the
//!   cluster's session asks the holder, on its ingress.
//! - `probe.rs`: the hub's own request to a Harness without a
//!   control-cluster Gateway (embedded OpenClaw).
//! - `metrics.rs`: tunnel metrics.

pub mod broker;
pub mod forward;
pub mod harness_stream;
pub mod ingress;
pub mod metrics;
pub mod probe;
pub mod replica_diagnose;
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
    /// Serve TLS 1.3 with a certificate from the link CA (Gateways get the
    /// CA beside their credential, so the credential never travels in the
    /// clear); off only where something else encrypts the hop.
    pub tls: bool,
    /// Names and IPs on the ingress certificate (beyond the bound address
    /// and the advertised host, which are always on it).
    pub server_names: Vec<String>,
    /// Where the other hub replicas reach this replica's own ingress (not
    /// the Service in front of all of them): they forward it the CONNECTs
    /// for the clusters whose sessions this one holds. `None` derives
    /// `<scheme>://<bound address>` unless that address is unspecified.
    pub peer_url: Option<String>,
}

impl Default for TunnelConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8444)),
            advertise_url: None,
            max_per_revision: 256,
            // Each may hold a stream window (256 KiB) of a stalled peer's
            // bytes in the hub: 256 MiB per cluster at worst.
            max_per_cluster: 1024,
            open_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            route_ttl: Duration::from_secs(1),
            tls: true,
            server_names: vec!["localhost".into(), "127.0.0.1".into()],
            peer_url: None,
        }
    }
}

impl TunnelConfig {
    /// The names on the ingress certificate: the configured ones, the bound
    /// IP (unless unspecified) and the hosts of the advertised and peer URLs.
    pub fn certificate_names(&self, bound: std::net::SocketAddr) -> Vec<String> {
        let mut names = self.server_names.clone();
        if !bound.ip().is_unspecified() {
            names.push(bound.ip().to_string());
        }
        for url in [&self.advertise_url, &self.peer_url].into_iter().flatten() {
            let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
            let authority = rest.split('/').next().unwrap_or_default();
            let host = authority
                .rsplit_once(':')
                .map_or(authority, |(h, _)| h)
                .trim_matches(['[', ']']);
            if !host.is_empty() {
                names.push(host.to_owned());
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// Where other replicas reach this one's ingress, bound at `bound`.
    pub fn peer_url(&self, bound: std::net::SocketAddr) -> Option<String> {
        let scheme = if self.tls { "https" } else { "http" };
        match &self.peer_url {
            Some(url) => Some(url.clone()),
            None if bound.ip().is_unspecified() => None,
            None => Some(format!("{scheme}://{bound}")),
        }
    }
}

pub use clawfed_tunnel::Refusal;
