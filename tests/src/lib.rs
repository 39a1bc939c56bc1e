//! Shared helpers for clawfed's integration tests.
//!
//! # Layout
//! - [`control_env`]: the hub's RBAC, Gateway storage and edge Gateway in the control cluster.
//! - [`faults`]: the seeded fault-injection run (hub, spokes, PostgreSQL, partitions) and its invariants.
//! - [`db`]: throwaway SQLite files and PostgreSQL schemas for store tests.
//! - [`hub`]: an in-process hub on `127.0.0.1:0` with its REST and gRPC clients.
//! - [`link`]: in-process spokes that enroll with and connect to a test hub.
//! - [`netns`]: a network namespace with a veth pair, for partitions.
//! - [`properties`]: property-based tests of the pure cores (suite and bench).
//! - [`procs`]: `clawfed-hub` / `clawfed-spoke` child processes.
//! - [`spoke_env`]: the spoke's own RBAC and ServiceAccount client in a test cluster.
//! - [`tunnel`]: a Gateway's CONNECT to the hub's tunnel ingress.
//! - [`kube_env`]: attach to the real Kubernetes test clusters (`e2e/cluster.sh`).

pub mod control_env;
pub mod db;
pub mod faults;
pub mod hub;
pub mod kube_env;
pub mod link;
pub mod netns;
pub mod procs;
pub mod properties;
pub mod spoke_env;
pub mod tunnel;
