//! The requests and the answer rule (pure): the parts of a Chat Completions
//! or Responses request the answer depends on, the user texts of a
//! conversation, the tool commands, and what the assistant answers.

use axum::http::{HeaderMap, header};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    CODEX_CONTEXT_PREFIXES, CODEX_USER_REQUEST, INTERNAL_CONTEXT_MARKER, TOOL_RESULT_MAX_CHARS,
};

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
    pub(super) fn finish_reason(&self) -> &'static str {
        match self {
            Reply::Text(_) => "stop",
            Reply::ToolCall { .. } => "tool_calls",
        }
    }

    pub(super) fn text_len(&self) -> usize {
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
