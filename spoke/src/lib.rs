//! The clawfed spoke: runs in an execution cluster, receives Harness work from
//! the hub over the link, applies it with the spoke's own least-privilege
//! in-cluster credentials, watches Pods and reports readiness.
//!
//! # Layout
//! - [`exec`]: the [`exec::Executor`]: decodes `link.v1.Work`, runs it,
//!   records the applied generation on the cluster, rebuilds after a restart.
//! - [`apply`]: Kubernetes objects for namespace and Harness work (typed
//!   k8s-openapi objects, server-side apply as `clawfed-spoke`), namespace
//!   resolution, the applied-generation ledger of older spokes.
//! - [`readiness`]: the watch-driven observer feeding the pure contract in
//!   `clawfed_proto::readiness`.
//! - [`provider`]: the `SandboxDriver` trait, the ordinary Deployment driver
//!   and a CRD-backed driver that owns its Harness through a custom resource.
//! - [`cleanup`]: stop / retire / namespace teardown ordering (pure plans and
//!   their runner).
//! - [`drift`]: watches what the spoke manages and re-applies its fields
//!   on drift, from the durable desired-state records.
//! - [`config`]: the spoke's execution settings.
//! - [`failover`]: the execution lease failover-enabled Harnesses run
//!   under, renewed over the link; they are fenced when it lapses.
//! - [`capacity`]: what the cluster can still take (Nodes and bound Pods,
//!   watched), reported to the hub for placement.
//! - [`link`]: the hub link: enrollment, the mTLS stream, renewal, reconnects.
//! - [`pressure`]: how many targets are applied at once, set by the
//!   apiserver's throttling answers.
//! - [`server`]: the spoke process: its flags ([`server::Options`]) and
//!   [`server::run`], which builds and runs everything above until shutdown.
//! - [`podproxy`]: bounded reads of Pod-private paths (startup status,
//!   diagnostics) through the apiserver's Pod proxy.

#![forbid(unsafe_code)]

pub mod apply;
pub mod capacity;
pub mod cleanup;
pub mod config;
pub mod drift;
pub mod exec;
pub mod failover;
pub mod link;
pub mod podproxy;
pub mod pressure;
pub mod provider;
pub mod readiness;
pub mod server;
pub mod tunnel;
