//! REST handlers of the hub's records: audit events and work items.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
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

/// Which audit events a stream carries, from where.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct AuditStreamParams {
    /// One tenant's events (absent: every namespace the caller may read).
    namespace: Option<String>,
    /// Stream the events after this cursor (an event's `cursor`, or the
    /// SSE `id`). Absent: only events from now on; `0`: the whole log. A
    /// `Last-Event-ID` header (an SSE client reconnecting) wins over it. A cursor
    /// never given out (the hub's store was replaced) is a 410.
    #[param(minimum = 0)]
    cursor: Option<i64>,
    /// `false`: end the stream once it has caught up with the log.
    follow: Option<bool>,
}

/// The audit log as Server-Sent Events, oldest first, resumable: each has
/// `id` = its cursor, `event` = `audit` and `data` = the AuditEvent as
/// JSON. A client that reconnects with the last `id` it received (as
/// `cursor` or `Last-Event-ID`) gets every later event once, none missed:
/// cursors are given in the order events were committed. A slow client is
/// never cut off; it only falls behind. A tenant token reads its own
/// namespace. The `clawfed-audit-after` response header names the cursor
/// the stream starts after. The stream's last event may be `error` (`unauthenticated`:
/// the token was revoked or expired; `unavailable`: the store failed,
/// resume from the last cursor).
#[utoipa::path(get, path = "/api/v1/audit/stream", tag = "audit", params(AuditStreamParams),
    responses(
        (status = 200, description = "The audit stream", content_type = "text/event-stream",
            body = String),
        (status = 403, body = ErrorBody),
        (status = 410, description = "The cursor was never given out: stream from 0, or \
            without a cursor", body = ErrorBody)))]
pub(super) async fn stream_audit(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<AuditStreamParams>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    use crate::audit_stream::AuditFrame;
    use axum::response::sse::{Event, KeepAlive, Sse};
    // A reconnecting SSE client repeats its URL and adds the header.
    let cursor = super::fleet::last_event_id(&headers)?.or(q.cursor);
    let subscription = s
        .service
        .stream_audit(&p, q.namespace.as_deref(), cursor, q.follow.unwrap_or(true))
        .await?;
    let after = subscription.after();
    let events = futures::StreamExt::map(subscription.into_stream(), |frame| {
        let error = |code: &str, message: String| {
            Event::default()
                .event("error")
                .json_data(serde_json::json!({ "error": { "code": code, "message": message } }))
        };
        // Serializing these types cannot fail; an empty event if it did.
        let event = match frame {
            AuditFrame::Event(e) => Event::default()
                .id(e.cursor.unwrap_or_default().to_string())
                .event("audit")
                .json_data(&e),
            AuditFrame::Unauthenticated(reason) => error("unauthenticated", reason),
            AuditFrame::Unavailable(reason) => error("unavailable", reason),
        };
        Ok::<_, std::convert::Infallible>(event.unwrap_or_default())
    });
    Ok((
        [(crate::audit_stream::AFTER_HEADER, after.to_string())],
        Sse::new(events).keep_alive(KeepAlive::default()),
    )
        .into_response())
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
