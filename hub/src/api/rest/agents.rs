//! REST handlers of Agents' drafts.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::extract::{Body, Caller, PathParams};
use super::{ApiResult, created, with_etag};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{Agent, CreateAgent, List, UpdateAgent};

/// List Agents.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents", tag = "agents",
    params(("ns" = String, Path)), responses((status = 200, body = List<Agent>)))]
pub(super) async fn list_agents(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Json<List<Agent>>> {
    Ok(Json(s.service.list_agents(&p, &ns).await?.into()))
}

/// Create an Agent draft.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents", tag = "agents",
    params(("ns" = String, Path)), request_body = CreateAgent,
    responses((status = 201, body = Agent), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(super) async fn create_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(ns): PathParams<String>,
    Body(req): Body<CreateAgent>,
) -> ApiResult<Response> {
    Ok(created(s.service.create_agent(&p, &ns, req).await?))
}

/// Get an Agent.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Agent), (status = 404, body = ErrorBody)))]
pub(super) async fn get_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    let a = s.service.get_agent(&p, &ns, &name).await?;
    Ok(with_etag(a.version, a))
}

/// Replace an Agent's draft spec (`version` must be the one last read).
#[utoipa::path(put, path = "/api/v1/namespaces/{ns}/agents/{name}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)), request_body = UpdateAgent,
    responses((status = 200, body = Agent), (status = 400, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(super) async fn update_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Body(req): Body<UpdateAgent>,
) -> ApiResult<Response> {
    let a = s.service.update_agent(&p, &ns, &name, req).await?;
    Ok(with_etag(a.version, a))
}

/// Delete a stopped Agent and its revisions.
#[utoipa::path(delete, path = "/api/v1/namespaces/{ns}/agents/{name}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn delete_agent(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    s.service.delete_agent(&p, &ns, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
