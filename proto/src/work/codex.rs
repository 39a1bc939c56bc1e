//! The Codex app-server a dedicated Codex Agent's Harness runs (`codex
//! app-server`): its Gateway's Codex plugin talks to it over WebSocket,
//! authenticated by a capability token the hub derives per revision.

/// `CODEX_HOME` (its login, threads and SQLite): on the Agent-owned
/// workspace claim, so a conversation survives a redeploy.
pub const HOME_DIR: &str = "/workspace/.codex";
/// The workspace the Gateway maps its own into (the Codex plugin's
/// `remoteWorkspaceRoot`): the claim, where the Harness mounts it.
pub const WORKSPACE_ROOT: &str = "/workspace";
/// Where the capability token is mounted (read-only).
pub const TOKEN_DIR: &str = "/etc/codex";
/// The token's key in the Harness credential Secret and its file name
/// under [`TOKEN_DIR`] (a file, never in the environment).
pub const TOKEN_FILE: &str = "app-server-token";
/// `TOKEN_DIR/TOKEN_FILE`.
pub const TOKEN_PATH: &str = "/etc/codex/app-server-token";
/// The app-server's resources when the installation sets none: it was
/// measured at about 120 MB RSS after a few turns (a native binary);
/// the limit leaves room for the tools it runs.
pub fn default_resources() -> super::Resources {
    super::Resources::from_pairs(
        &[("cpu", "100m"), ("memory", "256Mi")],
        &[("memory", "1Gi")],
    )
}
/// Health paths of the app-server (`GET`, no auth).
pub const READY_PATH: &str = "/readyz";
pub const LIVE_PATH: &str = "/healthz";

/// The container's arguments: the app-server on every address of the
/// Pod at `port`, capability-token auth (required off loopback), no
/// analytics, and the model API at `model_base_url` when given (Codex's
/// `openai_base_url`: its OpenAI provider's endpoint).
pub fn args(port: i32, model_base_url: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = [
        "app-server",
        "--listen",
        &format!("ws://0.0.0.0:{port}"),
        "--ws-auth",
        "capability-token",
        "--ws-token-file",
        TOKEN_PATH,
        "-c",
        "analytics.enabled=false",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if let Some(url) = model_base_url {
        args.push("-c".into());
        // A TOML string: JSON's escaping is valid TOML basic-string escaping.
        args.push(format!("openai_base_url={}", serde_json::Value::from(url)));
    }
    args
}
