//! The model stand-in: an OpenAI-compatible model API that a real agent
//! runtime (the OpenClaw gateway, later Codex) calls for a chat turn, so a
//! test runs the real runtime without a real model.
//!
//! Every answer is deterministic and names the request: the latest user text,
//! the earlier user texts the runtime replayed (history), the last four
//! characters of the API key and the model, so a test can prove which agent
//! answered, with which credential, and that its history persisted. Two user
//! commands drive the runtime's own file tools: `write-file <path> <content>`
//! and `read-file <path>` become a call of the offered `write` / `read` tool,
//! and the tool's result comes back as `tool-result: <text>`.
//!
//! Endpoints: `POST /v1/chat/completions` (streaming or not, with tool
//! calls), `POST /v1/responses` (text only), `GET /v1/models`, `GET /healthz`
//! and `GET /_standin/requests` (the count of answered model requests and the
//! last body, to inspect what the runtime sent). With
//! `MODEL_STANDIN_REQUIRE_KEY` set, a model request with another Bearer token
//! gets 401 like OpenAI's.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

/// OpenClaw sends its internal context as a user message starting with this;
/// it is not what the user said.
pub const INTERNAL_CONTEXT_MARKER: &str = "<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>";
/// User messages Codex sends before the turn's own (its AGENTS.md
/// instructions, its environment): context, not what the user said.
pub const CODEX_CONTEXT_PREFIXES: [&str; 2] = ["# AGENTS.md instructions", "<environment_context>"];
/// OpenClaw's Codex plugin sends the user's message after its runtime
/// context, below this line.
pub const CODEX_USER_REQUEST: &str = "\nCurrent user request:\n";
/// Real OpenClaw requests are ~60 KB (a 50 KB system prompt); room to spare.
pub const MAX_BODY: usize = 8 << 20;
/// The model list when `MODEL_STANDIN_MODELS` is unset.
pub const DEFAULT_MODEL: &str = "standin-model";
/// A tool result is echoed at most this many characters long.
const TOOL_RESULT_MAX_CHARS: usize = 2000;

/// Why a model request gets no answer; the client gets an OpenAI-style error.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("invalid api key")]
    InvalidKey,
    #[error("invalid request body: {0}")]
    BadRequest(#[from] serde_json::Error),
}

impl IntoResponse for RequestError {
    fn into_response(self) -> Response {
        let (status, code) = match self {
            RequestError::InvalidKey => (StatusCode::UNAUTHORIZED, Some("invalid_api_key")),
            RequestError::BadRequest(_) => (StatusCode::BAD_REQUEST, None),
        };
        let body = json!({"error": {
            "message": self.to_string(),
            "type": "invalid_request_error",
            "code": code,
        }});
        (status, Json(body)).into_response()
    }
}

/// The stand-in's configuration and what it has seen.
#[derive(Debug)]
pub struct Model {
    /// `MODEL_STANDIN_MODELS` (comma separated), for `GET /v1/models`.
    pub models: Vec<String>,
    /// `MODEL_STANDIN_REQUIRE_KEY`: the only Bearer token accepted (empty
    /// counts as unset: no client can send an empty key).
    pub require_key: Option<String>,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    count: u64,
    last: Option<Value>,
    /// The user text of each answered request, oldest first, at most
    /// [`USERS_KEPT`]: a test finds a turn among background ones.
    users: std::collections::VecDeque<String>,
}

/// How many user texts `/_standin/requests` keeps.
const USERS_KEPT: usize = 256;

impl Model {
    pub fn from_env(env: BTreeMap<String, String>) -> Self {
        let mut models: Vec<String> = env
            .get("MODEL_STANDIN_MODELS")
            .map(|m| {
                m.split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if models.is_empty() {
            models.push(DEFAULT_MODEL.to_string());
        }
        let require_key = env
            .get("MODEL_STANDIN_REQUIRE_KEY")
            .filter(|k| !k.is_empty())
            .cloned();
        Model {
            models,
            require_key,
            seen: Mutex::default(),
        }
    }

    fn check_key(&self, headers: &HeaderMap) -> Result<(), RequestError> {
        match &self.require_key {
            Some(want) if bearer(headers) != Some(want.as_str()) => Err(RequestError::InvalidKey),
            _ => Ok(()),
        }
    }

    /// Counts an answered request and keeps its body; the count numbers the
    /// answer's ids.
    fn record(&self, body: Value, user: Option<String>) -> u64 {
        // A panic elsewhere cannot leave the counter half-written.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.count += 1;
        seen.last = Some(body);
        if seen.users.len() == USERS_KEPT {
            seen.users.pop_front();
        }
        seen.users.push_back(user.unwrap_or_default());
        seen.count
    }
}

/// The chat endpoint alone, for a stand-in that answers model turns itself
/// as the runtime does (`harness-standin`).
pub fn chat_router(m: Arc<Model>) -> axum::Router {
    axum::Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(m)
}

pub fn router(m: Arc<Model>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/_standin/requests", get(requests))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(m)
}

// ---------------------------------------------------------------------------
// Requests and the answer rule (pure).

/// The part of a Chat Completions request the answer depends on; other
/// fields (`stream_options`, `tool_choice`, `max_completion_tokens`, ...)
/// are ignored.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    /// A string, an array of parts, or null (an assistant's tool call).
    #[serde(default)]
    pub content: Value,
}

/// The part of a Responses request the answer depends on.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    /// A string, or an array of items with `role` and `content`.
    #[serde(default)]
    pub input: Value,
    #[serde(default)]
    pub stream: Option<bool>,
}

/// The text of a message's content: a string, or the text parts of an
/// array (`text`, `input_text`, `output_text`) joined by newlines.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| {
                matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("text" | "input_text" | "output_text")
                )
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// What the user said in a user message as OpenClaw wraps it
/// (`[Sun 2026-12-06 03:53 UTC] hello\n\nRuntime: agent=main | ...`): the
/// text without the timestamp bracket and without anything from the first
/// blank line on (the runtime's annotations).
pub fn clean_user_text(raw: &str) -> String {
    let mut s = raw.trim_start();
    if let Some(rest) = s.strip_prefix('[')
        && let Some((stamp, after)) = rest.split_once(']')
        && !stamp.contains('\n')
        && (after.is_empty() || after.starts_with(char::is_whitespace))
    {
        s = after.trim_start();
    }
    let s = s.replace("\r\n", "\n");
    let end = s.find("\n\n").unwrap_or(s.len());
    s[..end].trim().to_string()
}

/// The user texts of a conversation: the latest and the earlier ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversation {
    /// The latest user text, cleaned; `None` without a user message.
    pub user: Option<String>,
    /// The earlier user texts, cleaned, oldest first.
    pub history: Vec<String>,
}

/// From `(role, raw text)` in order: user messages other than OpenClaw's
/// and Codex's context; of a message that carries the user's request below
/// the runtime's context (OpenClaw's Codex plugin), the request.
pub fn conversation<'a>(messages: impl IntoIterator<Item = (&'a str, String)>) -> Conversation {
    let mut texts: Vec<String> = messages
        .into_iter()
        .filter(|(role, text)| {
            let text = text.trim_start();
            *role == "user"
                && !text.starts_with(INTERNAL_CONTEXT_MARKER)
                && !CODEX_CONTEXT_PREFIXES.iter().any(|p| text.starts_with(p))
        })
        .map(|(_, text)| match text.rsplit_once(CODEX_USER_REQUEST) {
            Some((_, request)) => clean_user_text(request),
            None => clean_user_text(&text),
        })
        .collect();
    let user = texts.pop();
    Conversation {
        user,
        history: texts,
    }
}

/// The Bearer token of the `Authorization` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The last four characters of the key, or `none`: enough to tell keys
/// apart in an answer without echoing a key whole.
pub fn key_tail(token: Option<&str>) -> String {
    match token {
        Some(t) => {
            let n = t.chars().count();
            t.chars().skip(n.saturating_sub(4)).collect()
        }
        None => "none".to_string(),
    }
}

/// The text answer that names the request.
pub fn text_answer(conv: &Conversation, key_tail: &str, model: &str) -> String {
    let history = if conv.history.is_empty() {
        "none".to_string()
    } else {
        conv.history.join(" ; ")
    };
    format!(
        "model-standin answer: {} | history: {history} | key: {key_tail} | model: {model}",
        conv.user.as_deref().unwrap_or_default()
    )
}

/// A user command that drives one of the runtime's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `write-file <path> <content...>`
    Write { path: &'a str, content: &'a str },
    /// `read-file <path>`
    Read { path: &'a str },
}

pub fn parse_command(text: &str) -> Option<Command<'_>> {
    let (verb, rest) = text.split_once(char::is_whitespace)?;
    let rest = rest.trim_start();
    // One separator after the path: the content is kept as typed.
    let (path, content) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    if path.is_empty() {
        return None;
    }
    match verb {
        "write-file" => Some(Command::Write { path, content }),
        "read-file" => Some(Command::Read { path }),
        _ => None,
    }
}

/// Whether the request offers a function tool of this name (Chat
/// Completions' `{type, function: {name}}`, or a flat `{type, name}`).
pub fn offers_tool(tools: &[Value], name: &str) -> bool {
    tools.iter().any(|t| {
        t.get("function")
            .and_then(|f| f.get("name"))
            .or_else(|| t.get("name"))
            .and_then(Value::as_str)
            == Some(name)
    })
}

/// What the assistant answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Text(String),
    /// One function call; `arguments` is the JSON text.
    ToolCall {
        name: String,
        arguments: String,
    },
}

impl Reply {
    fn finish_reason(&self) -> &'static str {
        match self {
            Reply::Text(_) => "stop",
            Reply::ToolCall { .. } => "tool_calls",
        }
    }

    fn text_len(&self) -> usize {
        match self {
            Reply::Text(t) => t.len(),
            Reply::ToolCall { name, arguments } => name.len() + arguments.len(),
        }
    }
}

/// The answer rule of a Chat Completions request: a tool result is echoed;
/// a tool command calls the tool when it is offered; anything else gets the
/// text answer.
///
/// A tool result answers the turn when it came after the latest user text:
/// the runtime may append its internal context after the result, so the
/// result is not always the last message (a call repeated then would loop).
pub fn chat_reply(req: &ChatRequest, key_tail: &str) -> Reply {
    let is_user_text = |m: &&ChatMessage| {
        m.role == "user"
            && !content_text(&m.content)
                .trim_start()
                .starts_with(INTERNAL_CONTEXT_MARKER)
    };
    let last_user = req.messages.iter().rposition(|m| is_user_text(&m));
    let after_user = &req.messages[last_user.map_or(0, |i| i + 1)..];
    if let Some(last) = after_user.iter().rev().find(|m| m.role == "tool") {
        let text: String = content_text(&last.content)
            .trim()
            .chars()
            .take(TOOL_RESULT_MAX_CHARS)
            .collect();
        return Reply::Text(format!("tool-result: {text}"));
    }
    let conv = conversation(
        req.messages
            .iter()
            .map(|m| (m.role.as_str(), content_text(&m.content))),
    );
    let tools = req.tools.as_deref().unwrap_or_default();
    let call = match conv.user.as_deref().and_then(parse_command) {
        Some(Command::Write { path, content }) if offers_tool(tools, "write") => {
            Some(("write", json!({"path": path, "content": content})))
        }
        Some(Command::Read { path }) if offers_tool(tools, "read") => {
            Some(("read", json!({"path": path})))
        }
        _ => None,
    };
    match call {
        Some((name, args)) => Reply::ToolCall {
            name: name.to_string(),
            arguments: args.to_string(),
        },
        None => Reply::Text(text_answer(&conv, key_tail, &req.model)),
    }
}

/// The user texts of a Responses request's `input`.
pub fn responses_conversation(input: &Value) -> Conversation {
    match input {
        Value::String(s) => conversation([("user", s.clone())]),
        Value::Array(items) => conversation(items.iter().filter_map(|item| {
            let role = item.get("role").and_then(Value::as_str)?;
            Some((role, content_text(item.get("content")?)))
        })),
        _ => Conversation::default(),
    }
}

// ---------------------------------------------------------------------------
// Response bodies (pure).

/// What every object of one answer shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Numbers the ids: `chatcmpl-standin-<seq>`, `call_<seq>`, ...
    pub seq: u64,
    pub created: u64,
    pub model: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

/// A rough token count (4 bytes a token): deterministic, never zero.
pub fn tokens(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4).max(1)).unwrap_or(u64::MAX)
}

fn chat_usage(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
    })
}

fn tool_call(meta: &Meta, name: &str, arguments: &str) -> Value {
    json!({
        "id": format!("call_{}", meta.seq),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    })
}

/// A non-streaming `chat.completion`.
pub fn chat_completion(meta: &Meta, reply: &Reply, usage: Usage) -> Value {
    let message = match reply {
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::ToolCall { name, arguments } => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [tool_call(meta, name, arguments)],
        }),
    };
    json!({
        "id": format!("chatcmpl-standin-{}", meta.seq),
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": reply.finish_reason(),
        }],
        "usage": chat_usage(usage),
    })
}

/// `text` in two or three pieces (fewer when it is shorter), split on
/// character boundaries, so a client's delta handling is exercised.
pub fn split_deltas(text: &str) -> Vec<&str> {
    let n = text.chars().count();
    let parts = n.min(3);
    if parts < 2 {
        return vec![text];
    }
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for k in 1..parts {
        let at = text
            .char_indices()
            .nth(k * n / parts)
            .map_or(text.len(), |(i, _)| i);
        out.push(&text[start..at]);
        start = at;
    }
    out.push(&text[start..]);
    out
}

/// The `chat.completion.chunk`s of a streamed answer: the role, the content
/// (or the tool call), the finish reason, then the usage with no choices.
pub fn chat_chunks(meta: &Meta, reply: &Reply, usage: Usage) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": format!("chatcmpl-standin-{}", meta.seq),
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        })
    };
    let mut chunks = Vec::new();
    match reply {
        Reply::Text(text) => {
            chunks.push(chunk(json!({"role": "assistant", "content": ""}), None));
            for piece in split_deltas(text) {
                chunks.push(chunk(json!({"content": piece}), None));
            }
        }
        Reply::ToolCall { name, arguments } => {
            chunks.push(chunk(json!({"role": "assistant", "content": null}), None));
            let mut call = tool_call(meta, name, arguments);
            call["index"] = json!(0);
            chunks.push(chunk(json!({"tool_calls": [call]}), None));
        }
    }
    chunks.push(chunk(json!({}), Some(reply.finish_reason())));
    chunks.push(json!({
        "id": format!("chatcmpl-standin-{}", meta.seq),
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": chat_usage(usage),
    }));
    chunks
}

/// Chat Completions SSE frames: `data: <json>` each, then `data: [DONE]`.
pub fn chat_sse(chunks: &[Value]) -> Vec<Bytes> {
    chunks
        .iter()
        .map(|c| Bytes::from(format!("data: {c}\n\n")))
        .chain([Bytes::from_static(b"data: [DONE]\n\n")])
        .collect()
}

fn message_item(meta: &Meta, text: &str, status: &str) -> Value {
    let content = if status == "completed" {
        json!([{"type": "output_text", "text": text, "annotations": []}])
    } else {
        json!([])
    };
    json!({
        "type": "message",
        "id": format!("msg_standin_{}", meta.seq),
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

/// A `response` object; `in_progress` has no output yet.
pub fn response_object(meta: &Meta, text: &str, usage: Usage, status: &str) -> Value {
    let done = status == "completed";
    json!({
        "id": format!("resp_standin_{}", meta.seq),
        "object": "response",
        "created_at": meta.created,
        "status": status,
        "model": meta.model,
        "output": if done { json!([message_item(meta, text, status)]) } else { json!([]) },
        "usage": if done {
            json!({
                "input_tokens": usage.input,
                "output_tokens": usage.output,
                "total_tokens": usage.input + usage.output,
            })
        } else {
            Value::Null
        },
    })
}

/// The Responses streaming events of a text answer, in order.
pub fn response_events(meta: &Meta, text: &str, usage: Usage) -> Vec<Value> {
    let item_id = format!("msg_standin_{}", meta.seq);
    let part = |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
    let at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
    let with = |mut base: Value, extra: Value| {
        if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
            b.extend(e);
        }
        base
    };
    let mut events = vec![
        json!({"type": "response.created",
               "response": response_object(meta, text, usage, "in_progress")}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": message_item(meta, text, "in_progress")}),
        with(
            at.clone(),
            json!({"type": "response.content_part.added", "part": part("")}),
        ),
    ];
    for piece in split_deltas(text) {
        events.push(with(
            at.clone(),
            json!({"type": "response.output_text.delta", "delta": piece}),
        ));
    }
    events.extend([
        with(
            at.clone(),
            json!({"type": "response.output_text.done", "text": text}),
        ),
        with(
            at,
            json!({"type": "response.content_part.done", "part": part(text)}),
        ),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": message_item(meta, text, "completed")}),
        json!({"type": "response.completed",
               "response": response_object(meta, text, usage, "completed")}),
    ]);
    for (n, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(n);
    }
    events
}

/// Responses SSE frames: `event: <type>` and `data: <json>` each.
pub fn responses_sse(events: &[Value]) -> Vec<Bytes> {
    events
        .iter()
        .map(|e| {
            let kind = e.get("type").and_then(Value::as_str).unwrap_or_default();
            Bytes::from(format!("event: {kind}\ndata: {e}\n\n"))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Handlers.

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

async fn chat_completions(
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
    let meta = Meta {
        seq,
        created: now_secs(),
        model: req.model.clone(),
    };
    let usage = Usage {
        input: tokens(body.len()),
        output: tokens(reply.text_len()),
    };
    let stream = req.stream.unwrap_or(false);
    tracing::info!(seq, model = %req.model, stream, reply = ?reply, "chat completion");
    Ok(if stream {
        sse(chat_sse(&chat_chunks(&meta, &reply, usage)))
    } else {
        Json(chat_completion(&meta, &reply, usage)).into_response()
    })
}

async fn responses(
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
    let meta = Meta {
        seq,
        created: now_secs(),
        model: req.model.clone(),
    };
    let usage = Usage {
        input: tokens(body.len()),
        output: tokens(text.len()),
    };
    let stream = req.stream.unwrap_or(false);
    tracing::info!(seq, model = %req.model, stream, text, "response");
    Ok(if stream {
        sse(responses_sse(&response_events(&meta, &text, usage)))
    } else {
        Json(response_object(&meta, &text, usage, "completed")).into_response()
    })
}

async fn models(State(m): State<Arc<Model>>, headers: HeaderMap) -> Result<Response, RequestError> {
    m.check_key(&headers)?;
    let data: Vec<Value> = m
        .models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "owned_by": "clawfed"}))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})).into_response())
}

async fn requests(State(m): State<Arc<Model>>) -> Json<Value> {
    let seen = m.seen.lock().unwrap_or_else(PoisonError::into_inner);
    Json(json!({"count": seen.count, "last": seen.last, "users": seen.users}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> ChatRequest {
        ChatRequest::deserialize(&v).expect("a chat request")
    }

    fn meta() -> Meta {
        Meta {
            seq: 7,
            created: 1_800_000_000,
            model: "m1".into(),
        }
    }

    const USAGE: Usage = Usage {
        input: 10,
        output: 5,
    };

    /// Shaped like OpenClaw's: a long system prompt, the user turn with its
    /// timestamp and Runtime annotations, then internal context as parts.
    fn openclaw_request(history: &[&str], user: &str, tools: Value) -> Value {
        let mut messages = vec![
            json!({"role": "system", "content": "You are a personal assistant. ".repeat(100)}),
        ];
        for h in history {
            messages.push(json!({"role": "user", "content": format!("[Sat 2026-12-05 10:00 UTC] {h}\n\nRuntime: agent=main | host=x")}));
            messages.push(
                json!({"role": "assistant", "content": format!("model-standin answer: {h}")}),
            );
        }
        messages.push(json!({"role": "user", "content": format!("[Sun 2026-12-06 03:53 UTC] {user}\n\nRuntime: agent=main | model=standin/m1 | channel=webchat")}));
        messages.push(json!({"role": "user", "content": [
            {"type": "text", "text": format!("{INTERNAL_CONTEXT_MARKER}\nsession state\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>")}
        ]}));
        json!({
            "model": "m1",
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": tools,
            "tool_choice": "auto",
            "max_completion_tokens": 8192,
            "store": false,
        })
    }

    fn tools(names: &[&str]) -> Value {
        names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}))
            .collect()
    }

    #[test]
    fn a_codex_shaped_responses_input_is_answered_with_the_users_request() {
        // As OpenClaw's Codex plugin has Codex send it (a real capture,
        // shortened): Codex's context, then the runtime's context with the
        // user's request last.
        let part = |t: &str| json!([{"type": "input_text", "text": t}]);
        let input = json!([
            {"type": "message", "role": "developer", "content": part("You are a personal agent")},
            {"type": "message", "role": "user", "content": part("# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>")},
            {"type": "message", "role": "user", "content": part("<environment_context>\n  <cwd>/w</cwd>")},
            {"type": "message", "role": "user", "content": part(
                "OpenClaw runtime context for this turn:\nTreat this as context.\n\n## Docs\n\nCurrent user request:\nfirst nonce-1")},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
            {"type": "message", "role": "user", "content": part(
                "OpenClaw runtime context for this turn:\nTreat this as context.\n\nCurrent user request:\nsecond nonce-2")}
        ]);
        let conv = responses_conversation(&input);
        assert_eq!(conv.user.as_deref(), Some("second nonce-2"));
        assert_eq!(conv.history, vec!["first nonce-1".to_string()]);
    }

    #[test]
    fn openclaw_shaped_request_is_answered_with_the_user_text() {
        let r = req(openclaw_request(
            &[],
            "hello nonce-42",
            tools(&["read", "write"]),
        ));
        assert_eq!(
            chat_reply(&r, "wxyz"),
            Reply::Text(
                "model-standin answer: hello nonce-42 | history: none | key: wxyz | model: m1"
                    .into()
            )
        );
    }

    #[test]
    fn history_is_the_earlier_user_texts_in_order() {
        let r = req(openclaw_request(
            &["first one", "second"],
            "third",
            json!([]),
        ));
        let Reply::Text(t) = chat_reply(&r, "none") else {
            panic!("text expected")
        };
        assert_eq!(
            t,
            "model-standin answer: third | history: first one ; second | key: none | model: m1"
        );
    }

    #[test]
    fn user_text_is_cleaned() {
        assert_eq!(
            clean_user_text("[Sun 2026-12-06 03:53 UTC] hi there"),
            "hi there"
        );
        assert_eq!(clean_user_text("plain\n\nRuntime: x"), "plain");
        assert_eq!(clean_user_text("a\nb\r\n\r\nrest"), "a\nb");
        // Not a timestamp bracket: kept.
        assert_eq!(clean_user_text("[x]y"), "[x]y");
        assert_eq!(clean_user_text("  "), "");
    }

    #[test]
    fn write_file_calls_write_only_when_offered() {
        let offered = req(openclaw_request(
            &[],
            "write-file notes/a.txt hello  world",
            tools(&["read", "write"]),
        ));
        let Reply::ToolCall { name, arguments } = chat_reply(&offered, "none") else {
            panic!("tool call expected")
        };
        assert_eq!(name, "write");
        let args: Value = serde_json::from_str(&arguments).expect("JSON arguments");
        assert_eq!(
            args,
            json!({"path": "notes/a.txt", "content": "hello  world"})
        );

        let not_offered = req(openclaw_request(
            &[],
            "write-file notes/a.txt hello",
            tools(&["read"]),
        ));
        assert!(
            matches!(chat_reply(&not_offered, "none"), Reply::Text(t) if t.starts_with("model-standin answer: write-file notes/a.txt hello |"))
        );
    }

    #[test]
    fn read_file_calls_read_only_when_offered() {
        let offered = req(openclaw_request(
            &[],
            "read-file notes/a.txt",
            tools(&["read"]),
        ));
        assert_eq!(
            chat_reply(&offered, "none"),
            Reply::ToolCall {
                name: "read".into(),
                arguments: json!({"path": "notes/a.txt"}).to_string()
            }
        );
        let none = req(openclaw_request(&[], "read-file notes/a.txt", Value::Null));
        assert!(matches!(chat_reply(&none, "none"), Reply::Text(_)));
        assert_eq!(parse_command("read-file"), None);
        assert_eq!(parse_command("read-filex a"), None);
    }

    #[test]
    fn a_tool_result_followed_by_internal_context_still_answers_the_turn() {
        let mut body = openclaw_request(&[], "write-file a.txt hi", tools(&["write"]));
        let messages = body["messages"].as_array_mut().unwrap();
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "write", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "Successfully wrote 2 bytes"}));
        messages.push(json!({"role": "user", "content": [
            {"type": "text", "text": format!("{INTERNAL_CONTEXT_MARKER}\nstate")}]}));
        assert_eq!(
            chat_reply(&req(body), "none"),
            Reply::Text("tool-result: Successfully wrote 2 bytes".into())
        );
    }

    #[test]
    fn a_tool_result_is_echoed_trimmed_and_bounded() {
        let mut body = openclaw_request(&[], "read-file a.txt", tools(&["read"]));
        let messages = body["messages"].as_array_mut().expect("messages");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "  file body\n"}]}));
        assert_eq!(
            chat_reply(&req(body.clone()), "none"),
            Reply::Text("tool-result: file body".into())
        );

        let long = "é".repeat(3000);
        body["messages"]
            .as_array_mut()
            .expect("messages")
            .push(json!({"role": "tool", "tool_call_id": "call_2", "content": long}));
        let Reply::Text(t) = chat_reply(&req(body), "none") else {
            panic!("text expected")
        };
        assert_eq!(t.chars().count(), "tool-result: ".len() + 2000);
    }

    #[test]
    fn key_tail_is_the_last_four_characters() {
        let mut h = HeaderMap::new();
        assert_eq!(key_tail(bearer(&h)), "none");
        h.insert(
            header::AUTHORIZATION,
            "Bearer sk-test-abcd1234".parse().expect("header"),
        );
        assert_eq!(key_tail(bearer(&h)), "1234");
        h.insert(header::AUTHORIZATION, "bearer ab".parse().expect("header"));
        assert_eq!(key_tail(bearer(&h)), "ab");
        h.insert(
            header::AUTHORIZATION,
            "Basic abcdef".parse().expect("header"),
        );
        assert_eq!(key_tail(bearer(&h)), "none");
    }

    #[test]
    fn completion_carries_the_tool_call_with_string_arguments() {
        let reply = Reply::ToolCall {
            name: "write".into(),
            arguments: json!({"path": "p", "content": "c"}).to_string(),
        };
        let c = chat_completion(&meta(), &reply, USAGE);
        assert_eq!(c["object"], "chat.completion");
        assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
        let call = &c["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_7");
        assert_eq!(call["type"], "function");
        assert_eq!(call["function"]["name"], "write");
        assert!(call["function"]["arguments"].is_string());
        assert_eq!(c["usage"]["total_tokens"], 15);

        let t = chat_completion(&meta(), &Reply::Text("hi".into()), USAGE);
        assert_eq!(t["choices"][0]["message"]["content"], "hi");
        assert_eq!(t["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn streamed_text_is_role_deltas_finish_usage_done() {
        let text = "model-standin answer: héllo | history: none";
        let chunks = chat_chunks(&meta(), &Reply::Text(text.into()), USAGE);
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let deltas: Vec<&str> = chunks[1..chunks.len() - 2]
            .iter()
            .map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .expect("content")
            })
            .collect();
        assert!((2..=3).contains(&deltas.len()), "{deltas:?}");
        assert_eq!(deltas.concat(), text);
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["delta"], json!({}));
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        let usage = &chunks[chunks.len() - 1];
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 5);
        assert!(
            chunks
                .iter()
                .all(|c| c["object"] == "chat.completion.chunk")
        );

        let frames = chat_sse(&chunks);
        assert_eq!(frames.len(), chunks.len() + 1);
        assert!(
            frames
                .iter()
                .all(|f| f.starts_with(b"data: ") && f.ends_with(b"\n\n"))
        );
        assert_eq!(
            frames.last().map(|f| &f[..]),
            Some(&b"data: [DONE]\n\n"[..])
        );
    }

    #[test]
    fn streamed_tool_call_is_one_indexed_delta() {
        let reply = Reply::ToolCall {
            name: "read".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let chunks = chat_chunks(&meta(), &reply, USAGE);
        assert_eq!(chunks.len(), 4);
        let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert_eq!(call["id"], "call_7");
        assert_eq!(call["function"]["arguments"], "{\"path\":\"a\"}");
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn split_deltas_keeps_characters_whole() {
        assert_eq!(split_deltas(""), vec![""]);
        assert_eq!(split_deltas("a"), vec!["a"]);
        assert_eq!(split_deltas("ab"), vec!["a", "b"]);
        assert_eq!(split_deltas("ééé"), vec!["é", "é", "é"]);
        assert_eq!(split_deltas("abcdefg").concat(), "abcdefg");
    }

    #[test]
    fn responses_input_string_or_items() {
        assert_eq!(
            responses_conversation(&json!("hi")),
            Conversation {
                user: Some("hi".into()),
                history: vec![]
            }
        );
        let items = json!([
            {"role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
            {"type": "function_call_output", "call_id": "c", "output": "o"},
            {"role": "user", "content": "two"},
        ]);
        assert_eq!(
            responses_conversation(&items),
            Conversation {
                user: Some("two".into()),
                history: vec!["one".into()]
            }
        );
    }

    #[test]
    fn response_object_and_events() {
        let r = response_object(&meta(), "hello", USAGE, "completed");
        assert_eq!(r["object"], "response");
        assert_eq!(r["output"][0]["content"][0]["type"], "output_text");
        assert_eq!(r["output"][0]["content"][0]["text"], "hello");
        assert_eq!(r["usage"]["total_tokens"], 15);

        let events = response_events(&meta(), "hello", USAGE);
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| e["type"].as_str().expect("type"))
            .collect();
        let mut want = vec![
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
        ];
        want.extend(["response.output_text.delta"; 3]);
        want.extend([
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]);
        assert_eq!(kinds, want);
        assert_eq!(events[0]["response"]["status"], "in_progress");
        assert_eq!(
            events[9]["response"]["output"][0]["content"][0]["text"],
            "hello"
        );
        let frames = responses_sse(&events);
        assert!(frames[0].starts_with(b"event: response.created\ndata: {"));
    }

    fn model(key: Option<&str>) -> Arc<Model> {
        let env = key
            .map(|k| ("MODEL_STANDIN_REQUIRE_KEY".to_string(), k.to_string()))
            .into_iter()
            .collect();
        Arc::new(Model::from_env(env))
    }

    #[tokio::test]
    async fn bad_json_is_400_and_a_wrong_key_401() {
        let m = model(None);
        let resp = chat_completions(State(m.clone()), HeaderMap::new(), Bytes::from("{"))
            .await
            .into_response();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let resp = chat_completions(
            State(m.clone()),
            HeaderMap::new(),
            Bytes::from("{\"model\":\"m\"}"),
        )
        .await
        .into_response();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(m.seen.lock().expect("lock").count, 0);

        let m = model(Some("sk-right"));
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            "Bearer sk-wrong".parse().expect("header"),
        );
        let body = Bytes::from(json!({"model": "m", "messages": []}).to_string());
        let resp = chat_completions(State(m.clone()), h.clone(), body.clone())
            .await
            .into_response();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        h.insert(
            header::AUTHORIZATION,
            "Bearer sk-right".parse().expect("header"),
        );
        let resp = chat_completions(State(m.clone()), h, body)
            .await
            .into_response();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(m.seen.lock().expect("lock").count, 1);
    }

    #[test]
    fn models_default_and_list() {
        assert_eq!(model(None).models, vec![DEFAULT_MODEL]);
        let env = [("MODEL_STANDIN_MODELS".to_string(), "a, b,,".to_string())]
            .into_iter()
            .collect();
        assert_eq!(Model::from_env(env).models, vec!["a", "b"]);
    }
}
