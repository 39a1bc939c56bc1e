//! The Harness stand-in: an HTTP API that says who answered (agent,
//! revision, Pod, startup), echoes bodies of any size as a stream, answers
//! slowly, streams, sends and swallows bulk bytes, and serves the private
//! plugin startup status and diagnostics endpoints.
//!
//! Plugin startup status (`clawfed_proto::startup`): by default a valid
//! status of this start, every admitted selection (`CLAWFED_PLUGIN_SELECTIONS`)
//! successful, for `CLAWFED_REVISION_ID` and `CLAWFED_RUNTIME_INSTANCE` (the
//! Pod uid by the downward API). A test picks another [`StartupMode`] with
//! the Pod label `standin.clawfed.test/startup` (a requirement label of the
//! Agent), or for the next start with `POST /_standin/restart?startup=MODE`:
//! that writes the mode to `standin-startup-mode` beside the container root
//! (the Pod's state dir, which outlives process restarts, unlike the root)
//! and ends the process, which the pod runner starts again; the file wins
//! over the label. The mode is read once per start: a status belongs to its
//! start.

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
use clawfed_proto::diagnostics::{self, DiagnosticsBody, PublishedCheck};
use clawfed_proto::startup::{self, PublishedWarning, StartupStatus, WarningCode};
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

/// What `/_clawfed/startup` answers in this start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupMode {
    /// A valid status: every admitted selection successful.
    Valid,
    /// The last admitted selection warned `PLUGIN_AUTH_REQUIRED`.
    AuthRequired,
    /// The last admitted selection warned `PLUGIN_INSTALL_FAILED`.
    InstallFailed,
    /// 404: no status.
    Missing,
    /// 200 with a body that is not a status.
    Malformed,
    /// A status of another revision.
    Foreign,
    /// A status of another runtime instance.
    ForeignInstance,
    /// The last admitted selection warned with a code outside the set.
    UnknownCode,
}

impl StartupMode {
    const ALL: [StartupMode; 8] = [
        StartupMode::Valid,
        StartupMode::AuthRequired,
        StartupMode::InstallFailed,
        StartupMode::Missing,
        StartupMode::Malformed,
        StartupMode::Foreign,
        StartupMode::ForeignInstance,
        StartupMode::UnknownCode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StartupMode::Valid => "valid",
            StartupMode::AuthRequired => "auth-required",
            StartupMode::InstallFailed => "install-failed",
            StartupMode::Missing => "missing",
            StartupMode::Malformed => "malformed",
            StartupMode::Foreign => "foreign",
            StartupMode::ForeignInstance => "foreign-instance",
            StartupMode::UnknownCode => "unknown-code",
        }
    }

    pub fn parse(s: &str) -> Option<StartupMode> {
        StartupMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// The Pod label that picks the startup mode of every start.
pub const STARTUP_LABEL: &str = "standin.clawfed.test/startup";
/// The file (beside the container root) that picks the next starts' mode.
pub const STARTUP_MODE_FILE: &str = "standin-startup-mode";

#[derive(Debug)]
pub struct Harness {
    pub identity: Identity,
    /// `STANDIN_NOT_READY=1`: /healthz answers 503.
    pub not_ready: bool,
    pub env: BTreeMap<String, String>,
    /// This start's startup mode.
    pub startup: StartupMode,
    /// The admitted plugin selections.
    pub selections: Vec<String>,
    /// Cancelled by `POST /_standin/restart`: the process ends (and the
    /// runner starts it again).
    pub restart: tokio_util::sync::CancellationToken,
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
            agent: pick("CLAWFED_AGENT", clawfed_proto::labels::AGENT),
            revision: pick("CLAWFED_REVISION", clawfed_proto::labels::REVISION),
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
        let startup = mode_file(&env)
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|m| StartupMode::parse(m.trim()))
            .or_else(|| {
                labels
                    .get(STARTUP_LABEL)
                    .and_then(|m| StartupMode::parse(m))
            })
            .unwrap_or(StartupMode::Valid);
        let selections = env
            .get(startup::SELECTIONS_ENV)
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        Self {
            identity,
            not_ready: env.get("STANDIN_NOT_READY").is_some_and(|v| v == "1"),
            env,
            startup,
            selections,
            restart: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Ends the process through `token` on `POST /_standin/restart`.
    pub fn with_restart(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.restart = token;
        self
    }

    /// This start's plugin startup status body (`None`: 404).
    pub fn startup_body(&self) -> Option<Vec<u8>> {
        let get = |k: &str| self.env.get(k).cloned().unwrap_or_default();
        let mut status = StartupStatus {
            revision_id: get(startup::REVISION_ID_ENV),
            runtime_instance: get(startup::RUNTIME_INSTANCE_ENV),
            successful: self.selections.clone(),
            warnings: Vec::new(),
        };
        let mut warn_last = |code: &str| {
            if let Some(last) = status.successful.pop() {
                status.warnings.push(PublishedWarning {
                    selection: last,
                    code: code.into(),
                });
            }
        };
        match self.startup {
            StartupMode::Valid => {}
            StartupMode::AuthRequired => warn_last(WarningCode::PluginAuthRequired.as_str()),
            StartupMode::InstallFailed => warn_last(WarningCode::PluginInstallFailed.as_str()),
            StartupMode::UnknownCode => warn_last("PLUGIN_EXPLODED"),
            StartupMode::Missing => return None,
            StartupMode::Malformed => return Some(br#"{"revisionId": "#.to_vec()),
            StartupMode::Foreign => status.revision_id = format!("foreign-{}", status.revision_id),
            StartupMode::ForeignInstance => {
                status.runtime_instance = format!("previous-{}", status.runtime_instance)
            }
        }
        serde_json::to_vec(&status).ok()
    }
}

/// `standin-startup-mode` beside the container root.
fn mode_file(env: &BTreeMap<String, String>) -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env.get("CLAWFED_STANDIN_ROOT")?);
    Some(root.parent()?.join(STARTUP_MODE_FILE))
}

pub fn router(h: Arc<Harness>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/startupz", get(startupz))
        .route("/identity", get(identity))
        .route("/echo", any(echo))
        .route("/slow", get(slow))
        .route("/stream", get(stream))
        .route("/bytes", get(bytes))
        .route("/sink", post(sink))
        .route("/env/{name}", get(env_var))
        .route(startup::PATH, get(startup_status))
        .route(diagnostics::PATH, get(diagnostics_checks))
        .route("/_standin/restart", post(restart))
        .with_state(h)
        // The runtime's chat endpoint (the hub's activation turn): answered
        // by the model stand-in's rule, as if the runtime asked a model.
        .merge(super::model::chat_router(Arc::new(
            super::model::Model::from_env(Default::default()),
        )))
}

async fn healthz(State(h): State<Arc<Harness>>) -> Response {
    if h.not_ready {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n").into_response()
    } else {
        "ok".into_response()
    }
}

/// The real runtime's readiness answer, in its shape (JSON body; 503 while
/// `STANDIN_NOT_READY=1`).
async fn readyz(State(h): State<Arc<Harness>>) -> Response {
    if h.not_ready {
        let body = serde_json::json!({"ready": false, "failing": ["standin"]});
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    } else {
        Json(serde_json::json!({"ready": true, "failing": []})).into_response()
    }
}

/// The real runtime's startup answer: started as soon as it serves.
async fn startupz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true, "status": "started"}))
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

async fn startup_status(State(h): State<Arc<Harness>>) -> Response {
    match h.startup_body() {
        Some(body) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no startup status\n").into_response(),
    }
}

/// Generic checks of this start: whether a valid startup status is served
/// and how many selections it enabled.
async fn diagnostics_checks(State(h): State<Arc<Harness>>) -> Json<DiagnosticsBody> {
    let (status, enabled) = match h.startup {
        StartupMode::Valid => ("ok", h.selections.len()),
        StartupMode::AuthRequired | StartupMode::InstallFailed => {
            ("warn", h.selections.len().saturating_sub(1))
        }
        _ => ("fail", 0),
    };
    Json(DiagnosticsBody {
        checks: vec![
            PublishedCheck {
                name: "startup".into(),
                status: if status == "fail" { "fail" } else { "ok" }.into(),
                detail: format!("startup status: {}", h.startup.as_str()),
            },
            PublishedCheck {
                name: "plugins".into(),
                status: status.into(),
                detail: format!("{enabled} of {} selections enabled", h.selections.len()),
            },
        ],
    })
}

#[derive(Debug, Deserialize)]
struct RestartQuery {
    startup: String,
}

/// Persists the startup mode of the next starts and ends this process.
async fn restart(State(h): State<Arc<Harness>>, Query(q): Query<RestartQuery>) -> Response {
    let Some(mode) = StartupMode::parse(&q.startup) else {
        return (
            StatusCode::BAD_REQUEST,
            format!("startup: unknown mode {:?}\n", q.startup),
        )
            .into_response();
    };
    let Some(file) = mode_file(&h.env) else {
        return (StatusCode::CONFLICT, "CLAWFED_STANDIN_ROOT is not set\n").into_response();
    };
    if let Err(e) = std::fs::write(&file, mode.as_str()) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("writing {}: {e}\n", file.display()),
        )
            .into_response();
    }
    tracing::info!(mode = mode.as_str(), "restart requested");
    // Graceful: this answer is sent before the process ends.
    h.restart.cancel();
    "restarting\n".into_response()
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

    fn standin(mode: Option<&str>, root: Option<&std::path::Path>) -> Harness {
        let mut env: BTreeMap<String, String> = [
            (startup::SELECTIONS_ENV, r#"["alpha","beta"]"#),
            (startup::REVISION_ID_ENV, "rev-1"),
            (startup::RUNTIME_INSTANCE_ENV, "uid-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(m) = mode {
            env.insert(
                "CLAWFED_POD_LABELS".into(),
                serde_json::json!({ STARTUP_LABEL: m }).to_string(),
            );
        }
        if let Some(r) = root {
            env.insert("CLAWFED_STANDIN_ROOT".into(), r.display().to_string());
        }
        Harness::from_env(env)
    }

    /// The default status is valid for the spoke's own rule; each test mode
    /// is refused by it for the reason it stands for.
    #[test]
    fn startup_modes_against_the_contract() {
        let admitted = vec!["alpha".to_string(), "beta".to_string()];
        let expected = startup::Expected {
            revision_id: "rev-1",
            runtime_instance: "uid-1",
            admitted: &admitted,
        };
        let check = |mode: Option<&str>| {
            let body = standin(mode, None).startup_body().unwrap_or_default();
            startup::parse(&body, &expected)
        };
        let ok = check(None).expect("default is valid");
        assert_eq!(ok.successful, admitted);
        let warned = check(Some("auth-required")).expect("a warning is valid");
        assert_eq!(warned.warnings[0].selection, "beta");
        assert_eq!(warned.warnings[0].code, WarningCode::PluginAuthRequired);
        assert_eq!(check(Some("missing")), Err(startup::StartupError::Missing));
        assert!(matches!(
            check(Some("malformed")),
            Err(startup::StartupError::Malformed(_))
        ));
        assert!(matches!(
            check(Some("foreign")),
            Err(startup::StartupError::ForeignRevision { .. })
        ));
        assert!(matches!(
            check(Some("foreign-instance")),
            Err(startup::StartupError::ForeignInstance { .. })
        ));
        assert!(matches!(
            check(Some("unknown-code")),
            Err(startup::StartupError::UnknownCode { .. })
        ));
    }

    /// The mode file beside the root wins over the label, for every later
    /// start.
    #[test]
    fn the_mode_file_outlives_the_root_and_wins() {
        let dir = std::env::temp_dir().join(format!("standin-{}", rand::random::<u64>()));
        let root = dir.join("root");
        std::fs::create_dir_all(&root).expect("root");
        assert_eq!(
            standin(Some("missing"), Some(&root)).startup,
            StartupMode::Missing
        );
        std::fs::write(dir.join(STARTUP_MODE_FILE), "auth-required\n").expect("write");
        assert_eq!(
            standin(Some("missing"), Some(&root)).startup,
            StartupMode::AuthRequired
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
