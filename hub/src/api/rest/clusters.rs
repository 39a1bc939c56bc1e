//! REST handlers of execution clusters: listed, read, enrolled (bootstrap
//! tokens), approved, revoked, cordoned and drained.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::{Caller, OptionalBody, PathParams};
use super::{ApiResult, created};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{BootstrapTokenCreated, Cluster, CreateBootstrapToken, DrainRequest, List};

/// List enrolled execution clusters.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "clusters",
    responses((status = 200, body = List<Cluster>)))]
pub(super) async fn list_clusters(
    State(s): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<Json<List<Cluster>>> {
    Ok(Json(s.service.list_clusters(&p).await?.into()))
}

/// Get one cluster.
#[utoipa::path(get, path = "/api/v1/clusters/{name}", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 200, body = Cluster), (status = 404, body = ErrorBody)))]
pub(super) async fn get_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Cluster>> {
    Ok(Json(s.service.get_cluster(&p, &name).await?))
}

/// Create a single-use, expiring bootstrap token to enroll a cluster.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/bootstrap-tokens", tag = "clusters",
    params(("name" = String, Path, description = "The cluster's name: a DNS-1123 label.",
            min_length = 1, max_length = 63, pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")), request_body(content = Option<CreateBootstrapToken>),
    responses((status = 201, body = BootstrapTokenCreated), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn create_bootstrap_token(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
    OptionalBody(body): OptionalBody<CreateBootstrapToken>,
) -> ApiResult<Response> {
    Ok(created(
        s.service
            .create_bootstrap_token(&p, &name, body.or_default())
            .await?,
    ))
}

/// Approve a cluster's pending enrollment (tokens with `requireApproval`).
#[utoipa::path(post, path = "/api/v1/clusters/{name}/approve", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(super) async fn approve_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    s.service.approve_cluster(&p, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Revoke a cluster: its stream closes within a second and it cannot
/// reconnect until re-enrolled.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/revoke", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 200, body = Cluster), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub(super) async fn revoke_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Cluster>> {
    Ok(Json(s.service.revoke_cluster(&p, &name).await?))
}

/// Cordon a cluster: no new revision is placed there; what runs there
/// keeps running.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/cordon", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 200, body = Cluster), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub(super) async fn cordon_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Cluster>> {
    Ok(Json(s.service.cordon_cluster(&p, &name).await?))
}

/// Uncordon a cluster: it takes new revisions again; a running drain ends
/// (its moves in flight finish).
#[utoipa::path(post, path = "/api/v1/clusters/{name}/uncordon", tag = "clusters",
    params(("name" = String, Path)),
    responses((status = 200, body = Cluster), (status = 403, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub(super) async fn uncordon_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Cluster>> {
    Ok(Json(s.service.uncordon_cluster(&p, &name).await?))
}

/// Drain a cluster: cordon it and move each Agent running there to another
/// cluster, `parallelism` at a time, each stopped there (and the stop
/// confirmed) before it starts elsewhere. Answers at once with the
/// progress; `GET /clusters/{name}` follows it.
#[utoipa::path(post, path = "/api/v1/clusters/{name}/drain", tag = "clusters",
    params(("name" = String, Path)), request_body(content = Option<DrainRequest>),
    responses((status = 202, body = Cluster), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody, description = "This hub runs no pipeline")))]
pub(super) async fn drain_cluster(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(name): PathParams<String>,
    OptionalBody(body): OptionalBody<DrainRequest>,
) -> ApiResult<(StatusCode, Json<Cluster>)> {
    let cluster = s
        .service
        .drain_cluster(&p, &name, body.or_default())
        .await?;
    Ok((StatusCode::ACCEPTED, Json(cluster)))
}
