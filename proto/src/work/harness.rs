//! Names of a Harness revision's objects in the execution cluster, and how
//! the Gateway reaches it: the hub and the spoke both use these.

/// The port the Harness serves on unless the work says otherwise.
pub const DEFAULT_PORT: i32 = 8080;
/// Environment variable telling a native OpenClaw Harness how many
/// sessions it may hold (`nativeOpenClawSessionCapacity`).
pub const SESSION_CAPACITY_ENV: &str = "OPENCLAW_SESSION_CAPACITY";
/// Sessions a native OpenClaw Harness holds unless configured.
pub const DEFAULT_SESSION_CAPACITY: u32 = 8;
/// Lifetime of a service principal token unless configured.
pub const SERVICE_PRINCIPAL_TOKEN_SECONDS: i64 = 900;
/// Where the service principal token is mounted (read-only), in
/// Harness and Gateway Pods alike.
pub const SERVICE_PRINCIPAL_DIR: &str = "/var/run/secrets/openclaw/service-principal";
/// The token's file name inside [`SERVICE_PRINCIPAL_DIR`].
pub const SERVICE_PRINCIPAL_FILE: &str = "token";
/// Environment variable naming the token file.
pub const SERVICE_PRINCIPAL_ENV: &str = "OPENCLAW_SERVICE_PRINCIPAL_TOKEN_FILE";

/// Deployment, Service and ServiceAccount: `<agent>-r<N>-harness`.
pub fn object_name(agent: &str, revision: i64) -> String {
    format!("{agent}-r{revision}-harness")
}

/// The credential Secret: `<agent>-r<N>-credentials`.
pub fn credentials_name(agent: &str, revision: i64) -> String {
    format!("{agent}-r{revision}-credentials")
}

/// The Agent-owned workspace PVC: `<agent>-workspace`. One claim per
/// Agent and execution cluster, reused by every revision there (the
/// runtime's state and workspace survive a redeploy); retirement keeps
/// it, only the Agent's deletion removes it ([`RevisionWork::agent_deleted`]).
pub fn workspace_name(agent: &str) -> String {
    format!("{agent}-workspace")
}

/// The in-cluster URL of the Harness Service (valid inside the
/// execution cluster only).
pub fn service_url(agent: &str, revision: i64, namespace: &str, port: i32) -> String {
    format!(
        "http://{}.{namespace}.svc:{port}",
        object_name(agent, revision)
    )
}
