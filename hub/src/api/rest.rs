//! REST under `/api/v1`. Each handler is registered together with its
//! OpenAPI operation (utoipa-axum `routes!`), so `/openapi.json` is
//! generated from the handlers themselves and cannot drift from them.
//!
//! # Layout
//! - `openapi.rs`: the document's frame (info, security, the error answers
//!   every operation can give) and the document as served.
//! - `extract.rs`: the extractors every handler uses (caller, bodies,
//!   parameters), each refusal a JSON error.
//! - One file of handlers per resource: `namespaces.rs`,
//!   `configurations.rs`, `agents.rs`, `revisions.rs`, `credentials.rs`,
//!   `runtime.rs` (diagnose, chat), `clusters.rs`, `fleet.rs` (counts,
//!   watch), `records.rs` (audit, work).

mod agents;
mod clusters;
mod configurations;
mod credentials;
mod extract;
mod fleet;
mod namespaces;
mod openapi;
mod records;
mod revisions;
mod runtime;

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use crate::service::ServiceError;

pub use extract::{Body, BodyRejection, Caller, OptionalBody, Params, PathParams, SecretBody};
pub use openapi::served_document;

use openapi::{ApiDoc, ErrorResponses};

type ApiResult<T> = Result<T, ApiError>;

/// The REST router (without state) and its OpenAPI document.
pub fn router() -> (axum::Router<AppState>, utoipa::openapi::OpenApi) {
    let router = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(
            namespaces::list_namespaces,
            namespaces::create_namespace
        ))
        .routes(routes!(
            namespaces::get_namespace,
            namespaces::delete_namespace
        ))
        .routes(routes!(namespaces::get_quota))
        .routes(routes!(
            configurations::list_configurations,
            configurations::create_configuration
        ))
        .routes(routes!(
            configurations::get_configuration,
            configurations::update_configuration,
            configurations::delete_configuration
        ))
        .routes(routes!(agents::list_agents, agents::create_agent))
        .routes(routes!(
            agents::get_agent,
            agents::update_agent,
            agents::delete_agent
        ))
        .routes(routes!(revisions::deploy))
        .routes(routes!(revisions::stop))
        .routes(routes!(revisions::list_revisions))
        .routes(routes!(revisions::get_revision))
        .routes(routes!(credentials::list_credentials))
        .routes(routes!(
            credentials::set_credential,
            credentials::delete_credential
        ))
        .routes(routes!(credentials::list_revision_credentials))
        .routes(routes!(runtime::diagnose))
        .routes(routes!(runtime::chat))
        .routes(routes!(clusters::list_clusters))
        .routes(routes!(clusters::get_cluster))
        .routes(routes!(clusters::create_bootstrap_token))
        .routes(routes!(clusters::revoke_cluster))
        .routes(routes!(clusters::cordon_cluster))
        .routes(routes!(clusters::uncordon_cluster))
        .routes(routes!(clusters::drain_cluster))
        .routes(routes!(clusters::approve_cluster))
        .routes(routes!(fleet::fleet))
        .routes(routes!(fleet::watch))
        .routes(routes!(records::list_audit))
        .routes(routes!(records::stream_audit))
        .routes(routes!(records::list_work))
        .routes(routes!(records::get_work));
    // After the routes: a modifier in `#[openapi]` runs before any path
    // is in the document.
    let (router, mut doc) = router.split_for_parts();
    ErrorResponses.modify(&mut doc);
    (router, doc)
}

fn created<T: serde::Serialize>(value: T) -> Response {
    (StatusCode::CREATED, Json(value)).into_response()
}

fn with_etag<T: serde::Serialize>(version: i64, value: T) -> Response {
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        headers.insert(header::ETAG, v);
    }
    (headers, Json(value)).into_response()
}

fn parse_number(field: &str, value: &str) -> ApiResult<i64> {
    value.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        ApiError(ServiceError::InvalidArgument {
            field: field.into(),
            reason: format!("{value:?} is not a positive integer"),
        })
    })
}
