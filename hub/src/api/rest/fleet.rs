//! REST handlers of the fleet as a whole: its counts and the watch stream
//! (Server-Sent Events).

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use super::ApiResult;
use super::extract::{Caller, Params};
use crate::api::AppState;
use crate::api::error::ErrorBody;
use crate::model::FleetSummary;
use crate::service::ServiceError;

/// Fleet-wide counts over what the caller may read.
#[utoipa::path(get, path = "/api/v1/fleet", tag = "fleet",
    responses((status = 200, body = FleetSummary)))]
pub(super) async fn fleet(
    State(s): State<AppState>,
    Caller(p): Caller,
) -> ApiResult<Json<FleetSummary>> {
    Ok(Json(s.service.fleet_summary(&p).await?))
}

/// Where a watch starts and whether it follows.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct WatchParams {
    /// Stream the events after this cursor (an event's `cursor`, or the
    /// SSE `id`). Absent: only events from now on; `0`: every kept event.
    /// A `Last-Event-ID` header (an SSE client reconnecting) wins over it. A cursor
    /// older than the oldest kept event, or never given out, is a 410.
    #[param(minimum = 0)]
    cursor: Option<i64>,
    /// `false`: end the stream once it has caught up with the log.
    follow: Option<bool>,
}

/// Watch events as Server-Sent Events: each has `id` = its cursor,
/// `event` = its kind (`cluster.connected`, `cluster.offline`,
/// `cluster.revoked`, `cluster.scheduling`, `revision.phase`, `readiness`,
/// `work.failed`) and `data` = the event as JSON (`cursor`, `at`,
/// `namespace`, `cluster`, `kind`, `body`; bodies: ClusterEvent,
/// SchedulingEvent, RevisionPhaseEvent,
/// ReadinessEvent, WorkFailedEvent). A tenant token sees its own
/// namespace's events and those of the clusters its revisions are placed
/// on. A client that leaves its stream's buffer full is cut off with a
/// final `relist` event (RelistEvent); it then re-lists, or watches again
/// from the cursor of the last event it received.
#[utoipa::path(get, path = "/api/v1/watch", tag = "watch", params(WatchParams),
    responses(
        (status = 200, description = "The event stream", content_type = "text/event-stream",
            body = String),
        (status = 410, description = "The cursor is older than the oldest kept event (or \
            ahead of the log): re-list, then watch without a cursor", body = ErrorBody)))]
pub(super) async fn watch(
    State(s): State<AppState>,
    Caller(p): Caller,
    Params(q): Params<WatchParams>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    use crate::watch::Frame;
    use axum::response::sse::{Event, KeepAlive, Sse};
    // A reconnecting SSE client repeats its URL and adds the header.
    let cursor = last_event_id(&headers)?.or(q.cursor);
    let subscription = s
        .service
        .watch(&p, cursor, q.follow.unwrap_or(true))
        .await?;
    let events = futures::StreamExt::map(subscription.into_stream(), |frame| {
        let event = match frame {
            // Encoded once per event for every stream (`SharedEvent`).
            Frame::Event(e) => Event::default()
                .id(e.cursor.to_string())
                .event(e.body.kind())
                .data(e.json()),
            // Serializing these types cannot fail; an empty event if it did.
            Frame::Relist(r) => Event::default()
                .event("relist")
                .json_data(crate::model::event::EventBody::Relist(r))
                .unwrap_or_default(),
            // The last event: the token was revoked or expired; a reconnect
            // gets the 401.
            Frame::Unauthenticated(reason) => Event::default()
                .event("error")
                .json_data(serde_json::json!({
                    "error": { "code": "unauthenticated", "message": reason }
                }))
                .unwrap_or_default(),
        };
        Ok::<_, std::convert::Infallible>(event)
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The cursor of an SSE client's `Last-Event-ID` header (sent when it
/// reconnects), if any.
pub(super) fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ServiceError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| ServiceError::InvalidArgument {
            field: "Last-Event-ID".into(),
            reason: "must be an event cursor (an integer)".into(),
        })
}
