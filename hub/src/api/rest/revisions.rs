//! REST handlers of Agent revisions: deploy (and rollback), stop, and the
//! revisions read back.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::extract::{Caller, OptionalBody, PathParams};
use super::{ApiResult, parse_number};
use crate::api::AppState;
use crate::api::error::{ApiError, ErrorBody};
use crate::model::{Agent, AgentRevision, DeployRequest, List};
use crate::service::ServiceError;

/// Deploy: freeze the draft (or, with `fromRevision`, an earlier revision)
/// into a new immutable revision. A retry with the same `Idempotency-Key`
/// returns the first call's revision (200 instead of 201).
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents/{name}/deploy", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    request_body(content = Option<DeployRequest>),
    responses((status = 201, body = AgentRevision), (status = 200, body = AgentRevision),
              (status = 400, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(super) async fn deploy(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    headers: HeaderMap,
    OptionalBody(body): OptionalBody<DeployRequest>,
) -> ApiResult<Response> {
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError(ServiceError::InvalidArgument {
                        field: "Idempotency-Key".into(),
                        reason: "must be visible ASCII".into(),
                    })
                })?
                .to_owned(),
        ),
    };
    let (revision, was_created) = s
        .service
        .deploy(&p, &ns, &name, body.or_default(), key)
        .await?;
    let status = if was_created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(revision)).into_response())
}

/// Stop an Agent.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents/{name}/stop", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = Agent), (status = 404, body = ErrorBody)))]
pub(super) async fn stop(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<Agent>> {
    Ok(Json(s.service.stop(&p, &ns, &name).await?))
}

/// List an Agent's revisions, oldest first.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/revisions", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = List<AgentRevision>), (status = 404, body = ErrorBody)))]
pub(super) async fn list_revisions(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<List<AgentRevision>>> {
    Ok(Json(s.service.list_revisions(&p, &ns, &name).await?.into()))
}

/// Get one revision.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/revisions/{number}", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), ("number" = i64, Path, minimum = 1)),
    responses((status = 200, body = AgentRevision), (status = 404, body = ErrorBody)))]
pub(super) async fn get_revision(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name, number)): PathParams<(String, String, String)>,
) -> ApiResult<Json<AgentRevision>> {
    let number = parse_number("number", &number)?;
    Ok(Json(s.service.get_revision(&p, &ns, &name, number).await?))
}
