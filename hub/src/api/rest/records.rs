//! REST handlers of the hub's records: audit events and work items.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::ApiResult;
use super::extract::{Caller, Params, PathParams};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::{AuditEvent, List, WorkItem};

/// Filters of the audit listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct AuditParams {
    namespace: Option<String>,
    /// At most this many events (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// Audit events, newest first.
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", params(AuditParams),
    responses((status = 200, body = List<AuditEvent>), (status = 403, body = ErrorBody)))]
pub(super) async fn list_audit(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<AuditParams>,
) -> ApiResult<Json<List<AuditEvent>>> {
    Ok(Json(
        s.service
            .list_audit(&p, q.namespace.as_deref(), q.limit)
            .await?
            .into(),
    ))
}

/// Filters of the work listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct WorkParams {
    namespace: Option<String>,
    /// pending, claimed, done or failed.
    #[param(value_type = Option<crate::model::WorkState>)]
    state: Option<String>,
    /// At most this many items (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// Work items, newest first, with their last errors.
#[utoipa::path(get, path = "/api/v1/work", tag = "work", params(WorkParams),
    responses((status = 200, body = List<WorkItem>), (status = 400, body = ErrorBody)))]
pub(super) async fn list_work(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<WorkParams>,
) -> ApiResult<Json<List<WorkItem>>> {
    Ok(Json(
        s.service
            .list_work(&p, q.namespace.as_deref(), q.state.as_deref(), q.limit)
            .await?
            .into(),
    ))
}

/// One work item.
#[utoipa::path(get, path = "/api/v1/work/{id}", tag = "work", params(("id" = String, Path)),
    responses((status = 200, body = WorkItem), (status = 404, body = ErrorBody)))]
pub(super) async fn get_work(
    State(s): State<AppState>,
    Caller(p): Caller,
    PathParams(id): PathParams<String>,
) -> ApiResult<Json<WorkItem>> {
    Ok(Json(s.service.get_work(&p, &id).await?))
}
