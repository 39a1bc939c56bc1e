//! REST handlers of configurations.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::{Body, Caller, PathParams};
use super::{ApiResult, created, with_etag};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{Configuration, CreateConfiguration, List, UpdateConfiguration};

/// List configurations.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/configurations", tag = "configurations",
    params(("ns" = String, Path)), responses((status = 200, body = List<Configuration>)))]
pub(super) async fn list_configurations(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Json<List<Configuration>>> {
    Ok(Json(s.service.list_configurations(&p, &ns).await?.into()))
}

/// Create a configuration.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/configurations", tag = "configurations",
    params(("ns" = String, Path)), request_body = CreateConfiguration,
    responses((status = 201, body = Configuration), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(super) async fn create_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
    Body(req): Body<CreateConfiguration>,
) -> ApiResult<Response> {
    Ok(created(s.service.create_configuration(&p, &ns, req).await?))
}

/// Get a configuration.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/configurations/{name}", tag = "configurations",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Configuration), (status = 404, body = ErrorBody)))]
pub(super) async fn get_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    let c = s.service.get_configuration(&p, &ns, &name).await?;
    Ok(with_etag(c.version, c))
}

/// Replace a configuration (`version` must be the one last read).
#[utoipa::path(put, path = "/api/v1/namespaces/{ns}/configurations/{name}", tag = "configurations",
    params(("ns" = String, Path), ("name" = String, Path)), request_body = UpdateConfiguration,
    responses((status = 200, body = Configuration), (status = 409, body = ErrorBody)))]
pub(super) async fn update_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Body(req): Body<UpdateConfiguration>,
) -> ApiResult<Response> {
    let c = s.service.update_configuration(&p, &ns, &name, req).await?;
    Ok(with_etag(c.version, c))
}

/// Delete a configuration.
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}/configurations/{name}", tag = "configurations",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub(super) async fn delete_configuration(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    s.service.delete_configuration(&p, &ns, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
