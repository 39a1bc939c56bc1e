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

mod answer;
mod body;
mod handlers;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

pub use answer::{
    ChatMessage, ChatRequest, Command, Conversation, Reply, ResponsesRequest, bearer, chat_reply,
    clean_user_text, content_text, conversation, key_tail, offers_tool, parse_command,
    responses_conversation, text_answer,
};
pub use body::{
    Meta, Usage, chat_chunks, chat_completion, chat_sse, response_events, response_object,
    responses_sse, split_deltas, tokens,
};
use handlers::{chat_completions, models, requests, responses};

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

#[cfg(test)]
mod tests;
