//! The real OpenClaw runtime in the test clusters: its image (the version
//! `e2e/openclaw.sh` installs, which the pod runner runs), the model
//! stand-in Pod that answers its turns, and a chat turn against its
//! OpenAI-compatible endpoint.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

pub use crate::kube_env::pod_ip;
use crate::kube_env::{eventually, pod_ready};

/// The gateway's port (HTTP, WebSocket and Control UI together).
pub const PORT: u16 = 18789;
/// The model stand-in's port.
pub const MODEL_PORT: u16 = 8000;
/// The model id the stand-in serves.
pub const MODEL_ID: &str = "standin-model";
/// The runtime needs 10-20 s to turn ready on an idle machine; the suite's
/// machine is busy: with two real runtimes starting beside the rest of
/// `pipeline_e2e` on 2 cores, 240 s was once not enough for revision 1 to
/// turn Active (it passed alone, in 231 s for the whole test).
pub const START_WAIT: Duration = Duration::from_secs(420);

/// The version of `e2e/openclaw/package.json` (what `e2e/openclaw.sh`
/// installs for the pod runner).
pub fn version() -> Result<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../e2e/openclaw/package.json");
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    v["dependencies"]["openclaw"]
        .as_str()
        .map(str::to_owned)
        .context("package.json names no openclaw version")
}

/// `clawfed.test/openclaw:<version>`.
pub fn image() -> Result<String> {
    Ok(format!("clawfed.test/openclaw:{}", version()?))
}

/// The Codex CLI's version in `e2e/openclaw/package-lock.json` (the
/// bundled Codex plugin's `@openai/codex`, which the pod runner runs for
/// `clawfed.test/codex:<version>`).
pub fn codex_version() -> Result<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../e2e/openclaw/package-lock.json"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    v["packages"]["node_modules/@openai/codex"]["version"]
        .as_str()
        .map(str::to_owned)
        .context("package-lock.json has no @openai/codex")
}

/// `clawfed.test/codex:<version>`: `codex app-server` for a dedicated
/// Codex Harness.
pub fn codex_image() -> Result<String> {
    Ok(format!("clawfed.test/codex:{}", codex_version()?))
}

/// [`image`] pinned by a digest too (`:<version>@sha256:<hex>`), for an
/// installation that requires immutable digests; the pod runner runs the
/// version.
pub fn pinned_image() -> Result<String> {
    Ok(format!("{}@sha256:{}", image()?, "0c".repeat(32)))
}

/// The live Ready Pod matching `labels` (other than `not_uid`), waiting up
/// to `wait`.
pub async fn ready_pod(
    pods: &Api<Pod>,
    labels: &str,
    not_uid: Option<&str>,
    wait: Duration,
) -> Result<Pod> {
    let lp = ListParams::default().labels(labels);
    eventually(wait, &format!("a Ready Pod {labels}"), || async {
        let list = pods.list(&lp).await?;
        Ok(list.items.into_iter().find(|p| {
            pod_ready(p)
                && p.metadata.deletion_timestamp.is_none()
                && not_uid.is_none_or(|u| p.metadata.uid.as_deref() != Some(u))
        }))
    })
    .await
}

/// Deploys the model stand-in (`clawfed.test/model-standin`) in
/// `namespace` and returns its base URL (`http://<pod IP>:8000/v1`), which
/// every Pod of the test network reaches.
pub async fn deploy_model(client: &Client, namespace: &str) -> Result<String> {
    deploy_model_named(client, namespace, "model-standin", None).await
}

/// As [`deploy_model`], as Deployment `name`; with `require_key`, the
/// stand-in answers only that Bearer token (any other gets 401, as a model
/// provider refuses a wrong key).
pub async fn deploy_model_named(
    client: &Client,
    namespace: &str,
    name: &str,
    require_key: Option<&str>,
) -> Result<String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let mut env = vec![json!({"name": "MODEL_STANDIN_MODELS", "value": MODEL_ID})];
    if let Some(key) = require_key {
        env.push(json!({"name": "MODEL_STANDIN_REQUIRE_KEY", "value": key}));
    }
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "model",
                    "image": "clawfed.test/model-standin:test",
                    "env": env,
                    "ports": [{"name": "http", "containerPort": MODEL_PORT}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1}
                }]}
            }
        }
    }))?;
    deployments.create(&PostParams::default(), &d).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = ready_pod(&pods, &format!("app={name}"), None, Duration::from_secs(60)).await?;
    Ok(format!("http://{}:{MODEL_PORT}/v1", pod_ip(&pod)?))
}

/// What the model stand-in at `base_url` has answered: the count and the
/// user text of each request, oldest first (`GET /_standin/requests`).
pub async fn model_requests(base_url: &str) -> Result<(u64, Vec<String>)> {
    let root = base_url.trim_end_matches("/v1");
    let v: serde_json::Value = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?
        .get(format!("{root}/_standin/requests"))
        .send()
        .await?
        .json()
        .await?;
    let users = v["users"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| u.as_str().map(str::to_owned))
        .collect();
    Ok((v["count"].as_u64().unwrap_or(0), users))
}

/// One chat turn: `POST /v1/chat/completions` on the gateway at `addr`
/// with its token; `user` keys the conversation (the gateway keeps its
/// history). Returns the assistant's answer.
pub async fn chat(addr: SocketAddr, token: &str, user: &str, message: &str) -> Result<String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let resp = http
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth(token)
        .json(&json!({
            "model": "openclaw/default",
            "user": user,
            "messages": [{"role": "user", "content": message}]
        }))
        .send()
        .await
        .with_context(|| format!("chat turn to {addr}"))?;
    let status = resp.status();
    let body = resp.text().await?;
    ensure!(status.is_success(), "chat turn: HTTP {status}: {body}");
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("chat answer is not JSON: {body}"))?;
    v["choices"][0]["message"]["content"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no answer content in {body}"))
}

/// `GET path` on the gateway at `addr`: status and body.
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?
        .get(format!("http://{addr}{path}"))
        .send()
        .await?;
    Ok((resp.status().as_u16(), resp.text().await?))
}
