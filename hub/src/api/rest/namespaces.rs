//! REST handlers of namespaces (tenants).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::{Body, Caller, PathParams};
use super::{ApiResult, created, with_etag};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{CreateNamespace, List, Namespace};
use crate::quota::TenantQuotaStatus;

/// List the namespaces the caller may see.
#[utoipa::path(get, path = "/api/v1/namespaces", tag = "namespaces",
    responses((status = 200, body = List<Namespace>), (status = 401, body = ErrorBody)))]
pub(super) async fn list_namespaces(
    State(s): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<Json<List<Namespace>>> {
    Ok(Json(s.service.list_namespaces(&p).await?.into()))
}

/// Create a namespace (installation admins).
#[utoipa::path(post, path = "/api/v1/namespaces", tag = "namespaces", request_body = CreateNamespace,
    responses((status = 201, body = Namespace), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn create_namespace(
    State(s): State<AppState>,
    Caller(p): Caller,
    Body(req): Body<CreateNamespace>,
) -> ApiResult<Response> {
    Ok(created(s.service.create_namespace(&p, req).await?))
}

/// Get a namespace.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 200, body = Namespace), (status = 404, body = ErrorBody)))]
pub(super) async fn get_namespace(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Response> {
    let n = s.service.get_namespace(&p, &ns).await?;
    Ok(with_etag(n.version, n))
}

/// A namespace's quotas: each limit (`quotas` in the hub's configuration;
/// absent: none) and what the tenant has in use.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/quota", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 200, body = TenantQuotaStatus), (status = 404, body = ErrorBody)))]
pub(super) async fn get_quota(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Json<TenantQuotaStatus>> {
    Ok(Json(s.service.quota(&p, &ns).await?))
}

/// Delete an empty namespace: 204 when it is gone, 202 when its teardown in
/// the execution clusters was queued (it shows state `deleting`).
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}", tag = "namespaces",
    params(("ns" = String, Path)),
    responses((status = 204), (status = 202), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn delete_namespace(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<StatusCode> {
    Ok(if s.service.delete_namespace(&p, &ns).await? {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::ACCEPTED
    })
}
