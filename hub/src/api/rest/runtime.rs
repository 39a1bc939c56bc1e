//! REST handlers of the calls that reach an Agent's running revision:
//! diagnose and chat.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::ApiResult;
use super::extract::{Body, Caller, Params, PathParams};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{ChatAnswer, ChatRequest, Diagnosis};

/// Which revision to diagnose.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct DiagnoseParams {
    /// The revision number; absent: the active revision (else the latest).
    #[param(minimum = 1)]
    revision: Option<i64>,
}

/// Bounded diagnostics of one revision of the Agent (`revision`, else the
/// active, else the latest): its Harness Pod (read by the spoke) and its
/// Gateway Pod (read by the hub). Missing Pods and unreachable endpoints
/// are `unknown` checks; this never changes the deployment's status.
#[utoipa::path(get, path = "/api/v1/namespaces/{ns}/agents/{name}/diagnose", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path), DiagnoseParams),
    responses((status = 200, body = Diagnosis), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub(super) async fn diagnose(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Params(q): Params<DiagnoseParams>,
) -> ApiResult<Json<Diagnosis>> {
    Ok(Json(s.service.diagnose(&p, &ns, &name, q.revision).await?))
}

/// One chat message to the Agent's active revision, answered by its
/// runtime: the hub sends it through the revision's spoke (embedded
/// OpenClaw) or to its Gateway (dedicated), with the revision's gateway
/// token, in `conversation` (history is kept per conversation). Needs
/// deploy rights; audited as `agent.chat` without the message. 409 when the
/// Agent has no active revision or the runtime answered with an error
/// (its status and body in the message); 503 when it cannot be reached.
#[utoipa::path(post, path = "/api/v1/namespaces/{ns}/agents/{name}/chat", tag = "agents",
    params(("ns" = String, Path), ("name" = String, Path)),
    request_body = ChatRequest,
    responses((status = 200, body = ChatAnswer), (status = 400, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub(super) async fn chat(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    Body(req): Body<ChatRequest>,
) -> ApiResult<Json<ChatAnswer>> {
    Ok(Json(s.service.chat(&p, &ns, &name, req).await?))
}
