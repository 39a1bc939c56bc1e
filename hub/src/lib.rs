//! The clawfed hub.
//!
//! # Layout
//! - [`config`]: the YAML config file and its environment overrides.
//! - [`model`]: domain types (what the store keeps, what REST returns).
//! - [`auth`]: API tokens, roles, permission rules (pure).
//! - [`ratelimit`]: API request rate limits per caller and per tenant.
//! - [`quota`]: tenant quotas (Agents, running Agents, revisions an hour, credentials).
//! - [`store`]: the desired-state store trait; PostgreSQL and SQLite.
//! - [`service`]: the one service layer behind REST and gRPC.
//! - [`secrets`]: write-only Agent credentials sealed at rest (AES-256-GCM)
//!   and the key they are sealed with.
//! - [`api`]: REST (`/api/v1`, OpenAPI), gRPC admin, metrics, errors.
//! - [`worker`]: the durable work queue's worker.
//! - [`pipeline`]: the revision pipeline as a pure state machine.
//! - [`drain`], [`failover`]: when Agents move off a cluster (pure).
//! - [`runtime_config`]: the OpenClaw runtime's config file: the frozen Configuration with the keys clawfed owns (pure).
//! - [`gateway`]: each Agent's Gateway in the control cluster (kube).
//! - [`link`]: the spoke link (CA, enrollment, mTLS stream, outbox delivery).
//! - [`bundle`]: `clawfed-hub bundle`, the offline install bundle.
//! - [`server`]: wires everything together and runs until shutdown.
//! - [`wake`]: in-process wake-ups from the store to the loops waiting on it.
//! - [`watch`]: the watch API's fan-out of the store's event log to streams.
//! - [`audit_stream`]: the audit log as a stream resumable by cursor.
//! - [`client`]: the hub's REST API as one typed client (CLI, tests, benches).
//! - [`cli`]: the `clawfed` command-line client.

#![forbid(unsafe_code)]

pub mod api;
pub mod audit_stream;
pub mod auth;
pub mod bundle;
pub mod cli;
pub mod client;
pub mod compute_driver;
pub mod config;
pub mod drain;
pub mod failover;
pub mod gateway;
pub mod link;
pub mod model;
pub mod pipeline;
pub mod quota;
pub mod ratelimit;
pub mod runtime_config;
pub mod secrets;
pub mod server;
pub mod service;
pub mod store;
pub mod tunnel;
pub mod wake;
pub mod watch;
pub mod worker;
