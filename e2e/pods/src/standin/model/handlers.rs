//! The HTTP handlers: each model request checked, recorded and answered,
//! as JSON or as a stream of SSE frames.

use std::convert::Infallible;
use std::sync::{Arc, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    ChatRequest, Meta, Model, RequestError, ResponsesRequest, Usage, bearer, chat_chunks,
    chat_completion, chat_reply, chat_sse, content_text, conversation, key_tail, response_events,
    response_object, responses_conversation, responses_sse, text_answer, tokens,
};

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Each frame is its own body chunk, so it is written as soon as it is made.
fn sse(frames: Vec<Bytes>) -> Response {
    let body = Body::from_stream(futures::stream::iter(
        frames.into_iter().map(Ok::<_, Infallible>),
    ));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// What both APIs' replies carry: the ids and time, and the token counts
/// of a `reply_len`-byte answer to a `request_len`-byte request.
fn meta_usage(seq: u64, model: &str, request_len: usize, reply_len: usize) -> (Meta, Usage) {
    let meta = Meta {
        seq,
        created: now_secs(),
        model: model.to_owned(),
    };
    let usage = Usage {
        input: tokens(request_len),
        output: tokens(reply_len),
    };
    (meta, usage)
}

pub(super) async fn chat_completions(
    State(m): State<Arc<Model>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, RequestError> {
    m.check_key(&headers)?;
    let raw: Value = serde_json::from_slice(&body)?;
    let req = ChatRequest::deserialize(&raw)?;
    let user = conversation(
        req.messages
            .iter()
            .map(|m| (m.role.as_str(), content_text(&m.content))),
    )
    .user;
    let seq = m.record(raw, user);
    let reply = chat_reply(&req, &key_tail(bearer(&headers)));
    let (meta, usage) = meta_usage(seq, &req.model, body.len(), reply.text_len());
    let stream = req.stream.unwrap_or(false);
    tracing::info!(seq, model = %req.model, stream, reply = ?reply, "chat completion");
    Ok(if stream {
        sse(chat_sse(&chat_chunks(&meta, &reply, usage)))
    } else {
        Json(chat_completion(&meta, &reply, usage)).into_response()
    })
}

pub(super) async fn responses(
    State(m): State<Arc<Model>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, RequestError> {
    m.check_key(&headers)?;
    let raw: Value = serde_json::from_slice(&body)?;
    let req = ResponsesRequest::deserialize(&raw)?;
    let conv = responses_conversation(&req.input);
    let seq = m.record(raw, conv.user.clone());
    let text = text_answer(&conv, &key_tail(bearer(&headers)), &req.model);
    let (meta, usage) = meta_usage(seq, &req.model, body.len(), text.len());
    let stream = req.stream.unwrap_or(false);
    tracing::info!(seq, model = %req.model, stream, text, "response");
    Ok(if stream {
        sse(responses_sse(&response_events(&meta, &text, usage)))
    } else {
        Json(response_object(&meta, &text, usage, "completed")).into_response()
    })
}

pub(super) async fn models(
    State(m): State<Arc<Model>>,
    headers: HeaderMap,
) -> Result<Response, RequestError> {
    m.check_key(&headers)?;
    let data: Vec<Value> = m
        .models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "owned_by": "clawfed"}))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})).into_response())
}

pub(super) async fn requests(State(m): State<Arc<Model>>) -> Json<Value> {
    let seen = m.seen.lock().unwrap_or_else(PoisonError::into_inner);
    Json(json!({"count": seen.count, "last": seen.last, "users": seen.users}))
}
