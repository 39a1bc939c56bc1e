//! The Harness stand-in: an HTTP API that says who answered (agent,
//! revision, Pod, startup), echoes bodies of any size as a stream, answers
//! slowly, streams, sends and swallows bulk bytes, and serves the private
//! startup status endpoint.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// Who this process is; the same for every answer of one process start.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    pub agent: String,
    pub revision: String,
    pub pod: String,
    pub namespace: String,
    pub startup_id: String,
    pub started_at_unix_ms: u64,
}

#[derive(Debug)]
pub struct Harness {
    pub identity: Identity,
    /// `STANDIN_NOT_READY=1`: /healthz answers 503.
    pub not_ready: bool,
    pub env: BTreeMap<String, String>,
}

impl Harness {
    /// From the process environment (`env`), with a fresh startup id.
    pub fn from_env(env: BTreeMap<String, String>) -> Self {
        let labels: BTreeMap<String, String> = env
            .get("CLAWFED_POD_LABELS")
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_default();
        let pick = |var: &str, label: &str| {
            env.get(var)
                .or_else(|| labels.get(label))
                .cloned()
                .unwrap_or_default()
        };
        let identity = Identity {
            agent: pick("CLAWFED_AGENT", "clawfed.io/agent"),
            revision: pick("CLAWFED_REVISION", "clawfed.io/revision"),
            pod: env.get("CLAWFED_POD_NAME").cloned().unwrap_or_default(),
            namespace: env
                .get("CLAWFED_POD_NAMESPACE")
                .cloned()
                .unwrap_or_default(),
            startup_id: format!("{:032x}", rand::random::<u128>()),
            started_at_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis().try_into().unwrap_or(u64::MAX)),
        };
        Self {
            identity,
            not_ready: env.get("STANDIN_NOT_READY").is_some_and(|v| v == "1"),
            env,
        }
    }
}

pub fn router(h: Arc<Harness>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/identity", get(identity))
        .route("/echo", any(echo))
        .route("/slow", get(slow))
        .route("/stream", get(stream))
        .route("/bytes", get(bytes))
        .route("/sink", post(sink))
        .route("/env/{name}", get(env_var))
        .route("/_clawfed/startup", get(startup))
        .with_state(h)
}

async fn healthz(State(h): State<Arc<Harness>>) -> Response {
    if h.not_ready {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    } else {
        "ok".into_response()
    }
}

async fn identity(State(h): State<Arc<Harness>>) -> Json<Identity> {
    Json(h.identity.clone())
}

/// The request body goes back as it arrives: nothing is buffered whole, so
/// any size works.
async fn echo(State(h): State<Arc<Harness>>, req: Request) -> Response {
    let mut resp = Response::new(Body::new(req.into_body()));
    let headers = resp.headers_mut();
    let id = &h.identity;
    for (name, value) in [
        ("x-clawfed-agent", &id.agent),
        ("x-clawfed-revision", &id.revision),
        ("x-clawfed-startup", &id.startup_id),
        ("x-clawfed-pod", &id.pod),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    }
    resp
}

#[derive(Debug, Deserialize)]
struct SlowQuery {
    ms: u64,
}

async fn slow(State(h): State<Arc<Harness>>, Query(q): Query<SlowQuery>) -> Json<Identity> {
    tokio::time::sleep(Duration::from_millis(q.ms)).await;
    Json(h.identity.clone())
}

#[derive(Debug, Deserialize)]
struct StreamQuery {
    chunks: u32,
    interval_ms: u64,
}

/// `chunk <i>\n` per chunk, each its own HTTP chunk after `interval_ms`.
async fn stream(Query(q): Query<StreamQuery>) -> Response {
    let interval = Duration::from_millis(q.interval_ms);
    let chunks = futures::stream::iter(0..q.chunks).then(move |i| async move {
        tokio::time::sleep(interval).await;
        Ok::<_, Infallible>(Bytes::from(format!("chunk {i}\n")))
    });
    Body::from_stream(chunks).into_response()
}

#[derive(Debug, Deserialize)]
struct BytesQuery {
    n: u64,
}

static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// `n` bytes, generated as they are sent.
async fn bytes(Query(q): Query<BytesQuery>) -> Response {
    let chunk = ZEROS.len() as u64;
    let full = q.n / chunk;
    let rest = usize::try_from(q.n % chunk).unwrap_or(0);
    let body = futures::stream::iter(0..full)
        .map(|_| Ok::<_, Infallible>(Bytes::from_static(&ZEROS)))
        .chain(futures::stream::iter(
            (rest > 0).then(|| Ok(Bytes::from_static(&ZEROS[..rest]))),
        ));
    let mut resp = Body::from_stream(body).into_response();
    resp.headers_mut()
        .insert("content-length", HeaderValue::from(q.n));
    resp
}

#[derive(Debug, Deserialize)]
struct SinkQuery {
    rate: u64,
}

/// Reads the body at most `rate` bytes a second (a slow receiver: the
/// sender's flow-control window fills), then answers the byte count.
async fn sink(Query(q): Query<SinkQuery>, req: Request) -> Response {
    let rate = q.rate.max(1);
    let start = tokio::time::Instant::now();
    let mut total: u64 = 0;
    let mut data = req.into_body().into_data_stream();
    while let Some(chunk) = data.next().await {
        match chunk {
            Ok(c) => total += c.len() as u64,
            Err(e) => {
                return (StatusCode::BAD_REQUEST, format!("reading body: {e}\n")).into_response();
            }
        }
        // Not before `total` bytes were due at `rate`.
        let due = start + Duration::from_secs_f64(total as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
    }
    format!("{total}\n").into_response()
}

async fn env_var(State(h): State<Arc<Harness>>, Path(name): Path<String>) -> Response {
    match h.env.get(&name) {
        Some(v) => v.clone().into_response(),
        None => (StatusCode::NOT_FOUND, format!("{name} is not set\n")).into_response(),
    }
}

async fn startup() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ready", "plugins": [] }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_prefers_env_then_labels() {
        let env: BTreeMap<String, String> = [
            ("CLAWFED_POD_NAME", "h-1"),
            ("CLAWFED_POD_NAMESPACE", "ns"),
            ("CLAWFED_REVISION", "7"),
            (
                "CLAWFED_POD_LABELS",
                r#"{"clawfed.io/agent":"a1","clawfed.io/revision":"3"}"#,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let h = Harness::from_env(env.clone());
        assert_eq!(h.identity.agent, "a1");
        assert_eq!(h.identity.revision, "7");
        assert_eq!(h.identity.pod, "h-1");
        assert!(!h.not_ready);
        assert_ne!(
            h.identity.startup_id,
            Harness::from_env(env).identity.startup_id,
            "a new id per start"
        );
    }
}
