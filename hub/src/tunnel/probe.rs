//! The hub's own request through the data path to a Harness, for revisions
//! without a control-cluster Gateway (embedded OpenClaw serves its gateway
//! from the data-plane workload): hub → spoke link → Harness. "Active"
//! means a real model turn went through it ([`model_turn`]), or, where an
//! installation chose the weaker proof, a health request was answered
//! ([`http_get`]).

use std::time::Duration;

use http_body_util::BodyExt;
use tracing::Instrument;

use super::broker::Broker;
use super::harness_stream::{self, HarnessIo, LocalTunnel};
use super::route::Route;

/// The Harness stream of `route` (and what keeps it up), or why the
/// tunnel was refused.
async fn open(
    broker: &Broker,
    route: &Route,
    transport: &str,
) -> Result<(HarnessIo, Option<LocalTunnel>), ProbeError> {
    harness_stream::open(broker, route, transport)
        .await
        .map_err(|r| ProbeError::Refused {
            reason: r.reason,
            message: r.message,
        })
}

/// The status line and headers are read at most this far.
const MAX_HEAD: usize = 16 * 1024;

/// Why the probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The tunnel was refused (offline cluster, no ready endpoint, ...).
    #[error("tunnel refused ({reason}): {message}")]
    Refused {
        reason: &'static str,
        message: String,
    },
    /// The Harness answered with a status other than 2xx.
    #[error("the Harness answered {path} with HTTP {status}")]
    Status { path: String, status: u16 },
    /// The connection ended or broke before a status line arrived.
    #[error("the Harness connection ended without an HTTP answer: {0}")]
    NoAnswer(String),
    #[error("no answer from the Harness within {0:?}")]
    Timeout(Duration),
    /// The runtime answered the model turn, but not with a model's answer:
    /// an error status, or a body that is not a chat completion (the
    /// runtime's Control UI answers unknown paths with 200 and HTML).
    #[error("the runtime answered the model turn with HTTP {status}: {answer}")]
    NotAnAnswer { status: u16, answer: String },
}

impl ProbeError {
    /// The Harness answered (wrongly), as opposed to no answer at all.
    pub fn is_answer(&self) -> bool {
        matches!(self, ProbeError::NotAnAnswer { .. })
    }
}

/// The chat path of the OpenClaw runtime (its OpenAI-compatible endpoint).
pub const MODEL_TURN_PATH: &str = "/v1/chat/completions";
/// The activation turn's message (its conversation, the OpenAI `user`,
/// names the revision: `clawfed-activation-<revision id>`).
pub const MODEL_TURN_MESSAGE: &str = "clawfed activation check: answer briefly.";
/// An answer larger than this is not read further.
const MAX_ANSWER: usize = 1 << 20;

/// One real model turn on the runtime of `route` through the tunnel:
/// `POST /v1/chat/completions` with the gateway `token`, in a conversation
/// of its own (`clawfed-activation-<revision id>`). Ok with the model's
/// answer when the runtime answered 2xx with a chat completion whose first
/// choice has text.
pub async fn model_turn(
    broker: &Broker,
    route: &Route,
    tokens: &Tokens<'_>,
    revision_id: &str,
    timeout: Duration,
) -> Result<String, ProbeError> {
    let user = activation_conversation(revision_id);
    chat_turn(broker, route, tokens, &activation_turn(&user), timeout).await
}

/// The activation turn's conversation: one per revision.
pub fn activation_conversation(revision_id: &str) -> String {
    format!("clawfed-activation-{revision_id}")
}

/// The activation turn in conversation `user`
/// ([`activation_conversation`]), whichever way it is sent.
pub fn activation_turn(user: &str) -> Turn<'_> {
    Turn {
        user,
        message: MODEL_TURN_MESSAGE,
        agent: "clawfed-hub-activation",
    }
}

/// The revision's tokens a hub request needs.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'a> {
    /// The runtime's gateway token (`Authorization: Bearer`).
    pub runtime: &'a str,
    /// The revision's transport credential: another replica's ingress
    /// admits the hub's tunnel with it when that replica holds the session.
    pub transport: &'a str,
}

/// One chat turn: who asks, in which conversation, what.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// The runtime's conversation (OpenAI `user`).
    pub user: &'a str,
    /// The user's message.
    pub message: &'a str,
    /// The request's `User-Agent`.
    pub agent: &'a str,
}

/// `turn` on the runtime of `route` through the tunnel (as
/// [`model_turn`]): the model's answer, or why there is none.
pub async fn chat_turn(
    broker: &Broker,
    route: &Route,
    tokens: &Tokens<'_>,
    turn: &Turn<'_>,
    timeout: Duration,
) -> Result<String, ProbeError> {
    tokio::time::timeout(timeout, send_turn(broker, route, tokens, turn))
        .await
        .map_err(|_| ProbeError::Timeout(timeout))?
}

async fn send_turn(
    broker: &Broker,
    route: &Route,
    tokens: &Tokens<'_>,
    turn: &Turn<'_>,
) -> Result<String, ProbeError> {
    // HTTP/1.1 over the Harness stream, here or through the replica that
    // holds the cluster's session.
    let (stream, _tunnel) = open(broker, route, tokens.transport).await?;
    turn_over(stream, &route.authority, tokens.runtime, turn).await
}

/// `turn` as `POST /v1/chat/completions` over `io` (a connection to the
/// runtime at `authority`), with the runtime's gateway `token`: the
/// model's answer, or why there is none.
pub async fn turn_over<IO>(
    io: IO,
    authority: &str,
    token: &str,
    turn: &Turn<'_>,
) -> Result<String, ProbeError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let no_answer = |e: &dyn std::fmt::Display| ProbeError::NoAnswer(e.to_string());
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| no_answer(&e))?;
    // Ended with this function however it ends (a timeout included): the
    // connection owns the stream, whose drop stops the tunnel.
    let connection = AbortOnDrop(tokio::spawn(conn.in_current_span()).abort_handle());
    let body = serde_json::json!({
        "model": "openclaw/default",
        "user": turn.user,
        "messages": [{ "role": "user", "content": turn.message }],
    });
    let request = http::Request::post(MODEL_TURN_PATH)
        .header(http::header::HOST, authority)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, turn.agent)
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .map_err(|e| no_answer(&e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| no_answer(&e))?;
    let status = response.status().as_u16();
    let answer = http_body_util::Limited::new(response.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| no_answer(&e))?
        .to_bytes();
    drop(connection);
    judge(status, &answer)
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The model's text when `status` and `body` are a chat completion.
pub fn judge(status: u16, body: &[u8]) -> Result<String, ProbeError> {
    let not = || ProbeError::NotAnAnswer {
        status,
        answer: String::from_utf8_lossy(&body[..body.len().min(300)])
            .trim()
            .to_owned(),
    };
    if !(200..300).contains(&status) {
        return Err(not());
    }
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|_| not())?;
    v["choices"][0]["message"]["content"]
        .as_str()
        .filter(|t| !t.trim().is_empty())
        .map(str::to_owned)
        .ok_or_else(not)
}

/// `GET path` on the Harness of `route` through the tunnel; Ok on 2xx.
pub async fn http_get(
    broker: &Broker,
    route: &Route,
    transport: &str,
    path: &str,
    timeout: Duration,
) -> Result<(), ProbeError> {
    tokio::time::timeout(timeout, get(broker, route, transport, path))
        .await
        .map_err(|_| ProbeError::Timeout(timeout))?
}

async fn get(
    broker: &Broker,
    route: &Route,
    transport: &str,
    path: &str,
) -> Result<(), ProbeError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut stream, _tunnel) = open(broker, route, transport).await?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: clawfed-hub-probe\r\nConnection: close\r\n\r\n",
        route.authority
    );
    // No half-close after the request: some servers end the connection on
    // read EOF before they answer. `Connection: close` ends it instead.
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| ProbeError::NoAnswer(format!("the request: {e}")))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(2).any(|w| w == b"\r\n") {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| ProbeError::NoAnswer(e.to_string()))?;
        if n == 0 {
            return Err(ProbeError::NoAnswer(format!(
                "{} bytes before the end",
                head.len()
            )));
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return Err(ProbeError::NoAnswer("no status line".into()));
        }
    }
    let status = status_code(&head)
        .ok_or_else(|| ProbeError::NoAnswer("malformed HTTP status line".into()))?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(ProbeError::Status {
            path: path.to_owned(),
            status,
        })
    }
}

/// The status code of `HTTP/1.x NNN ...`.
fn status_code(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{ProbeError, judge, status_code};

    #[test]
    fn only_a_chat_completion_with_text_is_a_model_answer() {
        let ok = br#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}"#;
        assert_eq!(judge(200, ok).unwrap(), "hi");
        // The runtime's Control UI answers unknown paths 200 with HTML.
        let html = b"<!doctype html><html><head><title>OpenClaw</title></head></html>";
        let e = judge(200, html).unwrap_err();
        assert!(e.is_answer());
        assert!(e.to_string().contains("HTTP 200: <!doctype html>"), "{e}");
        for (status, body) in [
            (200, &br#"{"choices":[]}"#[..]),
            (200, br#"{"choices":[{"message":{"content":"  "}}]}"#),
            (200, br#"{"ok":true,"status":"live"}"#),
            (401, br#"{"error":{"message":"unauthorized"}}"#),
            (502, ok),
        ] {
            assert!(
                matches!(judge(status, body), Err(ProbeError::NotAnAnswer { .. })),
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_code(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_code(b"SSH-2.0-x\r\n"), None);
        assert_eq!(status_code(b"HTTP/1.1 abc\r\n"), None);
    }
}
