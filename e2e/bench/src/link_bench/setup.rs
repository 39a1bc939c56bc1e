//! Setup: the enrolled spokes' identities as `--state-dir` keeps them,
//! and the hub's configuration.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RunArgs;

/// An enrolled spoke as `--state-dir` keeps it between runs.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct SavedIdentity {
    pub(super) name: String,
    pub(super) cluster_id: String,
    pub(super) key_pem: String,
    pub(super) cert_pem: String,
}

pub(super) fn hub_config(
    dir: &Path,
    db_url: &str,
    link_port: u16,
    a: &RunArgs,
) -> anyhow::Result<PathBuf> {
    let path = dir.join("hub.yaml");
    let yaml = format!(
        "version: 1
database:
  url: \"{db_url}\"
api:
  restAddr: 127.0.0.1:0
  grpcAddr: 127.0.0.1:0
  metricsAddr: 127.0.0.1:0
  maxBodyBytes: 1048576
link:
  enabled: true
  addr: 127.0.0.1:{link_port}
  caDir: \"{ca}\"
  serverNames: [localhost, 127.0.0.1]
  certTtlSeconds: 604800
  heartbeatSeconds: {hb}
  maxSessions: {max}
  maxConcurrentHandshakes: {hs}
  # Every simulated spoke dials from 127.0.0.1: one source address.
  maxHandshakesPerSource: {hs}
  maxMessageBytes: 4194304
tunnel:
  enabled: false
log:
  format: text
  filter: warn
",
        ca = dir.join("ca").display(),
        hb = a.heartbeat_seconds,
        max = a.spokes + 1000,
        hs = a.max_concurrent_handshakes,
    );
    std::fs::write(&path, yaml)?;
    Ok(path)
}
