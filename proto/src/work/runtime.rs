//! How an OpenClaw Harness gets its configuration and state: paths and
//! environment the hub renders the config for and the spoke mounts and sets.

/// Where the rendered config is mounted (read-only).
pub const CONFIG_DIR: &str = "/etc/openclaw";
/// The config file's name: its key in the Harness credential Secret too.
pub const CONFIG_FILE: &str = "openclaw.json";
/// `CONFIG_DIR/CONFIG_FILE`.
pub const CONFIG_PATH: &str = "/etc/openclaw/openclaw.json";
/// The runtime's writable home: its state directory and `HOME` below it.
pub const DATA_DIR: &str = "/var/lib/openclaw";
/// `OPENCLAW_STATE_DIR`: SQLite, sessions, the default workspace.
pub const STATE_DIR: &str = "/var/lib/openclaw/state";
/// `HOME` (the root filesystem is read-only).
pub const HOME_DIR: &str = "/var/lib/openclaw/home";
/// Key of the gateway's token in the Harness credential Secret (and the
/// runtime's environment variable for it).
pub const GATEWAY_TOKEN_ENV: &str = "OPENCLAW_GATEWAY_TOKEN";
/// The environment every OpenClaw Harness gets besides its credentials:
/// the config file (read-only), the state dir, `HOME`, and no update or
/// discovery attempts (air-gapped clusters).
pub const ENV: [(&str, &str); 6] = [
    ("OPENCLAW_CONFIG_PATH", CONFIG_PATH),
    ("OPENCLAW_CONFIG_READONLY", "1"),
    ("OPENCLAW_STATE_DIR", STATE_DIR),
    ("HOME", HOME_DIR),
    ("OPENCLAW_NO_AUTO_UPDATE", "1"),
    ("OPENCLAW_DISABLE_BONJOUR", "1"),
];
/// The runtime container's resources when the installation sets none,
/// from what it was measured to use here (`openclaw gateway run`,
/// 2026.9.6): about 0.94 GB RSS idle, 1.15 GB 20 s after start, 1.47 GB
/// after a chat (main process and two workers). The request covers the
/// working set, so a node is not overcommitted by design; the limit
/// leaves headroom, as OpenClaw's own manifest (2Gi) does.
pub fn default_resources() -> super::Resources {
    super::Resources::from_pairs(
        &[("cpu", "250m"), ("memory", "1536Mi")],
        &[("memory", "2Gi")],
    )
}
/// `NODE_OPTIONS` for a runtime whose memory limit is `limit_bytes`: V8's
/// old space at three quarters of it, so the heap is collected before
/// the kernel kills the container (`--max-old-space-size=1536` at 2Gi,
/// as OpenClaw's manifest sets it).
pub fn node_options(limit_bytes: u64) -> String {
    format!("--max-old-space-size={}", limit_bytes / (1 << 20) * 3 / 4)
}
/// Health paths of the runtime, each answered with a JSON body.
pub const STARTUP_PATH: &str = "/startupz";
pub const READY_PATH: &str = "/readyz";
pub const LIVE_PATH: &str = "/healthz";
