//! Kubernetes helpers the hub (Gateways in the control cluster) and the
//! spoke (Harness work in an execution cluster) share, so each rule is
//! written once.
//!
//! # Layout
//! - [`classify`]: which kube errors are worth a retry, and status checks
//!   (404, 403). Pure.
//! - [`quantity`]: the resource quantity rule and the map into
//!   k8s-openapi [`Quantity`](k8s_openapi::apimachinery::pkg::api::resource::Quantity)s. Pure.
//! - [`guardrails`]: a namespace's ResourceQuota and container-default
//!   LimitRange. Pure.
//! - [`security`]: the hardened Pod and container security context every
//!   clawfed workload runs with, and Localhost seccomp profiles. Pure.
//! - [`token`]: the projected, audience-bound ServiceAccount token a
//!   workload gets as its service principal credential. Pure.
//! - [`kubeconfig`]: a kubeconfig an operator names, loaded only with the
//!   apiserver's certificate verified.
//! - [`request`]: [`RequestError`], the one "a Kubernetes request failed"
//!   error (what was attempted on which object, and why it failed) the
//!   object helpers, the hub and the spoke wrap in their own error enums.
//! - [`object`]: delete-if-present and wait-until-gone against the
//!   apiserver, with their typed [`object::Error`].
//!
//! `clawfed-proto` stays free of k8s-openapi and kube; these live here.

pub mod classify;
pub mod guardrails;
pub mod kubeconfig;
pub mod object;
pub mod quantity;
pub mod request;
pub mod scheduling;
pub mod security;
pub mod token;

pub use classify::{is_forbidden, is_not_found, is_status, is_transient};
pub use request::RequestError;
